"""Execution validation of curated rows (the SWE-rebench rule for FAIL_TO_PASS/PASS_TO_PASS).

For a row with a test patch: run the tests
at ``base_commit`` with only the test patch applied ("before"), then in a fresh sandbox with
the code patch and the test patch ("after"), each parsed by the row's log parser
(``swe_gym.grading.run_tests``). FAIL_TO_PASS = tests that do not pass before and pass after;
PASS_TO_PASS = tests that pass in both runs (PASSED or XFAIL count as passing). A row is valid
only if both runs ran and FAIL_TO_PASS is not empty. The test command is the row's
``install_config.test_cmd`` (from ``--install-configs``), by default grading's
``pytest -rA`` followed by the test patch's files; the log is read whole from a file
(``swe_gym.grading.run_tests``), never through the agent's output cap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from swe_gym.errors import SandboxError, SandboxUnavailable
from swe_gym.tasks import Task

PASSING = ("PASSED", "XFAIL")


def row_task(row: dict[str, Any]) -> Task:
    """A ``Task`` for a row whose FAIL_TO_PASS is not known yet (built directly: ``load_tasks``
    rejects an empty FAIL_TO_PASS)."""
    return Task(
        instance_id=row["instance_id"],
        repo=row["repo"],
        base_commit=row["base_commit"],
        problem_statement=row["problem_statement"],
        patch=row["patch"],
        test_patch=row["test_patch"],
        FAIL_TO_PASS=[],
        PASS_TO_PASS=[],
        created_at=row.get("created_at", ""),
        install_config=row.get("install_config"),
        license_name=row.get("license_name", ""),
        meta=row.get("meta") or {},
    )


def derive_f2p_p2p(before: dict[str, str], after: dict[str, str]) -> tuple[list[str], list[str]]:
    """The SWE-rebench rule on two status maps (test id -> PASSED/FAILED/ERROR/SKIPPED/XFAIL)."""
    f2p = sorted(t for t, s in after.items() if s in PASSING and before.get(t) not in PASSING)
    p2p = sorted(t for t, s in after.items() if s in PASSING and before.get(t) in PASSING)
    return f2p, p2p


def _run(
    task: Task, backend: str, patches: list[tuple[str, str]], timeout: float, sandbox_options: dict
) -> Any:
    from swe_gym.grading import apply_patch, run_tests
    from swe_gym.sandbox import make_sandbox

    sandbox = make_sandbox(task, backend, **sandbox_options)
    try:
        sandbox.start()
        for name, patch in patches:
            # the test patch's failed tries undo only its own files, not the code patch
            method, log = apply_patch(
                sandbox, patch, name, task.base_commit if name == "test" else None
            )
            if method is None:
                return f"{name}_patch_failed", log[-2000:]
        return run_tests(sandbox, task, timeout)
    finally:
        sandbox.close()


def validate_row(
    row: dict[str, Any],
    backend: str = "local",
    timeout: float = 900.0,
    sandbox_options: dict | None = None,
) -> dict[str, Any]:
    """``{"ok", "reason", "FAIL_TO_PASS", "PASS_TO_PASS", "before", "after"}`` for one row."""
    if not row.get("test_patch"):
        return {"ok": False, "reason": "no_test_patch"}
    task = row_task(row)
    opts = sandbox_options or {}
    runs = {}
    for name, patches in (
        ("before", [("test", row["test_patch"])]),
        ("after", [("model", row["patch"]), ("test", row["test_patch"])]),
    ):
        try:
            run = _run(task, backend, patches, timeout, opts)
        except SandboxUnavailable:
            raise  # a missing backend is a setup problem: stop rather than drop every row
        except SandboxError as e:
            return {"ok": False, "reason": f"sandbox_error_{name}", "detail": str(e)[:2000]}
        if isinstance(run, tuple):
            return {"ok": False, "reason": f"{run[0]}_{name}", "detail": run[1]}
        if run.timed_out:
            return {"ok": False, "reason": f"timeout_{name}"}
        if not run.valid:
            return {"ok": False, "reason": f"suite_did_not_run_{name}", "detail": run.log[-2000:]}
        runs[name] = run.status
    f2p, p2p = derive_f2p_p2p(runs["before"], runs["after"])
    result: dict[str, Any] = {
        "ok": bool(f2p),
        "reason": None if f2p else "no_fail_to_pass",
        "backend": backend,
    }
    result.update(FAIL_TO_PASS=f2p, PASS_TO_PASS=p2p, before=runs["before"], after=runs["after"])
    return result


def make_validator(
    backend: str, timeout: float = 900.0, sandbox_options: dict | None = None
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda row: validate_row(row, backend, timeout, sandbox_options)
