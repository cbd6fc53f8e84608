"""The grader's records agree with an honest log, whatever the tests' ids and outcomes.

A generated repository whose suite has every outcome pytest reports (pass, fail, error in setup
and teardown, skip by marker and by call, xfail by marker and by call, strict and loose xpass)
under every id shape the log parsers meet (classes, parameters with spaces, brackets, dashes
and non-ASCII, nested folders). Run through ``testrun.run_tests`` with the channel, for each
pytest parser: no test the log shows passing lacks a passing record, and every record's status
equals the log's wherever the log has one.
"""

from __future__ import annotations

import subprocess

import pytest

from swe_gym.grading import verdict
from swe_gym.grading.testinfra import WORK_DIR
from swe_gym.grading.testrun import run_tests
from swe_gym.sandbox import make_sandbox
from swe_gym.tasks import normalise_row

SUITE = """import pytest


@pytest.fixture
def broken():
    raise RuntimeError("setup fails")


@pytest.fixture
def bad_teardown():
    yield 1
    raise RuntimeError("teardown fails")


def test_pass():
    assert True


def test_fail():
    assert 1 == 2


def test_setup_error(broken):
    pass


def test_teardown_error(bad_teardown):
    pass


@pytest.mark.skip(reason="marker")
def test_skip_marker():
    pass


def test_skip_call():
    pytest.skip("call")


@pytest.mark.xfail(reason="known")
def test_xfail_marker():
    assert False


def test_xfail_call():
    pytest.xfail("call")


@pytest.mark.xfail(reason="loose")
def test_xpass_loose():
    pass


@pytest.mark.xfail(reason="strict", strict=True)
def test_xpass_strict():
    pass


@pytest.mark.parametrize("v", ["a b", "x[1]", "dash-y", "caf\\u00e9", "1.5"])
def test_params(v):
    assert v != "dash-y"


class TestGroup:
    def test_method(self):
        assert True

    @pytest.mark.parametrize("n", [1, 2])
    def test_method_param(self, n):
        assert n == 1
"""


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repos = tmp_path_factory.mktemp("repos")
    path = repos / "local__outcomes"
    (path / "tests" / "deep").mkdir(parents=True)
    (path / "tests" / "deep" / "test_outcomes.py").write_text(SUITE)
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": str(repos)}  # fmt: skip
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "suite"]):
        subprocess.run(["git", *args], cwd=path, env=env, check=True)
    base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip
    return repos, base


@pytest.mark.parametrize("parser", sorted(verdict.PYTEST_PARSERS))
def test_an_honest_runs_records_back_its_log(repo, parser):
    repos, base = repo
    task = normalise_row({
        "instance_id": "local__outcomes-1", "repo": "local/outcomes", "base_commit": base,
        "problem_statement": "x", "patch": "", "test_patch": "",
        "FAIL_TO_PASS": ["tests/deep/test_outcomes.py::test_pass"],
        "install_config": {"test_cmd": "python -m pytest -rA -p no:cacheprovider tests",
                           "log_parser": parser},
    })  # fmt: skip
    sb = make_sandbox(task, "local", repos_dir=str(repos))
    sb.start()
    try:
        env = verdict.probe_environment(sb)
        assert not env.error, env.error
        channel = verdict.prepare(sb, WORK_DIR, env)
        run = run_tests(sb, task, timeout=300, channel=channel)
        res = verdict.read_channel(sb, channel)
    finally:
        sb.close()
    assert run.valid and res.problem is None, (res.problem, res.detail, run.log[-2000:])
    chan = verdict.exact_status(res, parser)
    assert len(run.status) >= 15, run.status  # the suite's ids as this parser keys them
    assert verdict.compare(run.status, chan, sorted(run.status)) == []
    lookup = {t: verdict._lookup(chan, t) for t in run.status}
    # Some parsers key ERROR lines with pytest's reason ("id - RuntimeError: ..."): not an id.
    ids = [t for t in run.status if " - " not in t or run.status[t] != "ERROR"]
    differ = {t: (run.status[t], lookup[t]) for t in ids if lookup[t] != run.status[t]}
    assert differ == {}, differ
    # Outcomes the RL rule reads: a call-time xfail is XFAIL, not PASSED, in both.
    xfail = next(t for t in run.status if "test_xfail_call" in t)
    assert run.status[xfail] == lookup[xfail] == "XFAIL"


def _record(res, nodeid, call, setup="passed", teardown="passed"):
    res.own[nodeid] = {"setup": setup, "call": call, "teardown": teardown}
    res.rep[nodeid] = {w: (o, False) for w, o in (("setup", setup), ("call", call),
                                                    ("teardown", teardown))}  # fmt: skip


@pytest.mark.parametrize("parser", sorted(verdict.PYTEST_PARSERS))
def test_a_test_id_twin_does_not_back_the_test_it_collides_with(parser):
    """``PASSED t.py::test_x twin`` keys as ``t.py::test_x`` in swebench's pytest parser: the
    records back a test only by its exact node id, and the twin is listed as injected."""
    res = verdict.ChannelResult(sessions=1, ended=1)
    _record(res, "t.py::test_x", "skipped")
    _record(res, "t.py::test_x twin", "passed")
    _record(res, "t.py::test_p[a b]", "passed")
    chan = verdict.exact_status(res, parser)
    log = {"t.py::test_x": "PASSED", "t.py::test_p[a": "PASSED", "t.py::test_p[a b]": "PASSED"}
    tests = [t for t in log if t in ("t.py::test_x", "t.py::test_p[a", "t.py::test_p[a b]")]
    assert verdict.compare(log, chan, tests) == ["t.py::test_x"]
    assert verdict.injected(res) == ["t.py::test_x twin"]


@pytest.mark.parametrize("parser", sorted(verdict.PYTEST_PARSERS))
def test_a_key_cut_from_several_node_ids_passes_only_when_all_of_them_pass(parser):
    """``PASSED t.py::f[a b]`` and ``PASSED t.py::f[a c]`` both key as ``t.py::f[a`` (the
    parser cuts at a space; published rows list such keys): backed when every node id it was
    cut from passed, not when one of them failed or when none was recorded."""
    res = verdict.ChannelResult(sessions=1, ended=1)
    _record(res, "t.py::f[a b]", "passed")
    _record(res, "t.py::f[a c]", "passed")
    _record(res, "t.py::g[a b]", "passed")
    _record(res, "t.py::g[a c]", "failed")
    _record(res, "t.py::k[x[0] + 1]", "passed")  # brackets inside (sqlfluff's ids)
    chan = verdict.exact_status(res, parser)
    log = {"t.py::f[a": "PASSED", "t.py::g[a": "PASSED", "t.py::h[a": "PASSED"}
    assert verdict._lookup(chan, "t.py::f[a") == "PASSED"
    assert verdict._lookup(chan, "t.py::k[x[0]") == "PASSED"
    assert verdict.compare(log, chan, list(log)) == ["t.py::g[a", "t.py::h[a"]


def test_ids_no_test_file_can_define_are_the_logs_alone():
    """``[100%]``, ``[`` (an inner pytest's progress keyed by swebench's parser, in pytest's
    own rows) can never have a record: ``compare`` leaves them out; node ids stay checked."""
    assert verdict.log_only(["[100%]", "[", "[100%]-----", "t.py::f[a", "t.py::f", "t.py"]) == [
        "[100%]",
        "[",
        "[100%]-----",
        "t.py",
    ]
    assert not verdict.node_id_form("a b.py::f") and verdict.node_id_form("t.py::f[x y]")
    log = {"[100%]": "PASSED", "t.py::f": "PASSED"}
    assert verdict.compare(log, {}, ["[100%]", "t.py::f"]) == ["t.py::f"]


_PROGRESS_TESTS = """import pytest

from calc import add


def test_prints_an_inner_runs_progress():
    print("PASSED" + " " * 60 + "[100%]")  # as an inner pytest's verbose line


@pytest.mark.parametrize("v", ["a b", "a c"])
def test_spaced(v):
    assert add(len(v), 0) == 3
"""


@pytest.fixture(scope="module")
def progress_repo(tmp_path_factory):
    from tests.conftest import diff_of, git

    repos = tmp_path_factory.mktemp("repos")
    repo = repos / "local__progress"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "tests" / "test_p.py").write_text(_PROGRESS_TESTS)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "progress")
    new = _PROGRESS_TESTS + "\n\ndef test_add():\n    assert add(2, 2) == 4\n"
    row = {
        "instance_id": "local__progress-1", "repo": "local/progress",
        "base_commit": git(repo, "rev-parse", "HEAD").strip(), "problem_statement": "add",
        "patch": diff_of(repo, "calc.py", "def add(a, b):\n    return a + b\n"),
        "test_patch": diff_of(repo, "tests/test_p.py", new),
        "FAIL_TO_PASS": ["tests/test_p.py::test_add"],
        "PASS_TO_PASS": ["[100%]", "tests/test_p.py::test_spaced[a",
                         "tests/test_p.py::test_prints_an_inner_runs_progress"],
        "install_config": {"test_cmd": "python -m pytest -rA -p no:cacheprovider tests",
                           "log_parser": "parse_log_pytest",
                           "env_vars": {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}},
    }  # fmt: skip
    return row, repos


@pytest.mark.parametrize("rule", ["official", "rl"])
def test_a_published_rows_ids_that_no_node_id_makes_do_not_fail_the_gold_patch(progress_repo, rule):
    """The row lists ``[100%]`` (keyed from a test's printed line) and ``test_spaced[a`` (cut
    from two node ids): the gold patch resolves under both rules, the ids the records cannot
    back are listed, the empty patch still fails."""
    from swe_gym.grading import grade_patch

    row, repos = progress_repo
    task, opts = normalise_row(row), {"repos_dir": str(repos)}
    gold = grade_patch(task, task.patch, sandbox_options=opts, rule=rule)
    assert gold.resolved, (gold.reason, gold.detail, gold.mismatch)
    assert gold.log_only == ["[100%]"] and gold.status.get("[100%]") == "PASSED"
    empty = grade_patch(task, "", sandbox_options=opts, rule=rule)
    assert not empty.resolved and empty.reason == "tests_failed", empty.reason
