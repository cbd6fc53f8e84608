"""Grading at scale without network: a generated repository whose graded run has 720+ tests and
a ``pytest -rA`` log far over the agent's 16,000-character output cap (issue 11: truncated logs
graded every gold patch unresolved and cut curation's FAIL_TO_PASS / PASS_TO_PASS)."""

from __future__ import annotations

import pytest
from bigrepo import BREAK_ONE, PASS_ALL_CONFTEST, TEXT, _diff, add_file, make_bigrepo

from swe_gym.grading import grade_patch
from swe_gym.sandbox.base import DEFAULT_OUTPUT_LIMIT
from swe_gym.tasks import Task, normalise_row


@pytest.fixture(scope="session")
def big(tmp_path_factory) -> tuple[dict, dict, Task]:
    repos = tmp_path_factory.mktemp("bigrepos")
    row = make_bigrepo(repos)
    return row, {"repos_dir": str(repos)}, normalise_row(row)


def _grade(big, patch):
    _, opts, task = big
    return grade_patch(task, patch, sandbox_options=opts, timeout=300)


def test_gold_resolves_with_every_status_parsed_from_a_log_over_the_cap(big):
    _, _, task = big
    report = _grade(big, task.patch)
    assert report.resolved, (report.reason, report.detail, report.missing[:5])
    expected = set(task.FAIL_TO_PASS) | set(task.PASS_TO_PASS)
    assert len(expected) > 700
    assert report.parsed == len(expected) and set(report.status) == expected
    assert report.missing == [] and report.dropped == [] and not report.log_truncated
    # the parsed log was well over what one sandbox command may return
    assert (
        len(expected) * len("PASSED tests/util/test_numbers.py::test_square")
        > 2 * DEFAULT_OUTPUT_LIMIT
    )


def test_empty_patch_fails_exactly_the_fail_to_pass_tests(big):
    _, _, task = big
    report = _grade(big, "")
    assert not report.resolved and report.reason == "tests_failed"
    assert report.f2p_failed == task.FAIL_TO_PASS
    assert report.p2p_failed == [] and report.missing == []


def test_patch_breaking_one_pass_to_pass_test_is_unresolved(big):
    row, _, task = big
    from pathlib import Path

    repo = Path(big[1]["repos_dir"]) / "local__bigrepo"
    breaking = _diff(repo, {"bigpkg/util/text.py": BREAK_ONE})
    assert TEXT != BREAK_ONE
    report = _grade(big, task.patch + breaking)
    assert not report.resolved and report.reason == "tests_failed"
    assert report.f2p_failed == []
    assert report.p2p_failed == [
        "tests/util/text/test_text.py::test_shout_adds_an_exclamation_mark"
    ]


def test_conftest_hack_is_dropped_and_unresolved(big):
    report = _grade(big, add_file("tests/conftest.py", PASS_ALL_CONFTEST))
    assert not report.resolved and report.reason == "tests_failed"
    assert report.dropped == ["tests/conftest.py"]
    assert set(report.f2p_failed) == set(big[2].FAIL_TO_PASS)


def test_validator_accepts_the_gold_row(big):
    from swe_gym.validate import validate_task

    _, opts, task = big
    result = validate_task(task, "local", opts)
    assert result.ok, result.problems


def test_curation_derives_the_full_fail_to_pass_and_pass_to_pass(big):
    """Also: with no ``test_cmd`` curation runs grading's default, ``pytest -rA``."""
    from swe_gym.curation.validate import validate_row

    row, opts, _ = big
    bare = {k: v for k, v in row.items() if k not in ("FAIL_TO_PASS", "PASS_TO_PASS")}
    bare["install_config"] = {"env_vars": row["install_config"]["env_vars"]}
    result = validate_row(bare, "local", 300, opts)
    assert result["ok"], result.get("reason")
    assert result["FAIL_TO_PASS"] == row["FAIL_TO_PASS"]
    assert result["PASS_TO_PASS"] == row["PASS_TO_PASS"]
