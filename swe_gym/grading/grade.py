"""Grading: a patch, a fresh sandbox, the task's tests, a verdict the patch cannot forge.

Flow (``grade_in_sandbox``), in a *fresh* sandbox at ``base_commit`` (only the diff crosses over
from the agent's sandbox, as bytes):

1. The task's environment is probed before anything of the patch is present
   (``swe_gym.grading.verdict.probe_environment``: its pytest plugins, its installed modules), and the
   base text of every Python file the patch adds lines to is read for the static check.
2. The model patch is refused when a header path reaches into ``.git`` (any quoting or letter
   case), is absolute or climbs out (``swe_gym.grading.patches.unsafe_path``); it applies with
   ``git apply`` only (``model_patch_failed`` with git's message otherwise).
3. Every test-infrastructure path it changed is reverted (``swe_gym.grading.testinfra``, reported as
   ``dropped``), the task's test files are restored and its ``test_patch`` applied.
4. The tests run with plugin auto-loading off and the grader's plugin recording each outcome
   (``swe_gym.grading.verdict``); the log is read whole (``swe_gym.grading.testrun``) and parsed by the row's
   ``swebench`` parser. For a pytest run, records that are missing, unsigned, incomplete (the
   session never finished: ``os._exit``) or that do not back a passing test of the log fail the
   run (``channel_missing``, ``channel_forged``, ``session_incomplete``, ``results_mismatch``).
5. The verdict, by ``rule``: ``"rl"`` (default, the reward) requires every FAIL_TO_PASS test
   PASSED (an XFAIL, XPASS or skip is not a fix) and every PASS_TO_PASS test passing by the
   ``swebench`` rule; ``"official"`` is ``swebench``'s rule (``get_eval_tests_report``,
   ``get_resolution_status``: PASSED or XFAIL pass, a skipped F2P fails, a skipped P2P is no
   regression). Rows with no FAIL_TO_PASS never resolve (``no_fail_to_pass``). Test ids of a
   pytest row (one the channel checks) that no test file can define (not ``path::name``: ``[100%]`` and ``[``, which
   swebench's parser keys from an inner pytest's progress lines in pytest's own repository)
   are listed in ``log_only``; no record can back them and they stand for no test, so forging
   their line gains nothing: ``"official"`` judges them on the log as swebench does, ``"rl"``
   leaves them out (``verdict.log_only``).
6. The tests run under the plugin's runtime guard (``swe_gym.grading.guard``): what the
   patched code did to the test process (tracing hooks, ``gc`` walks, swapped code, replaced
   modules, wrapped helpers) makes the run ``tampered``; node ids no test file can define are
   ``injected_tests``, and the records back a test only by its exact node id (or, for an id
   the parser cut at a space, by every node id it was cut from). Where the patch changes the
   test runner's own modules (pytest's repository, installed from the tree) the guard cannot
   stand apart from the runner: they are listed in ``runner_patched`` (SECURITY.md).
7. ``swe_gym.grading.forgery`` reads the files the patch changed as they are in the tree
   (NFKC-normalised) for the known forgery families; findings are ``suspect`` (what they earn
   is the env's ``suspect_policy``). Native code or bytecode in the patch is ``native_code``.

Grading never raises for what the patch does: any error becomes a report with reason
``grading_error`` and the message in ``detail``; the sandbox is always closed. Reasons:
``model_patch_failed``, ``native_code``, ``test_patch_failed``, ``tests_timed_out``,
``suite_did_not_run``, ``tests_failed``, ``no_fail_to_pass``, the channel's four above,
``tampered``, ``grading_error``.
"""

from __future__ import annotations

import logging
import shlex
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from swebench.harness.constants import FAIL_TO_PASS, PASS_TO_PASS, ResolvedStatus
from swebench.harness.grading import get_eval_tests_report, get_resolution_status

from swe_gym.errors import SandboxUnavailable, unknown_choice
from swe_gym.grading import forgery, offline, verdict
from swe_gym.grading.patches import apply_patch, patch_paths, unsafe_path
from swe_gym.grading.testinfra import (
    WORK_DIR,
    changed_paths,
    reset_to_base,
    revert_test_infra,
    start_watch,
)
from swe_gym.grading.testrun import (
    DEFAULT_TEST_TIMEOUT,
    TestRun,
    env_prefix,
    log_parser_choice,
    run_tests,
    test_command_choice,
)
from swe_gym.sandbox import Sandbox, make_sandbox
from swe_gym.tasks import Task

log = logging.getLogger(__name__)

RULES = ("rl", "official")
_PATCH_DIR = WORK_DIR  # inside the grading sandbox's workdir; removed before tests run


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
    patch_applied_with: str | None = None  # git apply | empty (None: refused)
    exit_code: int | None = None
    duration_s: float = 0.0
    log_tail: str = ""
    parsed: int = 0  # test statuses parsed from the complete log
    missing: list[str] = field(default_factory=list)  # expected tests absent from the log
    dropped: list[str] = field(default_factory=list)  # test-infrastructure paths reverted
    log_truncated: bool = False  # the log passed LOG_LIMIT and its middle was cut
    detail: str = ""  # why, for model_patch_failed, the channel's reasons and grading_error
    rule: str = "rl"  # rl | official (see the module doc)
    channel: str = "none"  # checked | none (not a pytest run) | the channel's problem
    mismatch: list[str] = field(default_factory=list)  # logged as passing, not so recorded
    suspect: list[str] = field(default_factory=list)  # swe_gym.grading.forgery findings
    tampered: list[str] = field(default_factory=list)  # the runtime guard's findings (guard.py)
    injected_tests: list[str] = field(default_factory=list)  # node ids no test file defines
    log_only: list[str] = field(default_factory=list)  # pytest: ids no node id makes (step 5)
    runner_patched: list[str] = field(default_factory=list)  # the runner's modules (step 6)
    plugins: list[str] = field(default_factory=list)  # entry-point plugins the run loaded
    parser: str = ""  # the log parser and where it came from (row, swebench's map, default)
    needs_network: list[str] = field(default_factory=list)  # failed for want of it (offline.py)
    test_cmd: str = ""  # the test command and where it came from

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def restore_test_files(sandbox: Sandbox, task: Task) -> None:
    """Put the task's test files back to ``base_commit`` (deleting ones that did not exist)."""
    reset_to_base(sandbox, task.base_commit, task.test_files)


def grade_in_sandbox(
    sandbox: Sandbox,
    task: Task,
    patch: str,
    timeout: float = DEFAULT_TEST_TIMEOUT,
    rule: str = "rl",
) -> GradingReport:
    """Grade ``patch`` in a started sandbox that holds a clean copy at ``base_commit``.
    Never raises: an error becomes reason ``grading_error``."""
    if rule not in RULES:
        raise unknown_choice("rule", rule, RULES)
    t0 = time.monotonic()
    report = GradingReport(task.instance_id, resolved=False, reason=None, rule=rule)
    try:
        _grade(sandbox, task, patch, timeout, report)
    except Exception as e:  # whatever the patch made happen, the verdict is a report
        log.warning("grading %s failed: %s", task.instance_id, e, exc_info=True)
        report.resolved, report.reason = False, "grading_error"
        report.detail = f"{type(e).__name__}: {e}"[:4000]
    report.duration_s = time.monotonic() - t0
    return report


def _base_texts(sandbox: Sandbox, patch: str) -> dict[str, str | None]:
    """The base text of each Python file the patch names (the tree is at base), read before
    the patch is applied: its header paths, whatever its hunks show (a ``binary`` diff too)."""
    out: dict[str, str | None] = {}
    for path in set(patch_paths(patch)) | set(forgery.added_lines(patch)):
        if path.endswith((".py", ".pyi")):
            try:
                out[path] = sandbox.read_file(path).decode("utf-8", "replace")
            except (FileNotFoundError, IsADirectoryError, ValueError, OSError):
                out[path] = None
    return out


def _tree_files(sandbox: Sandbox, paths: list[str]) -> tuple[dict[str, str], list[str]]:
    """The text of each Python file among ``paths`` as it is in the tree (what will run),
    and the native code or bytecode among them (``forgery.native_kind``)."""
    texts, native = {}, []
    for path in paths:
        why, data = forgery.native_kind(path, b""), b""  # by name, however large the file
        if why is None:
            try:
                data = sandbox.read_file(path, max_bytes=8 * 2**20)
            except (FileNotFoundError, IsADirectoryError, ValueError, OSError):
                continue
            why = forgery.native_kind(path, data[:4096])
        if why is not None:
            native.append(f"{path} ({why})")
        elif path.endswith((".py", ".pyi")):
            texts[path] = data.decode("utf-8", "replace")
    return texts, native


def _grade(sandbox: Sandbox, task: Task, patch: str, timeout: float, report: GradingReport) -> None:
    bad = unsafe_path(patch)
    if bad is not None:
        report.reason, report.detail = "model_patch_failed", bad
        _finish(report, task, {})
        return
    env = verdict.probe_environment(sandbox, env_prefix(task))
    if env.error:
        log.warning("grading %s: %s", task.instance_id, env.error)
    base_texts = _base_texts(sandbox, patch)
    start_watch(sandbox)
    method, applied = apply_patch(sandbox, patch, "model")
    report.patch_applied_with = method
    if method is None:
        report.reason, report.log_tail = "model_patch_failed", applied[-4000:]
        report.detail = "git apply refused the patch"
        _finish(report, task, {})
        return
    changed = changed_paths(sandbox)
    report.dropped = revert_test_infra(
        sandbox, task.base_commit, task.test_files, env.modules, changed
    )
    kept = [p for p in changed if p not in report.dropped]
    current, native = _tree_files(sandbox, kept)
    report.suspect = [str(f) for f in forgery.scan(patch, task.test_files, base_texts, current)]
    if native:
        report.reason = "native_code"
        report.detail = "the patch puts native code or bytecode in the tree: " + ", ".join(native)
        _finish(report, task, {})
        return
    restore_test_files(sandbox, task)
    test_method, test_log = apply_patch(
        sandbox, task.test_patch, "test", task.base_commit, strict=False
    )
    sandbox.run(f"rm -rf {shlex.quote(sandbox.workdir)}/{_PATCH_DIR}", timeout=30)
    if test_method is None:
        report.reason, report.log_tail = "test_patch_failed", test_log[-4000:]
        _finish(report, task, {})
        return
    parser, parser_source = log_parser_choice(task)
    cmd, cmd_source = test_command_choice(task)
    report.parser, report.test_cmd = f"{parser} ({parser_source})", f"{cmd} ({cmd_source})"
    use_channel = parser in verdict.PYTEST_PARSERS and (task.install_config or {}).get(
        "verdict_channel", True
    )
    guard = {
        "patched": kept,
        "tests": task.test_files,
        "watched": task.FAIL_TO_PASS + task.PASS_TO_PASS,
        "hook": (task.install_config or {}).get("verdict_guard", True),  # False: benchmarks only
    }
    channel = verdict.prepare(sandbox, WORK_DIR, env, guard) if use_channel else None
    if use_channel:  # a pytest run: ids no node id makes are the log's alone (step 5)
        report.log_only = verdict.log_only(task.FAIL_TO_PASS + task.PASS_TO_PASS)
    run = run_tests(sandbox, task, timeout, channel=channel)
    report.exit_code, report.log_tail, report.log_truncated = (
        run.exit_code,
        run.log[-4000:],
        run.truncated,
    )
    res = verdict.read_channel(sandbox, channel) if channel is not None else None
    if res is not None:
        report.injected_tests, report.runner_patched = verdict.injected(res), res.runner_patched
    if run.timed_out:
        report.reason = "tests_timed_out"
    elif res is not None and res.tampered:  # also when the veto stopped the suite itself
        report.channel, report.reason, report.tampered = "checked", "tampered", res.tampered
        report.detail = "the runtime guard saw: " + "; ".join(res.tampered[:20])
    elif not run.valid:
        report.reason = "suite_did_not_run"
    elif res is not None:
        _check_channel(report, task, run, res, parser)
    _finish(report, task, run.status, ran=not run.timed_out)
    report.needs_network = offline.network_failures(run.log, report.f2p_failed + report.p2p_failed)


def _check_channel(
    report: GradingReport, task: Task, run: TestRun, res: verdict.ChannelResult, parser: str
) -> None:
    report.plugins = res.plugins
    report.tampered, report.injected_tests = res.tampered, verdict.injected(res)
    if res.problem is not None:
        report.channel, report.reason, report.detail = res.problem, res.problem, res.detail
        return
    report.channel = "checked"
    if res.tampered:
        report.reason = "tampered"
        report.detail = "the runtime guard saw: " + "; ".join(res.tampered[:20])
        return
    chan = verdict.exact_status(res, parser)
    report.mismatch = verdict.compare(run.status, chan, task.FAIL_TO_PASS + task.PASS_TO_PASS)
    if report.mismatch:
        report.reason = "results_mismatch"
        report.detail = "the log shows passing what the grader's records do not: " + ", ".join(
            f"{t} (log {run.status.get(t)}, records {chan.get(t, 'absent')})"
            for t in report.mismatch[:20]
        )


def _finish(
    report: GradingReport, task: Task, status: dict[str, str], ran: bool = False
) -> GradingReport:
    report.status, report.parsed = status, len(status)
    if ran:
        report.missing = [t for t in task.FAIL_TO_PASS + task.PASS_TO_PASS if t not in status]
    f2p_ids, p2p_ids = task.FAIL_TO_PASS, task.PASS_TO_PASS
    if report.rule == "rl":  # ids no test file can define stand for no test: left out
        f2p_ids = [t for t in f2p_ids if t not in report.log_only]
        p2p_ids = [t for t in p2p_ids if t not in report.log_only]
    if not f2p_ids and report.reason is None:
        report.reason = "no_fail_to_pass"  # the swebench rule would count it resolved
    judged = status
    if report.rule == "rl":  # a fix makes its failing tests pass, not xfail or skip
        judged = {
            **status,
            **{t: "FAILED" for t in f2p_ids if status.get(t, "PASSED") != "PASSED"},
        }
    tests = get_eval_tests_report(judged, {FAIL_TO_PASS: f2p_ids, PASS_TO_PASS: p2p_ids})
    f2p, p2p = tests[FAIL_TO_PASS], tests[PASS_TO_PASS]
    report.f2p_failed = [t for t in f2p_ids if t not in f2p["success"]]
    report.p2p_failed = [t for t in p2p_ids if t not in p2p["success"]]
    report.f2p_pass = 1 - len(report.f2p_failed) / max(1, len(f2p_ids))
    report.p2p_pass = 1 - len(report.p2p_failed) / max(1, len(p2p_ids)) if p2p_ids else 1.0
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
    rule: str = "rl",
) -> GradingReport:
    """Grade ``patch`` for ``task`` in a fresh sandbox; the sandbox is always closed.
    ``rule``: ``"rl"`` (the reward) or ``"official"`` (swebench's; see the module doc).

    Raises only ``SandboxUnavailable`` (the backend is missing: a setup problem); every other
    failure, starting the sandbox included, is a report with reason ``grading_error``."""
    if rule not in RULES:
        raise unknown_choice("rule", rule, RULES)
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
        return grade_in_sandbox(sandbox, task, patch, timeout, rule)
    finally:
        _close(sandbox)


def _close(sandbox: Sandbox | None) -> None:
    if sandbox is None:
        return
    try:
        sandbox.close()
    except Exception as e:  # a verdict is already made; a leak is logged, not raised
        log.warning("closing the grading sandbox failed: %s", e)
