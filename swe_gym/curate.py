"""``python -m swe_gym.curate``: SWE-RL data curation from GH Archive events + local clones.

Example::

    python -m swe_gym.curate --events 2024-01-*.json.gz --repos clones/ --out tasks.jsonl \\
        --licence-allow MIT Apache-2.0 --exclude-repos django/django --require-tests

Clones live at ``DIR/<owner>__<name>``. Rerunning with the same ``--out`` resumes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from swe_gym.curation.pipeline import VALIDATE_BACKENDS, CurationConfig, curate


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m swe_gym.curate", description=__doc__.splitlines()[0]
    )
    p.add_argument(
        "--events",
        nargs="+",
        required=True,
        help="GH Archive event files (.json/.jsonl, optionally .gz)",
    )
    p.add_argument("--repos", required=True, help="directory of clones named <owner>__<name>")
    p.add_argument("--out", required=True, help="output JSONL (appended to; rerun to resume)")
    p.add_argument(
        "--licence-allow", nargs="*", default=None, help="SPDX ids to keep (default: all)"
    )
    p.add_argument(
        "--exclude-repos", nargs="*", default=[], help="owner/name to drop (decontamination)"
    )
    p.add_argument("--exclude-repos-file", help="file with one owner/name per line to drop")
    p.add_argument("--created-after", help="keep PRs created after this ISO date")
    p.add_argument("--require-tests", action="store_true", help="drop PRs that change no test file")
    p.add_argument(
        "--max-changed-lines", type=int, default=2000, help="drop PRs changing more non-test lines"
    )
    p.add_argument(
        "--validate",
        choices=VALIDATE_BACKENDS,
        help="run tests before/after (fresh sandboxes, local: clones from --repos) to derive "
        "FAIL_TO_PASS/PASS_TO_PASS; rows with none are dropped",
    )
    p.add_argument(
        "--install-configs",
        help='JSON file {"owner/name": install_config} for --validate; its test_cmd (default '
        '"pytest -rA", followed by the test patch\'s files), log_parser (default '
        "parse_log_pytest), env_vars; Docker also reads python and pip_packages",
    )
    p.add_argument("--selector", default="bm25", help="relevant-file selector: bm25 | none")
    p.add_argument("--max-relevant-files", type=int, default=3)
    p.add_argument("--no-progress", action="store_true", help="no tqdm bars")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    exclude = list(args.exclude_repos)
    if args.exclude_repos_file:
        exclude += [
            x.strip() for x in Path(args.exclude_repos_file).read_text().splitlines() if x.strip()
        ]
    install = json.loads(Path(args.install_configs).read_text()) if args.install_configs else {}
    cfg = CurationConfig(
        events=args.events,
        repos_dir=args.repos,
        out=args.out,
        licence_allow=args.licence_allow,
        exclude_repos=exclude,
        created_after=args.created_after,
        require_tests=args.require_tests,
        max_changed_lines=args.max_changed_lines,
        validate=args.validate,
        selector=args.selector,
        max_relevant_files=args.max_relevant_files,
        install_configs=install,
        progress=False if args.no_progress else None,
    )
    summary = curate(cfg)
    print(summary.table())
    print(json.dumps(summary.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
