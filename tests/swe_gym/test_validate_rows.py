"""``validate`` on a row whose bug crashes the test runner itself (as pytest-dev__pytest-7168's
does: an INTERNALERROR before the fix): the row is valid when the gold patch resolves."""

from __future__ import annotations

from swe_gym.tasks import normalise_row
from swe_gym.validate import validate_task
from tests.conftest import diff_of, git

CODE = "def describe(x):\n    raise RuntimeError('broken repr')\n"
FIXED = "def describe(x):\n    return repr(x)\n"
# the tree's own conftest calls the buggy code while pytest makes a report: an INTERNALERROR
CONFTEST = """\
def pytest_runtest_logreport(report):
    import lib
    lib.describe(report)
"""
TESTS = "def test_one():\n    assert True\n"
NEW = "\n\ndef test_describe():\n    from lib import describe\n    assert describe(1) == '1'\n"


def _row(tmp_path, conftest: str) -> tuple[dict, str]:
    repo = tmp_path / "local__crash"
    (repo / "tests").mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "lib.py").write_text(CODE)
    (repo / "conftest.py").write_text(conftest)
    (repo / "tests" / "test_lib.py").write_text(TESTS)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "lib")
    return {
        "instance_id": "local__crash-1", "repo": "local/crash", "problem_statement": "crash",
        "base_commit": git(repo, "rev-parse", "HEAD").strip(),
        "patch": diff_of(repo, "lib.py", FIXED),
        "test_patch": diff_of(repo, "tests/test_lib.py", TESTS + NEW),
        "FAIL_TO_PASS": ["tests/test_lib.py::test_describe"],
        "PASS_TO_PASS": ["tests/test_lib.py::test_one"],
        "install_config": {"test_cmd": "python -m pytest -rA -p no:cacheprovider"},
    }, str(tmp_path)  # fmt: skip


def test_a_bug_that_crashes_the_runner_before_the_fix_is_a_valid_row(tmp_path):
    row, repos = _row(tmp_path, CONFTEST)
    v = validate_task(normalise_row(row), "local", {"repos_dir": repos})
    assert v.ok, v.problems
    assert v.verdicts["empty"]["ours"] is False and v.verdicts["gold"]["ours"] is True


def test_a_runner_that_crashes_with_the_fix_too_is_reported(tmp_path):
    row, repos = _row(tmp_path, CONFTEST.replace("lib.describe(report)", "raise RuntimeError"))
    v = validate_task(normalise_row(row), "local", {"repos_dir": repos})
    assert not v.ok
    assert any(p.startswith("before the fix: suite_did_not_run") for p in v.problems), v.problems
