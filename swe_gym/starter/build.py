"""Build the SWEStarter repositories and compile ``tasks.jsonl``; the maintainer's self-check.

Layout of the sources (everything a reviewer reads):

- ``repos/<name>/history.json``: the commits, oldest first: ``dir`` (the snapshot folder),
  ``message``, ``date`` (ISO 8601), optional ``author`` (``"Name <email>"``), optional
  ``delete`` (paths removed in that commit) and ``hash`` (written by this script).
- ``repos/<name>/<dir>/``: the files that commit adds or changes, full contents. Later commits
  overlay earlier ones. Names are stored so that everything is package data: one trailing
  ``.txt`` is dropped and a ``dot_`` prefix becomes ``.`` (``wrap.py.txt`` -> ``wrap.py``,
  ``dot_gitignore.txt`` -> ``.gitignore``); ``README.md`` stays as it is.
- ``tasks/<instance_id>/``: ``issue.md`` (the problem statement), ``fix.patch`` (gold patch,
  non-test files), ``test.patch`` (test files), ``meta.json`` (``repo``, ``base`` = snapshot
  folder of the base commit, ``created_at``, ``difficulty``, ``kind``, ``FAIL_TO_PASS``).

The repositories are written with ``git fast-import`` (no hooks, filters, signing or user
config are involved), with fixed names, emails and dates, so every machine gets the same hashes.

Adding a task: write the four files of ``tasks/<id>/`` (make the patches with ``git diff`` in a
clone of ``repo_path(...)`` at the base commit), then run ``python -m swe_gym.starter.build``:
it rebuilds the repositories, records the commit hashes, runs every task before and after its
gold patch, derives PASS_TO_PASS (tests that pass both times), checks that the declared
FAIL_TO_PASS is exactly the set that flips, and rewrites ``tasks.jsonl``. ``--check`` changes
nothing and exits 1 if a hash, a row or a task's validation differs.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swe_gym.starter._core import (
    OWNER,
    PKG_DIR,
    TASKS_FILE,
    build_repo,
    ensure_repo,
    full_name,
    git,
    history_path,
    load_history,
    read_tasks_file,
    repo_names,
    short_name,
)
from swe_gym.tasks import Task, normalise_row, patch_files

TASKS_DIR = PKG_DIR / "tasks"
INSTALL_CONFIG: dict[str, Any] = {
    "python": "3.11",
    "install": "",
    "test_cmd": "pytest -rA",
    "log_parser": "parse_log_pytest",
    "packages": "",
    "pip_packages": ["pytest"],
    "pre_install": [],
    "reqs_path": [],
    "env_vars": {},
    "env_yml_path": [],
    "no_use_env": False,
}
# one-line: one line replaced; multi-hunk: several lines in one file; multi-file: several
# files; feature: new behaviour asked for in the issue (checked in patch_problems).
KINDS = ("one-line", "multi-hunk", "multi-file", "feature")
DIFFICULTIES = ("easy", "medium", "hard")
PASSING = ("PASSED", "XFAIL")  # the SWE-bench rule (docs/methods.md#grading)
TEST_TIMEOUT_S = 120


# ------------------------------------------------------------------------------- tasks


def is_test_path(path: str) -> bool:
    """Test files by the usual pytest conventions (what a test patch may touch)."""
    parts = path.split("/")
    base = parts[-1]
    return (
        "tests" in parts[:-1]
        or "test" in parts[:-1]
        or base.startswith("test_")
        or base.endswith("_test.py")
        or base == "conftest.py"
    )


def task_dirs() -> list[Path]:
    def key(p: Path) -> tuple[str, int]:
        prefix, _, num = p.name.rpartition("-")
        return (prefix, int(num) if num.isdigit() else 0)

    return sorted((p for p in TASKS_DIR.iterdir() if (p / "meta.json").is_file()), key=key)


def source_row(task_dir: Path, commits: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
    """The tasks.jsonl row of one task folder, except PASS_TO_PASS (derived by running it).

    ``commits`` maps repo short name -> snapshot folder -> hash.
    """
    iid = task_dir.name
    meta = json.loads((task_dir / "meta.json").read_text(encoding="utf-8"))
    repo = meta["repo"]
    if repo not in commits:
        raise ValueError(
            f"{task_dir}/meta.json: unknown repo {repo!r}; choose one of: {sorted(commits)}"
        )
    if meta["base"] not in commits[repo]:
        raise ValueError(
            f"{task_dir}/meta.json: base {meta['base']!r} is not a commit folder of {repo}; "
            f"choose one of: {list(commits[repo])}"
        )
    if meta["kind"] not in KINDS or meta["difficulty"] not in DIFFICULTIES:
        raise ValueError(
            f"{task_dir}/meta.json: kind must be one of {KINDS}, difficulty one of {DIFFICULTIES}"
        )
    if not iid.startswith(f"{OWNER}__{repo}-"):
        raise ValueError(f"task folder {iid!r} must be named {OWNER}__{repo}-<n>")
    patch = (task_dir / "fix.patch").read_text(encoding="utf-8")
    test_patch = (task_dir / "test.patch").read_text(encoding="utf-8")
    base = commits[repo][meta["base"]]
    return {
        "instance_id": iid,
        "repo": full_name(repo),
        "base_commit": base,
        "problem_statement": (task_dir / "issue.md").read_text(encoding="utf-8").strip() + "\n",
        "hints_text": "",
        "patch": patch,
        "test_patch": test_patch,
        "FAIL_TO_PASS": sorted(meta["FAIL_TO_PASS"]),
        "PASS_TO_PASS": [],
        "version": "0.1",
        "environment_setup_commit": base,
        "created_at": meta["created_at"],
        "install_config": INSTALL_CONFIG,
        "license_name": "MIT",
        "meta": {
            "difficulty": meta["difficulty"],
            "kind": meta["kind"],
            "num_modified_files": len(patch_files(patch)),
        },
    }


def patch_problems(task: Task) -> list[str]:
    """Static checks: the gold patch touches only code, the test patch only tests."""
    problems = []
    if not task.code_files:
        problems.append("patch touches no file")
    if not task.test_files:
        problems.append("test_patch touches no file")
    problems += [f"patch touches test file {p}" for p in task.code_files if is_test_path(p)]
    problems += [
        f"test_patch touches non-test file {p}" for p in task.test_files if not is_test_path(p)
    ]
    kind = task.meta.get("kind")
    shape = patch_shape(task.patch)
    expected = {
        # exactly one line replaced (or added)
        "one-line": shape["files"] == 1 and shape["removed"] <= 1 and shape["added"] == 1,
        # one file, more than one line changed
        "multi-hunk": shape["files"] == 1 and shape["removed"] + shape["added"] > 2,
        "multi-file": shape["files"] >= 2,
        "feature": shape["added"] > 0,
    }
    if kind not in expected:
        problems.append(f"meta.kind {kind!r} is not one of {KINDS}")
    elif not expected[kind]:
        problems.append(f"meta.kind is {kind!r} but the patch changes {shape}")
    if task.meta.get("num_modified_files") != shape["files"]:
        problems.append(f"meta.num_modified_files is not {shape['files']}")
    return problems


def patch_shape(patch: str) -> dict[str, int]:
    """Files, hunks and changed lines of a git diff."""
    lines = patch.splitlines()
    return {
        "files": sum(line.startswith("diff --git ") for line in lines),
        "hunks": sum(line.startswith("@@ ") for line in lines),
        "removed": sum(line.startswith("-") and not line.startswith("--- ") for line in lines),
        "added": sum(line.startswith("+") and not line.startswith("+++ ") for line in lines),
    }


# -------------------------------------------------------------------------- validation


@dataclass
class PlainValidation:
    """What ``validate_task_plain`` saw: statuses before and after the gold patch."""

    instance_id: str
    problems: list[str] = field(default_factory=list)
    before: dict[str, str] = field(default_factory=dict)
    after: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def flipped(self) -> list[str]:
        """Tests that do not pass before the gold patch and pass after it."""
        return sorted(
            t for t, s in self.after.items() if s in PASSING and self.before.get(t) not in PASSING
        )

    def kept(self) -> list[str]:
        """Tests that pass both before and after the gold patch."""
        return sorted(
            t for t, s in self.after.items() if s in PASSING and self.before.get(t) in PASSING
        )


def parse_pytest_log(log: str, parser: str = "parse_log_pytest") -> dict[str, str]:
    """Parse a test log with swebench 5.0.2's parser of that name (``parse_log_pytest``)."""
    from swebench.harness.log_parsers import PARSER_REGISTRY

    if parser not in PARSER_REGISTRY:
        raise ValueError(f"unknown log_parser {parser!r}; swebench knows {len(PARSER_REGISTRY)}")
    # The pytest parsers never read their test_spec argument.
    return PARSER_REGISTRY[parser](log, None)


def run_tests(
    workdir: Path, test_cmd: str = "pytest -rA", timeout: float = TEST_TIMEOUT_S
) -> tuple[str, str]:
    """Run a pytest ``test_cmd`` (install_config's) in ``workdir``; return (log, exit code).

    ``pytest`` runs as ``python -P -m pytest``: this interpreter, with the working directory
    kept off ``sys.path`` as the plain ``pytest`` command would, so a repository that only
    imports under ``python -m`` fails here too.
    """
    argv = shlex.split(test_cmd)
    if not argv or argv[0] != "pytest":
        raise ValueError(f"validate_task_plain runs pytest commands only, got {test_cmd!r}")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # The task environment installs pytest alone (install_config pip_packages); plugins that
    # happen to be installed here (benchmark, timeout, ...) would only slow each run down.
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    proc = subprocess.run(
        [sys.executable, "-P", "-m", "pytest", *argv[1:], "-p", "no:cacheprovider"],
        cwd=workdir,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    return proc.stdout + proc.stderr, str(proc.returncode)


def _apply(workdir: Path, patch: str, what: str) -> str | None:
    proc = git("apply", "--whitespace=nowarn", "-", cwd=workdir, input=patch.encode(), check=False)
    if proc.returncode != 0:
        return f"{what} does not apply: {proc.stderr.decode(errors='replace').strip()}"
    return None


def validate_task_plain(task: Task, workdir: Path) -> PlainValidation:
    """Check one task without the project's sandbox.

    Clones the starter repository at ``base_commit`` into ``workdir`` (a fresh folder is made
    inside it), applies the test patch, runs ``pytest -rA``, applies the gold patch, runs again,
    and parses both logs with swebench's ``parse_log_pytest``. Every FAIL_TO_PASS test must not
    pass before and must pass after; every PASS_TO_PASS test must pass both times.
    """
    from swe_gym.grading import test_command

    start = time.monotonic()
    result = PlainValidation(task.instance_id, problems=patch_problems(task))
    config = task.install_config or INSTALL_CONFIG
    repo = ensure_repo(short_name(task.repo), [task.base_commit])
    wt = Path(tempfile.mkdtemp(prefix=f"{task.instance_id}-", dir=workdir))
    try:
        git("clone", "-q", "--shared", "--no-checkout", str(repo), str(wt))
        proc = git("checkout", "-q", "--detach", task.base_commit, cwd=wt, check=False)
        if proc.returncode != 0:
            result.problems.append(f"base_commit {task.base_commit} cannot be checked out")
            return result
        for patch, what, attr in (
            (task.test_patch, "test_patch", "before"),
            (task.patch, "patch", "after"),
        ):
            problem = _apply(wt, patch, what)
            if problem:
                result.problems.append(problem)
                return result
            # The grading rule's command: test_cmd plus the files the test patch touches
            # (SWE-bench's test directives), so PASS_TO_PASS holds only tests grading runs.
            log, _ = run_tests(wt, test_command(task))
            statuses = parse_pytest_log(log, config["log_parser"])
            if not statuses:
                result.problems.append(
                    f"no test results {attr} the gold patch; log tail:\n{log[-2000:]}"
                )
                return result
            setattr(result, attr, statuses)
        # parse_log_pytest splits on whitespace: a parametrized id with a space in it comes
        # out cut in two (unbalanced brackets), so such ids cannot be graded.
        cut = sorted(t for t in {**result.before, **result.after} if t.count("[") != t.count("]"))
        if cut:
            result.problems.append(f"test ids with whitespace (give them ids=): {cut}")
        for t in task.FAIL_TO_PASS:
            if result.before.get(t) in PASSING:
                result.problems.append(f"FAIL_TO_PASS {t} already passes before the gold patch")
            if result.after.get(t) not in PASSING:
                result.problems.append(
                    f"FAIL_TO_PASS {t} is {result.after.get(t, 'missing')} after the gold patch"
                )
        for t in task.PASS_TO_PASS:
            for attr in ("before", "after"):
                status = getattr(result, attr).get(t, "missing")
                if status not in PASSING:
                    result.problems.append(f"PASS_TO_PASS {t} is {status} {attr} the gold patch")
        return result
    finally:
        shutil.rmtree(wt, ignore_errors=True)
        result.seconds = time.monotonic() - start


# ---------------------------------------------------------------------------- main


def _write_history(name: str, hashes: list[str]) -> None:
    rows = json.loads(history_path(name).read_text(encoding="utf-8"))
    for row, h in zip(rows, hashes, strict=True):
        row["hash"] = h
    history_path(name).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m swe_gym.starter.build", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 on any difference"
    )
    parser.add_argument(
        "--task", action="append", default=[], help="only these instance ids (repeatable)"
    )
    args = parser.parse_args(argv)
    failures: list[str] = []

    # 1. Build every repository from scratch, in a scratch folder, and compare hashes.
    commits: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="swe-starter-build-") as scratch:
        for name in repo_names():
            history = load_history(name)
            hashes = build_repo(name, Path(scratch) / name)
            commits[name] = {c.dir: h for c, h in zip(history, hashes, strict=True)}
            recorded = [c.hash for c in history]
            if recorded != hashes:
                if args.check:
                    failures.append(f"{name}: history.json hashes {recorded} != built {hashes}")
                else:
                    _write_history(name, hashes)
            print(f"{name:12s} {len(hashes)} commits, head {hashes[-1]}")

    if failures:  # the cached repositories would not match; validating would only fail
        for f in failures:
            print("error:", f, file=sys.stderr)
        return 1

    # 2. Compile the task folders and run each one before/after its gold patch.
    old_rows = {r["instance_id"]: r for r in read_tasks_file()}
    new_rows = []
    with tempfile.TemporaryDirectory(prefix="swe-starter-validate-") as scratch:
        for d in task_dirs():
            row = source_row(d, commits)
            if args.task and row["instance_id"] not in args.task:
                if row["instance_id"] in old_rows:
                    new_rows.append(old_rows[row["instance_id"]])
                continue
            old = old_rows.get(row["instance_id"])
            row["PASS_TO_PASS"] = list(old["PASS_TO_PASS"]) if (args.check and old) else []
            res = validate_task_plain(normalise_row(row), Path(scratch))
            if res.before and res.after and set(res.flipped()) != set(row["FAIL_TO_PASS"]):
                res.problems.append(
                    f"declared FAIL_TO_PASS {row['FAIL_TO_PASS']} but the flipped tests are {res.flipped()}"
                )
            broken = sorted(t for t, s in res.after.items() if s not in PASSING)
            if broken:
                res.problems.append(f"tests not passing after the gold patch: {broken}")
            if not args.check:
                row["PASS_TO_PASS"] = res.kept()
            elif old != row:
                diff = sorted(k for k in row if (old or {}).get(k) != row[k])
                res.problems.append(f"tasks.jsonl row differs from the sources in {diff}")
            new_rows.append(row)
            status = "ok" if res.ok else "FAIL"
            print(
                f"{status:4s} {row['instance_id']:26s} F2P {len(row['FAIL_TO_PASS'])} P2P {len(row['PASS_TO_PASS'])} {res.seconds:.1f}s"
            )
            failures += [f"{row['instance_id']}: {p}" for p in res.problems]
    known = {r["instance_id"] for r in new_rows}
    if args.check:
        failures += [
            f"{iid}: in tasks.jsonl but has no task folder" for iid in old_rows if iid not in known
        ]
    elif not failures:
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in new_rows)
        TASKS_FILE.write_text(text, encoding="utf-8")
        print(f"wrote {len(new_rows)} tasks to {TASKS_FILE}")
    for f in failures:
        print("error:", f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
