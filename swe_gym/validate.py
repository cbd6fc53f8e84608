"""Check tasks by running them: ``python -m swe_gym.validate [TASKS] [--backend local|docker]``.

For every task, in fresh sandboxes: with no change every FAIL_TO_PASS test fails and every
PASS_TO_PASS test passes; with the gold patch the task is resolved. Exit status 1 on any failure.
With no TASKS argument the bundled SWEStarter suite is checked.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from swe_gym.grading import grade_patch
from swe_gym.tasks import Task, load_tasks


@dataclass
class Validation:
    instance_id: str
    ok: bool
    problems: list[str]
    seconds: float


def validate_task(task: Task, backend: str = "local", sandbox_options: dict | None = None) -> Validation:
    problems = []
    before = grade_patch(task, "", backend=backend, sandbox_options=sandbox_options)
    if before.reason in ("test_patch_failed", "tests_timed_out", "suite_did_not_run"):
        problems.append(f"before the fix: {before.reason}")
    else:
        passing_f2p = [t for t in task.FAIL_TO_PASS if t not in before.f2p_failed]
        if passing_f2p:
            problems.append(f"F2P tests pass before the fix: {passing_f2p}")
        if before.p2p_failed:
            problems.append(f"P2P tests fail before the fix: {before.p2p_failed}")
    after = grade_patch(task, task.patch, backend=backend, sandbox_options=sandbox_options)
    if not after.resolved:
        detail = after.f2p_failed + after.p2p_failed
        problems.append(f"gold patch does not resolve: {after.reason} {detail or ''}".strip())
    return Validation(task.instance_id, not problems, problems, before.duration_s + after.duration_s)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m swe_gym.validate", description=__doc__.splitlines()[0])
    p.add_argument("tasks", nargs="?", default="starter", help="task source (file or hub id); default: the bundled suite")
    p.add_argument("--backend", default="local", help="sandbox backend: local or docker")
    p.add_argument("--ids", nargs="*", help="only these instance ids")
    p.add_argument("--jobs", type=int, default=2, help="tasks validated at once")
    args = p.parse_args(argv)
    tasks = load_tasks(args.tasks, instance_ids=args.ids)
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = list(pool.map(lambda t: validate_task(t, args.backend), tasks))
    width = max(len(r.instance_id) for r in results)
    for r in results:
        print(f"{r.instance_id:<{width}}  {'ok  ' if r.ok else 'FAIL'}  {r.seconds:6.2f}s  {'; '.join(r.problems)}")
    bad = sum(not r.ok for r in results)
    print(f"{len(results) - bad} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
