"""A test that needs the network fails in the sandbox (it has only ``lo``) whatever the patch
does; the report names it (``needs_network``) and leaves every other failure unnamed."""

from __future__ import annotations

from swe_gym.grading import grade_patch
from swe_gym.grading.offline import network_failures
from swe_gym.tasks import normalise_row
from tests.conftest import diff_of, git

CODE = "def double(x):\n    return x + 1\n"
TESTS = """\
import urllib.request


def test_fetches_data():
    urllib.request.urlopen("http://files.example.org/data.bin", timeout=5).read()


def test_local():
    assert 1 + 1 == 2
"""
NEW = "\n\ndef test_double():\n    from lib import double\n    assert double(2) == 4\n"


def test_a_test_that_downloads_is_named_and_a_plain_failure_is_not(tmp_path):
    repo = tmp_path / "local__net"
    (repo / "tests").mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "lib.py").write_text(CODE)
    (repo / "tests" / "test_lib.py").write_text(TESTS)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "lib")
    row = {
        "instance_id": "local__net-1", "repo": "local/net", "problem_statement": "double",
        "base_commit": git(repo, "rev-parse", "HEAD").strip(),
        "patch": diff_of(repo, "lib.py", CODE.replace("x + 1", "2 * x")),
        "test_patch": diff_of(repo, "tests/test_lib.py", TESTS + NEW),
        "FAIL_TO_PASS": ["tests/test_lib.py::test_double"],
        "PASS_TO_PASS": ["tests/test_lib.py::test_fetches_data", "tests/test_lib.py::test_local"],
        "install_config": {"test_cmd": "python -m pytest -rA -p no:cacheprovider"},
    }  # fmt: skip
    opts = {"repos_dir": str(tmp_path)}
    empty = grade_patch(normalise_row(row), "", sandbox_options=opts)
    assert set(empty.f2p_failed + empty.p2p_failed) == {
        "tests/test_lib.py::test_double",
        "tests/test_lib.py::test_fetches_data",
    }
    assert empty.needs_network == ["tests/test_lib.py::test_fetches_data"]
    gold = grade_patch(normalise_row(row), row["patch"], sandbox_options=opts)
    assert not gold.resolved and gold.needs_network == ["tests/test_lib.py::test_fetches_data"]


def test_evidence_is_read_per_test():
    log = (
        "____ TestData.test_fetch ____\n"
        "E   urllib.error.URLError: <urlopen error [Errno -3] Temporary failure in name resolution>\n"
        "____ test_other ____\n"
        "E   assert 3 == 4\n"
        "=========================== short test summary info ============================\n"
        "FAILED a.py::test_more - requests.exceptions.ConnectionError: Max retries exceeded\n"
    )
    failed = ["a.py::TestData::test_fetch", "a.py::test_other", "a.py::test_more"]
    assert network_failures(log, failed) == ["a.py::TestData::test_fetch", "a.py::test_more"]
    assert network_failures("____ test_other ____\nE   assert 3 == 4\n", failed) == []
