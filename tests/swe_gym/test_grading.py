"""``swe_gym/grading/grade.py``, where mutation testing found it unchecked (``benchmarks/mutation.py
grading``): which log parser and test command a task gets, its environment variables, what a
failed or partial patch reports, and that a patch is applied without leftovers. The pure parts
run without a sandbox; the rest on the local backend with the ``mini_repo`` fixture (seconds).
Each outcome end to end: test_grading_outcomes.py."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time

import pytest

from swe_gym.errors import SandboxUnavailable
from swe_gym.grading import GradingReport, apply_patch, grade_patch, log_parser_name, testrun
from swe_gym.grading import grade as grading
from swe_gym.sandbox import make_sandbox
from swe_gym.tasks import Task, normalise_row
from tests.conftest import TESTS


def _task(
    repo: str = "local/x",
    install_config: dict | None = None,
    test_patch: str = "",
    f2p: list[str] | None = None,
    p2p: list[str] | None = None,
) -> Task:
    return Task(
        instance_id="t-1",
        repo=repo,
        base_commit="0" * 40,
        problem_statement="",
        patch="",
        test_patch=test_patch,
        FAIL_TO_PASS=f2p if f2p is not None else ["a"],
        PASS_TO_PASS=p2p or [],
        install_config=install_config,
    )


def _touching(*paths: str) -> str:
    """A test patch that adds a line to each of ``paths`` (its test files)."""
    return "".join(
        f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n@@ -1 +1,2 @@\n x\n+y\n" for p in paths
    )


# ---------------------------------------------------------------- pure: parser and command


def test_log_parser_is_the_tasks_own_then_the_repositorys_then_pytests():
    assert (
        log_parser_name(_task(install_config={"log_parser": "parse_log_django"}))
        == "parse_log_django"
    )
    assert log_parser_name(_task(repo="sympy/sympy")) == "parse_log_sympy"
    assert log_parser_name(_task(repo="sympy/sympy", install_config={})) == "parse_log_sympy"
    assert log_parser_name(_task()) == "parse_log_pytest"


def test_an_unknown_log_parser_names_the_task_the_value_and_the_choices():
    with pytest.raises(ValueError) as err:
        log_parser_name(_task(install_config={"log_parser": "parse_log_pytset"}))
    msg = str(err.value)
    assert "log_parser for task t-1: 'parse_log_pytset'" in msg
    assert "choose one of:" in msg and "Did you mean 'parse_log_pytest'?" in msg


def test_test_command_runs_the_configured_command_on_the_python_test_files():
    task = _task(
        install_config={"test_cmd": "pytest -x"},
        test_patch=_touching("tests/test a.py", "tests/data.json"),
    )
    assert testrun.test_command(task) == "pytest -x 'tests/test a.py'"  # quoted; data not run
    listed = _task(
        install_config={"test_cmd": ["source env.sh", "pytest -rA"]},
        test_patch=_touching("t/test_x.py"),
    )
    assert testrun.test_command(listed) == "source env.sh && pytest -rA t/test_x.py"


def test_test_command_falls_back_to_swebenchs_spec_then_pytest(tmp_path, monkeypatch):
    """Without a row test_cmd: swebench's spec for (repo, version) (the table the installed
    swebench has, or ``$SWE_GYM_SWEBENCH_SPECS``), then ``pytest -rA``."""
    from swe_gym.taskenv import specs

    cmd = "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose"
    (tmp_path / "specs.json").write_text(json.dumps({"sympy/sympy": {"1.1": {"test_cmd": cmd}}}))
    monkeypatch.setenv(specs.SPECS_ENV, str(tmp_path / "specs.json"))
    specs.clear_caches()
    try:
        sympy = dataclasses.replace(
            _task(repo="sympy/sympy", test_patch=_touching("a/test_b.py")), version="1.1"
        )
        assert testrun.test_command(sympy) == f"{cmd} a/test_b.py"
        other = dataclasses.replace(sympy, version="9.9")  # a version swebench does not list
        assert testrun.test_command(other) == "pytest -rA a/test_b.py"
    finally:
        monkeypatch.delenv(specs.SPECS_ENV)
        specs.clear_caches()
    assert (
        testrun.test_command(_task(test_patch=_touching("t/test_x.py"))) == "pytest -rA t/test_x.py"
    )
    # no Python test file: the command gets the files the test patch touches
    assert (
        testrun.test_command(_task(test_patch=_touching("t/cases.txt"))) == "pytest -rA t/cases.txt"
    )


def test_pass_rates_are_the_share_of_each_list_that_passed():
    """The verdict rule on a parsed status map (no sandbox): a failed or skipped F2P test and
    a missing P2P test fail, XFAIL and a skipped P2P test pass; rates are over each list."""
    task = _task(f2p=["f1", "f2"], p2p=["p1", "p2", "p3", "p4"])
    status = {"f1": "PASSED", "f2": "FAILED", "p1": "PASSED", "p2": "SKIPPED", "p3": "XFAIL"}
    report = grading._finish(GradingReport("t-1", False, None), task, status, ran=True)
    assert (report.f2p_pass, report.f2p_failed) == (0.5, ["f2"])
    assert (report.p2p_pass, report.p2p_failed) == (0.75, ["p4"])
    assert report.missing == ["p4"] and report.parsed == 5
    assert not report.resolved and report.reason == "tests_failed"
    alone = dataclasses.replace(task, PASS_TO_PASS=[])
    report = grading._finish(
        GradingReport("t-1", False, None), alone, {"f1": "PASSED", "f2": "SKIPPED"}, ran=True
    )
    assert (report.f2p_pass, report.f2p_failed, report.p2p_pass) == (0.5, ["f2"], 1.0)
    xfail = {"f1": "PASSED", "f2": "XFAIL"}
    report = grading._finish(
        GradingReport("t-1", False, None, rule="official"), alone, xfail, ran=True
    )
    assert report.resolved and report.reason is None and report.f2p_pass == 1.0
    # The reward's rule: a FAIL_TO_PASS test that xfails (pytest.xfail() in the code) is no fix.
    report = grading._finish(GradingReport("t-1", False, None), alone, xfail, ran=True)
    assert not report.resolved and report.f2p_failed == ["f2"] and report.reason == "tests_failed"


# ---------------------------------------------------------------- on the local backend


def test_a_fix_that_breaks_a_passing_test_reports_each_side(mini, code_patch):
    row, opts = mini
    both_wrong = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a + b\n"
    report = grade_patch(
        normalise_row(row), code_patch(both_wrong), sandbox_options=opts, timeout=120
    )
    assert not report.resolved and report.reason == "tests_failed"
    assert report.f2p_pass == 1.0 and report.f2p_failed == []
    assert report.p2p_pass == 0.0 and report.p2p_failed == ["tests/test_calc.py::test_sub"]
    assert report.patch_applied_with == "git apply" and report.exit_code == 1


def test_an_empty_patch_is_graded_as_the_unchanged_repository(mini):
    row, opts = mini
    report = grade_patch(normalise_row(row), "", sandbox_options=opts, timeout=120)
    assert report.patch_applied_with == "empty" and report.reason == "tests_failed"
    assert report.f2p_pass == 0.0 and report.p2p_pass == 1.0 and report.missing == []


def test_a_patch_that_does_not_apply_names_no_test_as_missing(mini):
    row, opts = mini
    broken = row["patch"].replace("-    return a - b", "-    return a * b", 1)
    report = grade_patch(normalise_row(row), broken, sandbox_options=opts, timeout=120)
    assert report.reason == "model_patch_failed" and report.patch_applied_with is None
    assert report.resolved is False  # a verdict, not an unset field
    assert report.missing == [] and report.parsed == 0  # no test ran, none went missing
    assert report.log_tail.startswith("$ git apply --verbose ")  # git's reason, for the report
    for cmd in ("--reject", "patch --batch"):  # no fallback for the model's patch
        assert cmd not in report.log_tail


def test_a_patch_without_its_final_newline_applies(mini):
    row, opts = mini
    report = grade_patch(
        normalise_row(row), row["patch"].rstrip("\n"), sandbox_options=opts, timeout=120
    )
    assert report.resolved and report.patch_applied_with == "git apply"


def test_a_fuzzy_test_patch_keeps_the_model_patch_and_leaves_no_rejects(
    mini, mini_repo, code_patch
):
    """After ``git apply --reject`` fails, only the test patch's files are reset: the model
    patch stays and the rejected hunk's .rej file goes (``patch --fuzz`` then keeps a .orig
    backup of what it fuzzed, as the harness's own run does)."""
    row, opts = mini
    repo = mini_repo[1] / "local__mini"
    path = repo / "tests" / "test_calc.py"
    base = path.read_text()
    path.write_text(
        base.replace("from calc import sub", "from calc import add, sub")
        + "\n\ndef test_add():\n    assert add(2, 2) == 4\n"
    )
    two_hunks = subprocess.run(
        ["git", "diff", "-U1", "--", "tests/test_calc.py"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    subprocess.run(["git", "checkout", "--", "tests/test_calc.py"], cwd=repo, check=True)
    fuzzy = two_hunks.replace(
        "+from calc import add, sub\n \n", "+from calc import add, sub\n x\n", 1
    )
    task = normalise_row(row)
    sb = make_sandbox(task, "local", **opts)
    sb.start()
    try:
        assert apply_patch(sb, row["patch"], "model")[0] == "git apply"
        method, _ = apply_patch(sb, fuzzy, "test", task.base_commit, strict=False)
        status = sb.run(
            f"cd {sb.workdir} && git status --porcelain --untracked-files=all "
            "-- . ':!.swe_gym_grading'",
            timeout=60,
        ).output
    finally:
        sb.close()
    assert method == "patch --fuzz=5"
    changed = sorted(line[3:] for line in status.splitlines())
    assert changed == ["calc.py", "tests/test_calc.py", "tests/test_calc.py.orig"], status


def test_the_tasks_environment_reaches_the_test_command_quoted(mini, run_tests_local):
    row, _ = mini
    # sh -c: the test files appended to the command become its $0
    cfg = {
        "test_cmd": "sh -c 'echo \"greeting=$GREETING $TO\"; exit 3'",
        "env_vars": {"GREETING": "hello; world $HOME", "TO": "you"},
    }
    run = run_tests_local(normalise_row({**row, "install_config": cfg}))
    assert "greeting=hello; world $HOME you" in run.log
    assert run.exit_code == 3 and not run.timed_out


def test_a_long_log_is_cut_to_its_limit_and_bad_bytes_do_not_stop_grading(mini, run_tests_local):
    """Past ``log_limit`` the head and tail halves are kept (the limit, plus the one-line
    note); a byte that is not UTF-8 is replaced, never an error."""
    row, _ = mini
    out = r"""python -c "import sys; sys.stdout.buffer.write(b'head\xff\n' + b'x' * 20000 + b'\ntail\n')" """
    run = run_tests_local(
        normalise_row({**row, "install_config": {"test_cmd": out.strip()}}), log_limit=4000
    )
    assert run.truncated and "head\ufffd" in run.log and "tail" in run.log
    assert "<log truncated:" in run.log
    # 2 x 2000 bytes kept, the note (~45 bytes), the replacement char 2 bytes wider
    assert 4000 < len(run.log.encode()) <= 4100, len(run.log.encode())


# ---------------------------------------------------------------- a grading that goes wrong


class _Sandbox:
    """A stand-in sandbox (no process): the failure paths around the grading, not the grading."""

    workdir = "/work"

    def __init__(self, start_error=None, close_error=None):
        self.start_error, self.close_error, self.closed = start_error, close_error, 0

    def start(self):
        if self.start_error:
            raise self.start_error

    def close(self):
        self.closed += 1
        if self.close_error:
            raise self.close_error


def test_a_sandbox_that_fails_to_start_is_closed_and_reported(monkeypatch, caplog):
    sb = _Sandbox(start_error=RuntimeError("no room"), close_error=OSError("stuck"))
    monkeypatch.setattr(grading, "make_sandbox", lambda task, backend, **kw: sb)
    before = time.monotonic()
    with caplog.at_level("WARNING", logger="swe_gym.grading"):
        report = grade_patch(_task(), "")
    elapsed = time.monotonic() - before
    assert (report.instance_id, report.resolved, report.reason) == ("t-1", False, "grading_error")
    assert report.detail == "the grading sandbox did not start: RuntimeError: no room"
    assert 0 <= report.duration_s <= elapsed
    assert sb.closed == 1  # closed, and its failure to close is logged, not raised
    assert "closing the grading sandbox failed: stuck" in caplog.text
    # a missing backend is raised (a setup problem), and the sandbox is closed all the same
    sb = _Sandbox(start_error=SandboxUnavailable("no bwrap"))
    with pytest.raises(SandboxUnavailable, match="no bwrap"):
        grade_patch(_task(), "")
    assert sb.closed == 1


def test_an_error_inside_the_grading_is_a_report_with_its_cause(monkeypatch, caplog):
    seen = []

    def broken(sandbox, task, patch, timeout, report):
        seen.append(timeout)
        raise ValueError("v" * 5000)

    sb = _Sandbox()
    monkeypatch.setattr(grading, "make_sandbox", lambda task, backend, **kw: sb)
    monkeypatch.setattr(grading, "_grade", broken)
    before = time.monotonic()
    with caplog.at_level("WARNING", logger="swe_gym.grading"):
        report = grade_patch(_task(), "", timeout=7)
    elapsed = time.monotonic() - before
    assert seen == [7]  # the caller's test timeout reaches the grading
    assert (report.instance_id, report.resolved, report.reason) == ("t-1", False, "grading_error")
    assert report.detail == ("ValueError: " + "v" * 5000)[:4000]
    assert 0 <= report.duration_s <= elapsed and sb.closed == 1
    (record,) = [r for r in caplog.records if r.getMessage().startswith("grading t-1 failed: v")]
    assert record.exc_info and record.exc_info[0] is ValueError  # the traceback is logged


def test_restore_test_files_checks_out_the_base_and_removes_new_ones(mini):
    row, opts = mini
    task = normalise_row(
        {**row, "test_patch": _touching("tests/test_calc.py", "tests/test_new.py")}
    )
    sb = make_sandbox(task, "local", **opts)
    sb.start()
    try:
        sb.run(f"cd {sb.workdir} && echo junk > tests/test_calc.py && echo x > tests/test_new.py")
        grading.restore_test_files(sb, task)
        assert sb.read_file("tests/test_calc.py").decode() == TESTS
        assert "test_new.py" not in sb.run(f"ls {sb.workdir}/tests").output
    finally:
        sb.close()


def test_the_patch_folder_is_gone_before_the_tests_run(mini):
    """The diffs the grader applied (the hidden test patch among them) are removed from the
    workdir before the suite runs: a test cannot read them."""
    row, opts = mini
    probe = (
        f"ls {grading._PATCH_DIR}/*.diff > /dev/null 2>&1 && echo PATCHES-LEFT; "
        "python -m pytest -rA -p no:cacheprovider"
    )
    task = normalise_row({**row, "install_config": {**row["install_config"], "test_cmd": probe}})
    report = grade_patch(task, row["patch"], sandbox_options=opts, timeout=120)
    assert report.resolved, (report.reason, report.log_tail)
    assert "PATCHES-LEFT" not in report.log_tail


def test_ids_no_node_id_makes_are_judged_on_the_log_by_swebench_and_left_out_by_rl():
    """A pytest row's ids that no test file can define (``report.log_only``, set when the
    channel checks the run): ``official`` reads them in the log as swebench does; ``rl``
    leaves them out, so such an id never pays the reward as a FAIL_TO_PASS test."""
    task = _task(f2p=["t.py::f"], p2p=["t.py::p", "[100%]"])
    failing = {"t.py::f": "PASSED", "t.py::p": "PASSED", "[100%]": "FAILED"}

    def finish(rule, t, status):  # noqa: ANN001, ANN202
        report = GradingReport("t-1", False, None, rule=rule)
        report.log_only = ["[100%]"]
        return grading._finish(report, t, status, ran=True)

    assert finish("official", task, failing).p2p_failed == ["[100%]"]
    assert finish("rl", task, failing).resolved
    only = dataclasses.replace(task, FAIL_TO_PASS=["[100%]"], PASS_TO_PASS=["t.py::p"])
    forged = {"[100%]": "PASSED", "t.py::p": "PASSED"}
    assert finish("official", only, forged).resolved  # swebench's verdict on this log
    assert finish("rl", only, forged).reason == "no_fail_to_pass"
