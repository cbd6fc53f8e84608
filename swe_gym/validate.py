"""Check tasks by running them: ``python -m swe_gym.validate [TASKS] [--backend local|docker]``.

For every task, in fresh sandboxes: with no change every FAIL_TO_PASS test fails and every
PASS_TO_PASS test passes; with the gold patch the task is resolved. A malformed row (e.g. an
empty FAIL_TO_PASS) is reported on its own line and the other rows still get a verdict. Exit
status 1 if any row is bad or fails. With no TASKS argument the bundled SWEStarter suite is
checked. Local clones are found under ``--repos-dir`` (default: the ``SWE_GYM_REPOS``
environment variable) as ``<owner>__<name>``; ``--sandbox-option KEY=VALUE`` passes options to
the sandbox (repeatable). ``--official`` judges by the SWE-bench rule instead of the reward's
(``swe_gym.grading``: there a FAIL_TO_PASS test must be PASSED, not XFAIL).

Under each row's line, an indented line says what the row ran with: its environment
(``swe_gym.taskenv``: the key and Python, built now or cached, and the time; or ``host``; or
why it cannot be built, then the row is not graded), the log parser and test command with
where each came from, and for the empty and the gold patch the project's verdict beside
swebench's own (``swe_gym.grading.official``: swebench's functions on the same complete log).
``--json FILE`` writes these per row. ``--environment`` and ``--allow-nearest-python`` are
the local sandbox's options of the same names.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from swe_gym import taskenv
from swe_gym.errors import SandboxUnavailable, SWEGymError
from swe_gym.grading.official import grade_logged, swebench_verdict
from swe_gym.grading.testrun import log_parser_choice, test_command_choice
from swe_gym.tasks import Task, load_rows, normalise_row


@dataclass
class Validation:
    instance_id: str
    ok: bool
    problems: list[str]
    seconds: float
    env: str = ""  # "host", "<key> python X.Y.Z", or "not built: <reason>"
    env_s: float = 0.0  # time to build (or find) the environment
    env_built: bool = False  # built by this run (else cached or host)
    parser: str = ""
    command: str = ""
    needs_network: list[str] = field(default_factory=list)  # gold's failures that need it
    verdicts: dict[str, dict[str, Any]] = field(
        default_factory=dict
    )  # empty/gold -> ours, swebench's

    @property
    def agree(self) -> bool:
        return all(v["ours"] == v["swebench"] for v in self.verdicts.values())


def _environment(task: Task, backend: str, options: dict, v: Validation) -> bool:
    """Build (or find) the row's environment first, so its time and failure are the row's."""
    if backend != "local":
        v.env = f"{backend} image"
        return True
    t0 = time.monotonic()
    try:
        env = taskenv.resolve(
            task,
            options.get("environment", "auto"),
            options.get("repos_dir"),
            options.get("allow_nearest_python", False),
        )
    except SandboxUnavailable as e:
        if "no local git repository" not in str(e):
            raise  # the backend is missing: every row would fail the same way
        v.env, v.env_s = f"not built: {e}", time.monotonic() - t0
        v.problems.append(f"environment not built: {e}")
        return False
    except SWEGymError as e:
        v.env, v.env_s = f"not built: {e}", time.monotonic() - t0
        v.problems.append(f"environment not built: {e}")
        return False
    v.env_s = time.monotonic() - t0
    if env is None:
        v.env = "host"
    else:
        m = env.manifest
        v.env, v.env_built = f"{env.key[:12]} python {m['python']}", env.built_now
        seeds = " ".join(f"{k} {x}" for k, x in (m.get("seeds") or {}).items() if x)
        if seeds:
            v.env += f", {seeds} as of {m.get('seed_cut') or 'today'}"
        if m.get("install_commit"):
            v.env += f", installed at {m['install_commit'][:12]}"
        if m.get("note"):
            v.env += f" ({m['note']})"
    return True


def validate_task(
    task: Task, backend: str = "local", sandbox_options: dict | None = None, rule: str = "rl"
) -> Validation:
    options = sandbox_options or {}
    (parser, psrc), (command, csrc) = log_parser_choice(task), test_command_choice(task)
    v = Validation(task.instance_id, False, [], 0.0, parser=f"{parser} [{psrc}]",
                   command=f"{command} [{csrc}]")  # fmt: skip
    if not _environment(task, backend, options, v):
        return v
    problems = v.problems
    before, log = grade_logged(task, "", backend, options, rule)
    v.verdicts["empty"] = {"ours": before.resolved, "swebench": swebench_verdict(task, log)}
    crashed = before.reason in ("tests_timed_out", "suite_did_not_run")
    if before.reason in ("test_patch_failed", "grading_error"):
        problems.append(f"before the fix: {before.reason} {before.detail}".strip())
    elif crashed:
        pass  # the bug itself may crash the runner (pytest-7168): a problem only if gold fails too
    else:
        passing_f2p = [t for t in task.FAIL_TO_PASS if t not in before.f2p_failed]
        if passing_f2p:
            problems.append(f"F2P tests pass before the fix: {passing_f2p}")
        if before.p2p_failed:
            problems.append(f"P2P tests fail before the fix: {before.p2p_failed}")
    after, log = grade_logged(task, task.patch, backend, options, rule)
    v.verdicts["gold"] = {"ours": after.resolved, "swebench": swebench_verdict(task, log)}
    if crashed and not after.resolved:
        problems.append(f"before the fix: {before.reason} {before.detail}".strip())
    if not after.resolved:
        detail = after.f2p_failed + after.p2p_failed
        msg = f"gold patch does not resolve: {after.reason} {after.detail} {detail or ''}".strip()
        if after.missing:
            msg += f"; absent from the log: {after.missing[:10]}"
        if after.dropped:
            msg += f"; test infrastructure reverted from the gold patch: {after.dropped}"
        if after.needs_network:
            v.needs_network = after.needs_network
            msg += (
                f"; needs_network: {len(after.needs_network)} failed for want of the network "
                f"(the sandbox has none): {after.needs_network[:10]}"
            )
        problems.append(msg)
    v.ok, v.seconds = not problems, before.duration_s + after.duration_s
    return v


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
        "--environment",
        choices=taskenv.POLICIES,
        help="the task environment (local backend): auto (default), task or host; see "
        "swe_gym.taskenv",
    )
    p.add_argument(
        "--allow-nearest-python",
        action="store_true",
        help="build with the nearest Python on the machine when the recipe's is missing",
    )
    p.add_argument("--json", metavar="FILE", help="write each row's result as a JSON line")
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
    if args.environment:
        options["environment"] = args.environment
    if args.allow_nearest_python:
        options["allow_nearest_python"] = True
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
        if r.env or r.parser:
            print(f"    {_details(r)}")
    bad = sum(not r.ok for r in results)
    print(f"{len(results) - bad} passed, {bad} failed (rule: {rule})")
    judged = [r for r in results if r.verdicts]
    agree = sum(r.agree for r in judged)
    print(
        f"agreement with swebench's verdict: {agree}/{len(judged)} rows (empty and gold patch); "
        f"not built: {sum(r.env.startswith('not built') for r in results)}"
        + ("" if rule == "official" else " (ours by the rl rule: an XFAIL fix differs by design)")
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            for r in results:
                f.write(json.dumps({**asdict(r), "agree": r.agree}) + "\n")
    return 1 if bad or not results else 0


def _details(r: Validation) -> str:
    if r.env.startswith("not built"):
        env = "env: not built (above)"
    else:
        how = "built" if r.env_built else "found"
        env = f"env: {r.env} ({how} in {r.env_s:.1f}s)" if r.env else ""
    verdicts = ", ".join(
        f"{k}: ours {v['ours']} swebench {v['swebench']}" for k, v in r.verdicts.items()
    )
    parts = (env, f"parser: {r.parser}", f"command: {r.command}", verdicts)
    return " | ".join(x for x in parts if x)


if __name__ == "__main__":
    sys.exit(main())
