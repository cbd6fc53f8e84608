"""The runtime guard on what honest fixes of published SWE-bench rows do, beside the same feature
used by the patch (``swe_gym/grading/guard.py``, SECURITY.md "The test process").

Each honest case comes from a gold patch the guard once called ``tampered``: an installed
finder whose file's ctime moved while the tests ran (another environment built beside the run
hard-links the same files), a ``from X import Y`` inside a string of a test file, a test that
imports a module again, a patched module importing a library that imports ``ctypes``, a test
importing a ``.pyc`` it compiled itself through a module it wrote, a standard library function
cached in place, tests inherited from a base class, and pytest's own repository, where the
patched files are the test runner. Each must resolve; each hostile twin (the same
feature from code of the patch) must stay ``tampered``. Both backends where the feature exists
on both (a read-only mount and a generated repository: local only).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import threading
from pathlib import Path

import pytest

from swe_gym.grading import grade_patch
from swe_gym.tasks import normalise_row
from tests.conftest import diff_of, git
from tests.security.payloads import (
    CODE,
    CTYPES_AFTER_LIBRARY,
    CTYPES_BY_NAME,
    FAKE_CACHE,
    FINDER_WRITTEN,
    HONEST_CACHE,
    HONEST_CTYPES,
    INIT,
    REBIND_TEST_NAME,
    SOURCELESS_AS_TEST,
    fix,
    refused,
    tinystats_task,
)


@pytest.fixture(scope="module")
def task():
    return tinystats_task()


def _resolved(report) -> None:  # noqa: ANN001
    assert report.resolved, (report.reason, report.tampered, report.detail[:2000])
    assert report.tampered == [], report.tampered


def _with_tests(task, make_patch, extra: str, ids: list[str], prelude: str = ""):  # noqa: ANN202
    """``task`` with ``extra`` appended to its test file (after its F2P test), ``prelude``
    before its first line, and ``ids`` added to PASS_TO_PASS."""
    test_file = task.test_files[0]
    f2p_block = "\n".join(
        line[1:] for line in task.test_patch.splitlines()[5:] if line.startswith("+")
    )
    test_patch = make_patch({test_file: lambda text: prelude + text + "\n" + f2p_block + extra})
    return dataclasses.replace(
        task,
        test_patch=test_patch,
        PASS_TO_PASS=task.PASS_TO_PASS + [f"{test_file}::{i}" for i in ids],
    )


# ---------------------------------------------------------------- ctime: read-only mounts

_FINDER_PACKAGE = """import sys


class Finder:
    def find_spec(self, name, path=None, target=None):
        return None


sys.meta_path.append(Finder())
"""


def test_an_installed_finder_whose_ctime_moves_during_the_run_is_trusted(
    task, make_patch, monkeypatch, tmp_path
):
    """An installed package (on a read-only mount of the sandbox: a ``PATH`` directory, as a
    venv is) puts its finder on ``sys.meta_path``; while the tests run, its file's ctime moves
    (a hard link made and removed, as an environment built beside the run does): nothing in
    the sandbox can write there, so the file is what it was at the start."""
    site = tmp_path / "site"
    (site / "honest_finder_pkg").mkdir(parents=True)
    module = site / "honest_finder_pkg" / "__init__.py"
    module.write_text(_FINDER_PACKAGE)
    monkeypatch.setenv("PATH", f"{site}{os.pathsep}{os.environ['PATH']}")
    use = f'\nimport sys as _sys\n_sys.path.append("{site}")\nimport honest_finder_pkg\n'
    patch = make_patch({CODE: fix, INIT: ("append", use)})
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            st = module.stat()
            os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns))  # ctime only
            stop.wait(0.02)

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    try:
        report = grade_patch(task, patch, timeout=300)
    finally:
        stop.set()
        thread.join()
    _resolved(report)


def test_a_finder_from_a_file_written_during_the_run_is_tampering(task, make_patch, grade):
    report = grade(task, make_patch({INIT: ("append", FINDER_WRITTEN)}))
    refused(report, "tampered")
    assert any("import machinery" in t and "_late_finder" in t for t in report.tampered), (
        report.tampered
    )


# ---------------------------------------------------------------- the test module's bindings

_BINDINGS_TESTS = '''

EXAMPLE = """
from statistics import variance
"""


def test_a_module_imported_again_leaves_the_tests_names():
    import importlib
    import sys

    for name in [m for m in sys.modules if m.split(".")[0] == "tinystats"]:
        del sys.modules[name]
    fresh = importlib.import_module("tinystats")
    assert fresh.variance is not variance
    assert fresh.mean([1, 3]) == mean([1, 3]) == 2
'''


def test_bindings_in_strings_and_modules_imported_again_are_honest(task, make_patch, grade):
    """A ``from X import Y`` inside a string of the test file binds nothing (astroid's tests);
    a test that imports the package again rebinds ``tinystats.variance``, not the test
    module's ``variance`` (astroid's ``test_load_module_set_attribute``)."""
    name = "test_a_module_imported_again_leaves_the_tests_names"
    extended = _with_tests(task, make_patch, _BINDINGS_TESTS, [name])
    report = grade(extended, make_patch({CODE: fix}))
    _resolved(report)
    assert report.status.get(f"{task.test_files[0]}::{name}") == "PASSED"


def test_a_test_modules_name_rebound_after_collection_is_tampering(task, make_patch, grade):
    report = grade(task, make_patch({INIT: ("append", REBIND_TEST_NAME)}))
    refused(report, "tampered")
    assert any(t.startswith("test binding: ") for t in report.tampered), report.tampered


# ---------------------------------------------------------------- ctypes


# Before the package is imported, the test file (trusted) forgets ``ctypes``: the environment's
# plugins may have imported it already, and then no import of it is seen.
_FORGET_CTYPES = """import sys

for _name in ("ctypes", "multiprocessing.sharedctypes"):
    sys.modules.pop(_name, None)
"""


def test_a_library_that_imports_ctypes_itself_is_honest(task, make_patch, grade):
    """The patched package imports a library whose own body imports ``ctypes`` (pydicom's
    fix importing numpy), and ``ctypes``' body loads the C library: the library's import,
    not the patch's."""
    fresh = _with_tests(task, make_patch, "", [], prelude=_FORGET_CTYPES)
    _resolved(grade(fresh, make_patch({CODE: fix, INIT: ("append", HONEST_CTYPES)})))


@pytest.mark.parametrize(
    "payload, mark",
    [
        (CTYPES_BY_NAME, ("import ctypes", "ctypes.dlopen")),
        (CTYPES_AFTER_LIBRARY, "ctypes.string_at"),
    ],
    ids=["imported-by-name-through-importlib", "memory-read-once-a-library-imported-it"],
)
def test_ctypes_from_the_patch_stays_tampering(task, make_patch, grade, payload, mark):
    fresh = _with_tests(task, make_patch, "", [], prelude=_FORGET_CTYPES)
    report = grade(fresh, make_patch({CODE: fix, INIT: ("append", payload)}))
    refused(report, "tampered")
    assert any(t.startswith(mark) for t in report.tampered), report.tampered


# ---------------------------------------------------------------- sourceless .pyc

_SOURCELESS_TEST = """

def test_imports_a_module_it_compiled(tmp_path, monkeypatch):
    import importlib
    import os
    import py_compile

    (tmp_path / "orphan.py").write_text("value = 17\\n")
    py_compile.compile(str(tmp_path / "orphan.py"), cfile=str(tmp_path / "orphan.pyc"))
    os.remove(tmp_path / "orphan.py")
    (tmp_path / "user_of_orphan.py").write_text("import orphan\\nVALUE = orphan.value\\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert importlib.import_module("user_of_orphan").VALUE == 17
"""


def test_a_sourceless_pyc_a_test_wrote_is_honest(task, make_patch, grade):
    """A test writes a module and a ``.pyc`` with no source, and imports the one through the
    other (pytest's ``test_orphaned_pyc_file``, in an inner session): the module is code
    written during the run, the ``.pyc``'s code counts as such, nothing is refused."""
    extended = _with_tests(
        task, make_patch, _SOURCELESS_TEST, ["test_imports_a_module_it_compiled"]
    )
    report = grade(extended, make_patch({CODE: fix}))
    _resolved(report)


def test_a_sourceless_pyc_claiming_the_test_file_is_tampering(task, make_patch, grade):
    report = grade(task, make_patch({CODE: fix, INIT: ("append", SOURCELESS_AS_TEST)}))
    refused(report, "tampered")
    assert any("code made as" in t and "test_descriptive.py" in t for t in report.tampered), (
        report.tampered
    )


# ---------------------------------------------------------------- module snapshots

_INHERITED_TESTS = """

class TestBase:
    def test_inherited(self):
        assert variance([1, 3]) == 2


class TestChild(TestBase):
    pass
"""


def test_a_cached_library_function_and_inherited_tests_are_honest(task, make_patch, grade):
    """A package caches a function of the standard library in place (astroid wraps
    ``tokenize._compile`` in ``functools.lru_cache``): the new value calls the old one and
    nothing else. A test class inherits its tests from a base class of the same file
    (pydicom's ``TestScratchWriteDateTime``): the code run is the test file's."""
    ids = ["TestBase::test_inherited", "TestChild::test_inherited"]
    extended = _with_tests(task, make_patch, _INHERITED_TESTS, ids)
    report = grade(extended, make_patch({CODE: fix, INIT: ("append", HONEST_CACHE)}))
    _resolved(report)
    assert report.status.get(f"{task.test_files[0]}::TestChild::test_inherited") == "PASSED"


def test_a_cache_around_another_function_is_tampering(task, make_patch, grade):
    report = grade(task, make_patch({CODE: fix, INIT: ("append", FAKE_CACHE)}))
    refused(report, "tampered")
    assert any(t.startswith("changed: posixpath: normcase") for t in report.tampered)


# ---------------------------------------------------------------- controls


@pytest.mark.parametrize("payload", [REBIND_TEST_NAME], ids=["rebind-test-name"])
def test_without_the_channel_the_hostile_twin_would_have_paid(task, make_patch, payload):
    off = dataclasses.replace(
        task, install_config={**task.install_config, "verdict_channel": False}
    )
    report = grade_patch(off, make_patch({INIT: ("append", payload)}), timeout=300)
    assert report.resolved and report.channel == "none", (report.reason, report.log_tail[-2000:])


# ---------------------------------------------------------------- the runner under test

_CALC = "def add(a, b):\n    return a - b\n"
_TESTS = "from calc import add\n\n\ndef test_one():\n    assert add(0, 1) != 2\n"
_TESTS_NEW = _TESTS + "\n\ndef test_add():\n    assert add(2, 2) == 4\n"


@pytest.fixture(scope="module")
def runner_repo(tmp_path_factory):
    """(row, repos_dir): ``local/runner``, a repository that holds the test runner it runs
    (this host's pytest, copied under ``src/`` and imported from there, as pytest's own
    repository is installed from its tree)."""
    import _pytest
    import pytest as installed

    repos = tmp_path_factory.mktemp("repos")
    repo = repos / "local__runner"
    (repo / "tests").mkdir(parents=True)
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(Path(_pytest.__file__).parent, repo / "src" / "_pytest", ignore=skip)
    shutil.copytree(Path(installed.__file__).parent, repo / "src" / "pytest", ignore=skip)
    (repo / "calc.py").write_text(_CALC)
    (repo / "tests" / "test_calc.py").write_text(_TESTS)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "runner")
    row = {
        "instance_id": "local__runner-1",
        "repo": "local/runner",
        "base_commit": git(repo, "rev-parse", "HEAD").strip(),
        "problem_statement": "add(2, 2) is not 4.",
        "patch": "",
        "test_patch": diff_of(repo, "tests/test_calc.py", _TESTS_NEW),
        "FAIL_TO_PASS": ["tests/test_calc.py::test_add"],
        "PASS_TO_PASS": ["tests/test_calc.py::test_one"],
        "install_config": {
            "test_cmd": 'PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" python -m pytest -rA '
            "-p no:cacheprovider tests",
            "log_parser": "parse_log_pytest",
            "env_vars": {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        },
    }
    return row, repos, repo


def _runner_patch(repo: Path, calc: str) -> str:
    python = (repo / "src" / "_pytest" / "python.py").read_text()
    return diff_of(repo, "calc.py", calc) + diff_of(
        repo, "src/_pytest/python.py", python + "\n# an edit of the runner under test\n"
    )


def test_a_patched_runner_is_the_runner_and_is_reported(runner_repo):
    """The fix edits the runner's own ``_pytest/python.py`` (pytest's rows): that file is on
    every stack that imports a test module, and its compile of the test file is the runner's
    job. It resolves, and the report names the runner's patched files."""
    row, repos, repo = runner_repo
    patch = _runner_patch(repo, _CALC.replace("a - b", "a + b"))
    report = grade_patch(normalise_row(row), patch, sandbox_options={"repos_dir": str(repos)})
    _resolved(report)
    assert report.runner_patched == ["src/_pytest/python.py"], report.to_dict()


def test_the_patchs_other_files_are_still_judged_beside_a_patched_runner(runner_repo):
    row, repos, repo = runner_repo
    hostile = _CALC.replace("a - b", "a + b") + (
        'getattr(__import__("s" + "ys"), "set" + "trace")(lambda *a: None)\n'
    )
    report = grade_patch(
        normalise_row(row), _runner_patch(repo, hostile), sandbox_options={"repos_dir": str(repos)}
    )
    refused(report, "tampered")
    assert any(t.startswith("sys.settrace") and "calc.py" in t for t in report.tampered)
