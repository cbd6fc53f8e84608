"""Check tasks by running them: ``python -m swe_gym.validate [TASKS] [--backend local|docker]``.

For every task, in fresh sandboxes: with no change every FAIL_TO_PASS test fails and every
PASS_TO_PASS test passes; with the gold patch the task is resolved. A malformed row (e.g. an
empty FAIL_TO_PASS) is reported on its own line and the other rows still get a verdict. Exit
status 1 if any row is bad or fails. With no TASKS argument the bundled SWEStarter suite is
checked. Local clones are found under ``--repos-dir`` (default: the ``SWE_GYM_REPOS``
environment variable) as ``<owner>__<name>``; ``--sandbox-option KEY=VALUE`` passes options to
the sandbox (repeatable). ``--official`` judges by the SWE-bench rule instead of the reward's
(``swe_gym.grading``: there a FAIL_TO_PASS test must be PASSED, not XFAIL).
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from swe_gym.errors import SandboxUnavailable, SWEGymError
from swe_gym.grading import grade_patch
from swe_gym.tasks import Task, load_rows, normalise_row


@dataclass
class Validation:
    instance_id: str
    ok: bool
    problems: list[str]
    seconds: float


def validate_task(
    task: Task, backend: str = "local", sandbox_options: dict | None = None, rule: str = "rl"
) -> Validation:
    problems = []
    grade = lambda patch: grade_patch(  # noqa: E731
        task, patch, backend=backend, sandbox_options=sandbox_options, rule=rule
    )
    before = grade("")
    if before.reason in (
        "test_patch_failed",
        "tests_timed_out",
        "suite_did_not_run",
        "grading_error",
    ):
        problems.append(f"before the fix: {before.reason} {before.detail}".strip())
    else:
        passing_f2p = [t for t in task.FAIL_TO_PASS if t not in before.f2p_failed]
        if passing_f2p:
            problems.append(f"F2P tests pass before the fix: {passing_f2p}")
        if before.p2p_failed:
            problems.append(f"P2P tests fail before the fix: {before.p2p_failed}")
    after = grade(task.patch)
    if not after.resolved:
        detail = after.f2p_failed + after.p2p_failed
        msg = f"gold patch does not resolve: {after.reason} {after.detail} {detail or ''}".strip()
        if after.missing:
            msg += f"; absent from the log: {after.missing[:10]}"
        if after.dropped:
            msg += f"; test infrastructure reverted from the gold patch: {after.dropped}"
        problems.append(msg)
    return Validation(
        task.instance_id, not problems, problems, before.duration_s + after.duration_s
    )


def _row_id(row: Any, index: int) -> str:
    iid = (
        row.instance_id
        if isinstance(row, Task)
        else (row.get("instance_id") if isinstance(row, dict) else None)
    )
    return str(iid) if iid else f"<row {index}>"


def _check(
    row: Any, index: int, backend: str, options: dict[str, Any], rule: str = "rl"
) -> Validation:
    t0 = time.monotonic()
    try:
        task = normalise_row(row)
    except SWEGymError as e:
        return Validation(_row_id(row, index), False, [f"bad row: {e}"], time.monotonic() - t0)
    try:
        return validate_task(task, backend, options, rule)
    except SandboxUnavailable:
        raise  # the backend is missing: every row would fail the same way
    except Exception as e:
        return Validation(
            task.instance_id, False, [f"error: {type(e).__name__}: {e}"], time.monotonic() - t0
        )


def _option(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    for cast in (int, float):
        try:
            return key, cast(value)
        except ValueError:
            pass
    return key, {"true": True, "false": False}.get(value.lower(), value)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m swe_gym.validate", description=__doc__.splitlines()[0]
    )
    p.add_argument(
        "tasks",
        nargs="?",
        default="starter",
        help="task source (file or hub id); default: the bundled suite",
    )
    p.add_argument("--backend", default="local", help="sandbox backend: local or docker")
    p.add_argument("--ids", nargs="*", help="only these instance ids")
    p.add_argument("--jobs", type=int, default=2, help="tasks validated at once")
    p.add_argument(
        "--repos-dir", help="folder of local clones named <owner>__<name> (local backend)"
    )
    p.add_argument(
        "--sandbox-option",
        action="append",
        type=_option,
        default=[],
        metavar="KEY=VALUE",
        help="a sandbox constructor option, repeatable (e.g. memory_mb=4096, tmp_size_mb=512); "
        "numbers and true/false are converted",
    )
    p.add_argument(
        "--official",
        action="store_true",
        help="judge by the SWE-bench rule (an XFAIL FAIL_TO_PASS test passes) instead of the "
        "reward's rule (it must be PASSED)",
    )
    args = p.parse_args(argv)
    rule = "official" if args.official else "rl"
    options = dict(args.sandbox_option)
    if args.repos_dir:
        options["repos_dir"] = args.repos_dir
    rows = load_rows(args.tasks)
    if args.ids is not None:
        wanted = set(args.ids)
        rows = [r for i, r in enumerate(rows) if _row_id(r, i) in wanted]
        unknown = wanted - {_row_id(r, i) for i, r in enumerate(rows)}
        if unknown:
            print(f"unknown instance_id(s): {sorted(unknown)}", file=sys.stderr)
            return 2
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = list(
            pool.map(lambda ir: _check(ir[1], ir[0], args.backend, options, rule), enumerate(rows))
        )
    width = max((len(r.instance_id) for r in results), default=0)
    for r in results:
        print(
            f"{r.instance_id:<{width}}  {'ok  ' if r.ok else 'FAIL'}  {r.seconds:6.2f}s  {'; '.join(r.problems)}"
        )
    bad = sum(not r.ok for r in results)
    print(f"{len(results) - bad} passed, {bad} failed (rule: {rule})")
    return 1 if bad or not results else 0


if __name__ == "__main__":
    sys.exit(main())
