"""Each grading outcome on the local backend, with the two-commit ``mini_repo`` fixture: a skipped
F2P test, a timeout, a suite that did not run, a test patch that does not apply (or only with
fuzz), an empty FAIL_TO_PASS, a grading error; and the validator's command line."""

from __future__ import annotations

import json
import subprocess

from swe_gym.grading import grade_patch
from swe_gym.tasks import Task, normalise_row


def _grade(mini, patch: str, **changes):
    row, opts = mini
    return grade_patch(normalise_row({**row, **changes}), patch, sandbox_options=opts, timeout=120)


def test_gold_resolves_and_reports_the_parsed_count(mini):
    report = _grade(mini, mini[0]["patch"])
    assert report.resolved and report.reason is None
    assert report.parsed == 2 and report.missing == [] and report.dropped == []


def test_a_skipped_fail_to_pass_test_is_not_resolved(mini, code_patch):
    skipping = "import pytest\n\n\ndef add(a, b):\n    pytest.skip('not today')\n\n\ndef sub(a, b):\n    return a - b\n"
    report = _grade(mini, code_patch(skipping))
    assert not report.resolved and report.reason == "tests_failed"
    # pytest -rA names a skip by file:line only: the test is absent from the parsed statuses
    assert "tests/test_calc.py::test_add" not in report.status
    assert report.missing == ["tests/test_calc.py::test_add"]
    assert report.f2p_failed == ["tests/test_calc.py::test_add"] and report.p2p_failed == []


def test_a_hanging_test_times_out(mini, code_patch):
    # 30 s of sleep against a test timeout of 8 s, under a sandbox default of 120 s: only the
    # grading's own timeout can stop it
    hanging = "import time\n\n\ndef add(a, b):\n    time.sleep(30)\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
    row, opts = mini
    report = grade_patch(
        normalise_row(row),
        code_patch(hanging),
        sandbox_options={**opts, "command_timeout": 120},
        timeout=8,
    )
    assert not report.resolved and report.reason == "tests_timed_out"
    assert "Start Test Output" in report.log_tail  # the partial log is still read back


def test_a_suite_that_does_not_run_is_reported(mini):
    row = mini[0]
    cfg = {**row["install_config"], "test_cmd": "python -m no_such_test_runner_here"}
    report = _grade(mini, row["patch"], install_config=cfg)
    assert not report.resolved and report.reason == "suite_did_not_run"
    assert report.exit_code not in (None, 0) and report.parsed == 0


def test_a_test_patch_that_does_not_apply_is_reported(mini):
    row = mini[0]
    broken = row["test_patch"].replace(" def test_sub():", " def test_sub_renamed():")
    report = _grade(mini, row["patch"], test_patch=broken)
    assert not report.resolved and report.reason == "test_patch_failed"
    assert "git apply" in report.log_tail


def test_a_test_patch_applied_only_with_fuzz_keeps_the_model_patch(mini, mini_repo, code_patch):
    """A failed ``git apply`` of the test patch used to reset the whole tree, model patch too."""
    row = mini[0]
    repo = mini_repo[1] / "local__mini"
    path = repo / "tests" / "test_calc.py"
    base = path.read_text()
    path.write_text(
        base.replace("from calc import sub", "from calc import add, sub")
        + "\n\ndef test_add():\n    assert add(2, 2) == 4\n"
    )
    two_hunks = subprocess.run(
        ["git", "diff", "-U1", "--", "tests/test_calc.py"], cwd=repo, capture_output=True, text=True
    ).stdout
    subprocess.run(["git", "checkout", "--", "tests/test_calc.py"], cwd=repo, check=True)
    # hunk 1's trailing context differs from the file: git apply (and --reject) fail on it,
    # patch --fuzz accepts; hunk 2 applied by --reject must not be left behind twice
    fuzzy = two_hunks.replace(
        "+from calc import add, sub\n \n", "+from calc import add, sub\n x\n", 1
    )
    assert fuzzy != two_hunks and fuzzy.count("@@ -") == 2
    report = _grade(mini, row["patch"], test_patch=fuzzy)
    assert report.resolved, (report.reason, report.log_tail[-800:])
    assert report.patch_applied_with == "git apply"
    assert report.status == {
        "tests/test_calc.py::test_add": "PASSED",
        "tests/test_calc.py::test_sub": "PASSED",
    }


def test_an_empty_fail_to_pass_is_never_resolved(mini):
    row, opts = mini
    task = Task(
        **{
            k: row[k]
            for k in (
                "instance_id",
                "repo",
                "base_commit",
                "problem_statement",
                "patch",
                "test_patch",
            )
        },
        FAIL_TO_PASS=[],
        PASS_TO_PASS=[],
        install_config=row["install_config"],
    )
    report = grade_patch(task, "", sandbox_options=opts)
    assert not report.resolved and report.reason == "no_fail_to_pass"


def test_an_error_while_grading_is_a_report_and_the_sandbox_is_closed(mini, monkeypatch):
    import swe_gym.grading.grade as grading

    closed = []
    real = grading.make_sandbox

    def tracking(task, backend, **opts):
        sb = real(task, backend, **opts)
        close = sb.close
        sb.close = lambda: (closed.append(True), close())[1]
        return sb

    def boom(*a, **k):
        raise OSError("disk on fire")

    monkeypatch.setattr(grading, "make_sandbox", tracking)
    monkeypatch.setattr(grading, "run_tests", boom)
    report = _grade(mini, mini[0]["patch"])
    assert not report.resolved and report.reason == "grading_error"
    assert "disk on fire" in report.detail and closed == [True]


def test_a_sandbox_that_cannot_start_is_a_grading_error(mini):
    row, opts = mini
    task = normalise_row({**row, "base_commit": "0" * 40})  # not in the repository
    report = grade_patch(task, row["patch"], sandbox_options=opts)
    assert not report.resolved and report.reason == "grading_error"
    assert "did not start" in report.detail


def test_validator_cli_reports_bad_rows_and_judges_the_others(mini, tmp_path, capsys):
    from swe_gym.validate import main

    row, opts = mini
    bad = {**row, "instance_id": "local__mini-bad", "FAIL_TO_PASS": []}
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n" + json.dumps(bad) + "\n")
    code = main(
        [
            str(path),
            "--repos-dir",
            opts["repos_dir"],
            "--sandbox-option",
            "memory_mb=4096",
            "--jobs",
            "1",
        ]
    )
    out = capsys.readouterr().out
    assert code == 1
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("local__")}
    assert " ok " in lines["local__mini-1"] + " "
    assert "FAIL" in lines["local__mini-bad"] and "FAIL_TO_PASS" in lines["local__mini-bad"]
    assert "1 passed, 1 failed" in out


def test_validator_cli_rejects_a_malformed_sandbox_option():
    res = subprocess.run(
        ["python", "-m", "swe_gym.validate", "--sandbox-option", "novalue"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2 and "KEY=VALUE" in res.stderr


def test_a_log_over_the_read_limit_keeps_head_and_tail_and_says_so(mini, run_tests_local):
    run = run_tests_local(normalise_row(mini[0]), log_limit=300)
    assert run.truncated and "<log truncated:" in run.log
    assert run.log.startswith(">>>>> Start Test Output") and "Test Exit Code: 0" in run.log
    assert run.exit_code == 0 and len(run.log) < 400  # (no test patch: test_sub alone passes)
