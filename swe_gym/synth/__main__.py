"""``python -m swe_gym.synth REPO --out tasks.jsonl``: synthetic tasks from a repository's tests.

REPO is a local git repository whose tests run with pytest, or a bundled one by name
(``starter/textkit``). The rows load with ``swe_gym.tasks.load_tasks``; sandboxes find their
repository under ``--repos-dir`` (pass it as ``repos_dir`` or set ``SWE_GYM_REPOS``).
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from swe_gym.synth.issue import Rewrite
from swe_gym.synth.operators import OPERATORS
from swe_gym.synth.pipeline import DEFAULT_TEST_CMD, SynthConfig, default_repos_dir, synthesize
from swe_gym.synth.tiers import EASY_OPERATORS, TIERS


def resolve_source(repo: str) -> Path:
    """A path to a git repository, or a bundled repository's name (built into the cache)."""
    path = Path(repo).expanduser()
    if path.exists():
        return path
    from swe_gym.starter import STARTER_REPOS, repo_path

    if repo in STARTER_REPOS:
        return Path(repo_path(repo))
    raise SystemExit(
        f"REPO {repo!r} is neither an existing directory nor a bundled repository; "
        f"accepted: a path to a git checkout, or one of {', '.join(sorted(STARTER_REPOS))}"
    )


def load_rewrite(spec: str) -> Rewrite:
    module, _, name = spec.partition(":")
    if not module or not name:
        raise SystemExit(
            f"--rewrite {spec!r} must be module:function (a callable (text, context) -> text)"
        )
    fn = getattr(importlib.import_module(module), name, None)
    if not callable(fn):
        raise SystemExit(f"--rewrite {spec!r}: {module} has no callable {name!r}")
    return fn


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m swe_gym.synth", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "repo",
        help="a local git repository (its HEAD is used) or a bundled name such as starter/textkit",
    )
    p.add_argument(
        "--out",
        type=Path,
        required=True,
        help="tasks JSONL to write (state and summary go next to it)",
    )
    p.add_argument(
        "--repos-dir",
        type=Path,
        default=None,
        help=f"where the derived repository goes (default $SWE_GYM_REPOS, else {default_repos_dir()})",
    )
    p.add_argument(
        "--repo-name", default=None, help="the rows' repo, owner/name (default synth/<folder name>)"
    )
    p.add_argument(
        "--operators", default=None, help=f"comma-separated subset of: {', '.join(OPERATORS)}"
    )
    p.add_argument(
        "--tier",
        choices=TIERS,
        default="all",
        help="all (default); easy: only local single-line edits "
        f"({', '.join(EASY_OPERATORS)}) and an issue that names the file and function; "
        "located: those edits with an issue that also quotes the line and names the kind of "
        "mistake, not the fix; "
        "guided: an issue that quotes the line as it is and as it "
        "should be (a tier for learning the tools and the action format)",
    )
    p.add_argument(
        "--include",
        action="append",
        default=None,
        help="glob of files to mutate, repeatable (default: every non-test .py file)",
    )
    p.add_argument(
        "--max-candidates", type=int, default=None, help="validate at most this many mutants"
    )
    p.add_argument("--workers", type=int, default=2, help="parallel sandboxes (default 2)")
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds per mutant's test run (default: 3 x the clean run + 5, at least 10)",
    )
    p.add_argument("--seed", type=int, default=0, help="order in which candidates are tried")
    p.add_argument(
        "--test-cmd", default=DEFAULT_TEST_CMD, help=f"test command (default {DEFAULT_TEST_CMD!r})"
    )
    p.add_argument("--backend", default="local", help="sandbox backend (default local)")
    p.add_argument(
        "--rewrite", default=None, help="module:function that rewrites each issue text (an LM hook)"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--no-audit", action="store_true", help="keep candidates whose tests pay an exploit"
    )
    p.add_argument("--no-hidden-tests", action="store_true", help="write no hidden test")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ops = [o.strip() for o in args.operators.split(",") if o.strip()] if args.operators else None
    unknown = [o for o in ops or [] if o not in OPERATORS]
    if unknown:
        raise SystemExit(f"unknown operator(s) {unknown}; accepted: {', '.join(OPERATORS)}")
    cfg = SynthConfig(
        source=resolve_source(args.repo),
        out=args.out,
        repos_dir=args.repos_dir or default_repos_dir(),
        repo_name=args.repo_name,
        operators=ops,
        tier=args.tier,
        include=args.include,
        max_candidates=args.max_candidates,
        workers=args.workers,
        timeout=args.timeout,
        seed=args.seed,
        test_cmd=args.test_cmd,
        backend=args.backend,
        rewrite=load_rewrite(args.rewrite) if args.rewrite else None,
        progress=not args.no_progress,
        audit=not args.no_audit,
        hidden_tests=not args.no_hidden_tests,
    )
    summary = synthesize(cfg)
    return 0 if summary["rows_written"] or not summary["candidates"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
