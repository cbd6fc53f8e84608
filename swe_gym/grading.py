"""Grading by the SWE-bench rule (methods.md section 2), pinned to ``swebench==5.0.2``.

Rule followed (the v5 harness): the model patch is applied to a *fresh* sandbox at
``base_commit`` (``git apply`` -> ``git apply --reject`` -> ``patch --fuzz=5 -p1``), the task's
test files are restored and its ``test_patch`` applied, the test command runs between the
harness's output markers with its exit status recorded, and the log is parsed by the task's log
parser from ``swebench.harness.log_parsers``. ``swebench.harness.grading`` then decides: a test
passes if PASSED or XFAIL; missing, FAILED, ERROR fail, and a *skipped* F2P test fails (v5); a
skipped P2P test is not a regression; an empty status map with no sign that the suite ran is an
invalid run, as is a non-zero exit with no failure reported. Resolved iff every F2P and every
P2P test passes (``ResolvedStatus.FULL``).

Grading in a fresh sandbox means the agent's installed packages or stray processes cannot
change the verdict: only its diff crosses over. Of that diff, every change to test
infrastructure (conftest files, test configuration, the task's test files, ...) is reverted
before the test patch is applied; the rule is in ``swe_gym.testinfra`` and the reverted paths
are ``GradingReport.dropped``. A patch touching ``.git`` is refused.

The test log is written to a file in the grading sandbox and read back whole (up to
``LOG_LIMIT`` bytes; past it the head and tail are kept and ``log_truncated`` is set), so
parsing never sees the agent's 16,000-character observation cap. ``parsed`` counts the statuses
found; ``missing`` names expected tests absent from the log (they count as failed).

Grading never raises for what the patch does: any error becomes a report with reason
``grading_error`` and the message in ``detail``; the sandbox is always closed. Reasons:
``model_patch_failed``, ``test_patch_failed``, ``tests_timed_out``, ``suite_did_not_run``,
``tests_failed``, ``no_fail_to_pass`` (the task lists no FAIL_TO_PASS test: never resolved),
``grading_error``.
"""

from __future__ import annotations

import logging
import shlex
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from swebench.harness.constants import (
    END_TEST_OUTPUT,
    FAIL_TO_PASS,
    PASS_TO_PASS,
    START_TEST_OUTPUT,
    TEST_EXIT_CODE,
    ResolvedStatus,
)
from swebench.harness.grading import get_eval_tests_report, get_logs_eval, get_resolution_status
from swebench.harness.log_parsers import PARSER_REGISTRY
from swebench.types import TestSpec

from swe_gym.errors import SandboxUnavailable, unknown_choice
from swe_gym.sandbox import Sandbox, make_sandbox
from swe_gym.tasks import Task
from swe_gym.testinfra import WORK_DIR, git_path_in_patch, restore, revert_test_infra, start_watch

log = logging.getLogger(__name__)

DEFAULT_TEST_TIMEOUT = 900.0
LOG_LIMIT = 64 * 2**20  # bytes of test log read back; past it the middle is cut
_PATCH_DIR = WORK_DIR  # inside the grading sandbox's workdir; removed before tests run
_LOG = f"{WORK_DIR}/test.log"

# SWE-bench rows carry no install spec (it lives in the harness by repo); these are the parsers
# and test commands the SWE-bench harness uses for the SWE-bench Verified repositories.
_SWEBENCH_REPO_PARSER = {
    "django/django": "parse_log_django",
    "sympy/sympy": "parse_log_sympy",
    "sphinx-doc/sphinx": "parse_log_sphinx",
    "matplotlib/matplotlib": "parse_log_matplotlib",
    "mwaskom/seaborn": "parse_log_seaborn",
    "astropy/astropy": "parse_log_astropy",
    "pydata/xarray": "parse_log_xarray",
    "scikit-learn/scikit-learn": "parse_log_scikit",
    "pylint-dev/pylint": "parse_log_pylint",
    "psf/requests": "parse_log_requests",
    "pallets/flask": "parse_log_flask",
}
_SWEBENCH_REPO_TEST_CMD = {
    "django/django": "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1",
    "sympy/sympy": "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose",
    "sphinx-doc/sphinx": "tox --current-env -epy39 -v --",
}
DEFAULT_TEST_CMD = "pytest -rA"


@dataclass
class GradingReport:
    """Outcome of grading one patch. ``reason`` is None exactly when ``resolved``."""

    instance_id: str
    resolved: bool
    reason: str | None  # see the module doc
    status: dict[str, str] = field(
        default_factory=dict
    )  # test id -> PASSED/FAILED/ERROR/SKIPPED/XFAIL
    f2p_pass: float = 0.0
    p2p_pass: float = 0.0
    f2p_failed: list[str] = field(default_factory=list)
    p2p_failed: list[str] = field(default_factory=list)
    patch_applied_with: str | None = None  # git apply | git apply --reject | patch --fuzz=5
    exit_code: int | None = None
    duration_s: float = 0.0
    log_tail: str = ""
    parsed: int = 0  # test statuses parsed from the complete log
    missing: list[str] = field(default_factory=list)  # expected tests absent from the log
    dropped: list[str] = field(default_factory=list)  # test-infrastructure paths reverted
    log_truncated: bool = False  # the log passed LOG_LIMIT and its middle was cut
    detail: str = ""  # why, for model_patch_failed (.git) and grading_error

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def log_parser_name(task: Task) -> str:
    cfg = task.install_config or {}
    name = cfg.get("log_parser") or _SWEBENCH_REPO_PARSER.get(task.repo, "parse_log_pytest")
    if name not in PARSER_REGISTRY:
        raise unknown_choice(f"log_parser for task {task.instance_id}:", name, PARSER_REGISTRY)
    return name


def test_command(task: Task) -> str:
    """The task's test command followed by the test files its test patch touches."""
    cfg = task.install_config or {}
    base = cfg.get("test_cmd") or _SWEBENCH_REPO_TEST_CMD.get(task.repo, DEFAULT_TEST_CMD)
    if isinstance(base, list):  # some SWE-rebench rows store a list of commands
        base = " && ".join(base)
    files = [f for f in task.test_files if f.endswith(".py")] or task.test_files
    return f"{base} {' '.join(shlex.quote(f) for f in files)}".strip()


def _env_prefix(task: Task) -> str:
    env = (task.install_config or {}).get("env_vars") or {}
    return "".join(f"export {k}={shlex.quote(str(v))}; " for k, v in env.items())


def apply_patch(
    sandbox: Sandbox, patch: str, name: str = "model", base_commit: str | None = None
) -> tuple[str | None, str]:
    """Apply ``patch`` in the sandbox with the harness's fallbacks. Returns (method, log).

    A failed try is undone before the next: the whole tree is reset, or with ``base_commit``
    only the patch's own files (so a test patch does not wipe the model patch)."""
    if not patch.strip():
        return "empty", ""
    if not patch.endswith("\n"):
        patch += "\n"
    rel = f"{_PATCH_DIR}/{name}.diff"
    sandbox.write_file(rel, patch)
    logs = []
    for method, cmd in (
        ("git apply", f"git apply --verbose {rel}"),
        ("git apply --reject", f"git apply --verbose --reject {rel}"),
        ("patch --fuzz=5", f"patch --batch --fuzz=5 -p1 -i {rel}"),
    ):
        res = sandbox.run(f"cd {shlex.quote(sandbox.workdir)} && {cmd}", timeout=60)
        logs.append(f"$ {cmd}\n{res.output}")
        if res.exit_code == 0:
            return method, "\n".join(logs)
        # A failed --reject leaves partial hunks and .rej files: start the next try clean.
        if base_commit is None:
            sandbox.run(
                f"cd {shlex.quote(sandbox.workdir)} && git checkout -q -- . && git clean -fdq -e {_PATCH_DIR}",
                timeout=60,
            )
        else:
            _reset_paths(sandbox, base_commit, patch_paths(patch))
    return None, "\n".join(logs)


def patch_paths(patch: str) -> list[str]:
    from swe_gym.tasks import patch_files

    files = patch_files(patch)
    return files + [f + suffix for f in files for suffix in (".rej", ".orig")]


def _reset_paths(sandbox: Sandbox, base_commit: str, paths: list[str]) -> None:
    q = " ".join(shlex.quote(p) for p in paths)
    res = sandbox.run(
        f'cd {shlex.quote(sandbox.workdir)} && for p in {q}; do git cat-file -e {base_commit}:"$p" '
        "2>/dev/null && printf '%s\\n' \"$p\"; done",
        timeout=60,
    )
    restore(sandbox, base_commit, paths, set(res.output.splitlines()))


def restore_test_files(sandbox: Sandbox, task: Task) -> None:
    """Put the task's test files back to ``base_commit`` (deleting ones that did not exist)."""
    for path in task.test_files:
        q = shlex.quote(path)
        sandbox.run(
            f"cd {shlex.quote(sandbox.workdir)} && (git checkout -q {task.base_commit} -- {q} 2>/dev/null || rm -f {q})",
            timeout=60,
        )


@dataclass
class TestRun:
    status: dict[str, str]
    valid: bool  # False: the suite did not run (or its log contradicts its exit status)
    timed_out: bool
    exit_code: int | None
    log: str
    truncated: bool = False  # the log passed LOG_LIMIT and its middle was cut


def _cut_log(limit: int) -> str:
    """Shell: past ``limit`` bytes keep the log's head and tail, say the cut, print CUT."""
    half = limit // 2
    return (
        f'__s=$(stat -c %s {_LOG}) && if [ "$__s" -gt {limit} ]; then {{ head -c {half} {_LOG}; '
        f"printf '\\n<log truncated: %s bytes, middle cut>\\n' \"$__s\"; tail -c {half} {_LOG}; }} "
        f"> {_LOG}.cut && mv {_LOG}.cut {_LOG} && echo CUT; fi"
    )


def _read_log(sandbox: Sandbox) -> str:
    try:
        return sandbox.read_file(_LOG).decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def run_tests(
    sandbox: Sandbox, task: Task, timeout: float = DEFAULT_TEST_TIMEOUT, log_limit: int = LOG_LIMIT
) -> TestRun:
    """Run the task's test command in ``sandbox`` (test patch already applied) and parse its
    complete log, written to a file in the sandbox (never through the output cap) and read
    back whole up to ``log_limit`` bytes (past it the head and tail, the cut said)."""
    wd = shlex.quote(sandbox.workdir)
    cmd = (
        f"cd {wd} && mkdir -p {WORK_DIR} && {{ {_env_prefix(task)}"
        f"echo '{START_TEST_OUTPUT}'; {test_command(task)}; __swe_rc=$?; "
        f"echo '{END_TEST_OUTPUT}'; echo '{TEST_EXIT_CODE}: '$__swe_rc; }} > {_LOG} 2>&1 < /dev/null; "
        f"cd {wd} && tail -n 1 {_LOG}; {_cut_log(log_limit)}"
    )
    res = sandbox.run(cmd, timeout=timeout)
    if res.timed_out:  # the command was killed before its cut: cut now
        cut = sandbox.run(f"cd {wd} && {_cut_log(log_limit)}", timeout=120)
        return TestRun({}, False, True, None, _read_log(sandbox), "CUT" in cut.output)
    text, truncated = _read_log(sandbox), "CUT" in res.output.splitlines()
    spec = TestSpec(
        instance_id=task.instance_id,
        image="",
        eval_script_list=[],
        repo=task.repo,
        version=task.version,
        FAIL_TO_PASS=task.FAIL_TO_PASS,
        PASS_TO_PASS=task.PASS_TO_PASS,
        log_parser=log_parser_name(task),
    )
    # get_logs_eval reads a file: keep the harness's own checks rather than re-implementing them.
    with tempfile.NamedTemporaryFile("w", suffix=".log", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        status, valid = get_logs_eval(spec, f.name)
    first = res.output.strip().splitlines()[0] if res.output.strip() else ""
    code = first.rpartition(": ")[2]
    return TestRun(status, valid, False, int(code) if code.isdigit() else None, text, truncated)


def grade_in_sandbox(
    sandbox: Sandbox, task: Task, patch: str, timeout: float = DEFAULT_TEST_TIMEOUT
) -> GradingReport:
    """Grade ``patch`` in a started sandbox that holds a clean copy at ``base_commit``.
    Never raises: an error becomes reason ``grading_error``."""
    t0 = time.monotonic()
    report = GradingReport(task.instance_id, resolved=False, reason=None)
    try:
        _grade(sandbox, task, patch, timeout, report)
    except Exception as e:  # whatever the patch made happen, the verdict is a report
        log.warning("grading %s failed: %s", task.instance_id, e, exc_info=True)
        report.resolved, report.reason = False, "grading_error"
        report.detail = f"{type(e).__name__}: {e}"[:4000]
    report.duration_s = time.monotonic() - t0
    return report


def _grade(sandbox: Sandbox, task: Task, patch: str, timeout: float, report: GradingReport) -> None:
    bad = git_path_in_patch(patch)
    if bad is not None:
        report.reason, report.detail = (
            "model_patch_failed",
            f"the patch touches a .git path: {bad!r}",
        )
        _finish(report, task, {})
        return
    start_watch(sandbox)
    method, applied = apply_patch(sandbox, patch, "model")
    report.patch_applied_with = method
    if method is None:
        report.reason, report.log_tail = "model_patch_failed", applied[-4000:]
        _finish(report, task, {})
        return
    report.dropped = revert_test_infra(sandbox, task.base_commit, task.test_files)
    restore_test_files(sandbox, task)
    test_method, test_log = apply_patch(sandbox, task.test_patch, "test", task.base_commit)
    sandbox.run(f"rm -rf {shlex.quote(sandbox.workdir)}/{_PATCH_DIR}", timeout=30)
    if test_method is None:
        report.reason, report.log_tail = "test_patch_failed", test_log[-4000:]
        _finish(report, task, {})
        return
    run = run_tests(sandbox, task, timeout)
    report.exit_code, report.log_tail, report.log_truncated = (
        run.exit_code,
        run.log[-4000:],
        run.truncated,
    )
    if run.timed_out:
        report.reason = "tests_timed_out"
    elif not run.valid:
        report.reason = "suite_did_not_run"
    _finish(report, task, run.status, ran=not run.timed_out)


def _finish(
    report: GradingReport, task: Task, status: dict[str, str], ran: bool = False
) -> GradingReport:
    report.status, report.parsed = status, len(status)
    if ran:
        report.missing = [t for t in task.FAIL_TO_PASS + task.PASS_TO_PASS if t not in status]
    if not task.FAIL_TO_PASS and report.reason is None:
        report.reason = "no_fail_to_pass"  # the swebench rule would count it resolved
    tests = get_eval_tests_report(
        status, {FAIL_TO_PASS: task.FAIL_TO_PASS, PASS_TO_PASS: task.PASS_TO_PASS}
    )
    f2p, p2p = tests[FAIL_TO_PASS], tests[PASS_TO_PASS]
    report.f2p_failed = [t for t in task.FAIL_TO_PASS if t not in f2p["success"]]
    report.p2p_failed = [t for t in task.PASS_TO_PASS if t not in p2p["success"]]
    report.f2p_pass = 1 - len(report.f2p_failed) / max(1, len(task.FAIL_TO_PASS))
    report.p2p_pass = (
        1 - len(report.p2p_failed) / max(1, len(task.PASS_TO_PASS)) if task.PASS_TO_PASS else 1.0
    )
    if report.reason is None:
        full = (
            not report.f2p_failed
            and not report.p2p_failed
            and get_resolution_status(tests) == ResolvedStatus.FULL.value
        )
        report.resolved = full
        report.reason = None if full else "tests_failed"
    return report


def grade_patch(
    task: Task,
    patch: str,
    *,
    backend: str = "local",
    sandbox_options: dict[str, Any] | None = None,
    timeout: float = DEFAULT_TEST_TIMEOUT,
) -> GradingReport:
    """Grade ``patch`` for ``task`` in a fresh sandbox; the sandbox is always closed.

    Raises only ``SandboxUnavailable`` (the backend is missing: a setup problem); every other
    failure, starting the sandbox included, is a report with reason ``grading_error``."""
    t0 = time.monotonic()
    sandbox = None
    try:
        sandbox = make_sandbox(task, backend, **(sandbox_options or {}))
        sandbox.start()
    except SandboxUnavailable:
        _close(sandbox)
        raise
    except Exception as e:
        _close(sandbox)
        report = GradingReport(task.instance_id, resolved=False, reason="grading_error")
        report.detail = f"the grading sandbox did not start: {type(e).__name__}: {e}"[:4000]
        report.duration_s = time.monotonic() - t0
        return report
    try:
        return grade_in_sandbox(sandbox, task, patch, timeout)
    finally:
        _close(sandbox)


def _close(sandbox: Sandbox | None) -> None:
    if sandbox is None:
        return
    try:
        sandbox.close()
    except Exception as e:  # a verdict is already made; a leak is logged, not raised
        log.warning("closing the grading sandbox failed: %s", e)
