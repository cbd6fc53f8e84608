"""Red team for grading: a model patch that changes how the tests run must not pay.

Each case grades a hostile patch for a starter task (``confparse``: ``pyproject.toml`` holds its
pytest configuration, tests in ``tests/``) and asserts the verdict (not resolved) and what
grading reverted (``report.dropped``, the rule in ``swe_gym.grading.testinfra``). Every case runs on the
local backend; the conftest and addopts hacks on Docker too.
"""

from __future__ import annotations

import dataclasses
import subprocess
import uuid

import pytest

from swe_gym.grading import grade_patch
from swe_gym.repos import local_repo

RUN_ID = f"pytest-grading-tamper-{uuid.uuid4().hex[:8]}"  # each grading closes its container
# A conftest (or plugin) that reports every test as passed.
PASS_ALL = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""
FAKE_TESTS = "def test_value_may_contain_equals_sign():\n    pass\n"


@pytest.fixture(scope="module")
def fast_task(task):
    """The starter task, without the host's pytest plugins (seconds per run, no part here)."""
    cfg = dict(task.install_config or {})
    cfg["env_vars"] = {**(cfg.get("env_vars") or {}), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return dataclasses.replace(task, install_config=cfg)


def _task_and_options(task, fast_task, backend, request) -> tuple:
    """Docker grades the task as its image was built (env_vars shape the image)."""
    if backend != "docker":
        return fast_task, {}
    return task, {"client": request.getfixturevalue("docker_client"), "run_id": RUN_ID}


def _pyproject(task, extra: str) -> str:
    base = subprocess.run(
        ["git", "-C", str(local_repo(task.repo)), "show", f"{task.base_commit}:pyproject.toml"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return base + extra


def _assert_contained(report, *dropped: str):
    assert not report.resolved, report.to_dict()
    assert report.reason == "tests_failed", (report.reason, report.detail)
    for path in dropped:
        assert path in report.dropped, (path, report.dropped)


@pytest.mark.parametrize("where", ["conftest.py", "tests/conftest.py", "confparse/conftest.py"])
def test_conftest_hack_is_reverted(task, fast_task, make_patch, backend, request, where):
    graded, opts = _task_and_options(task, fast_task, backend, request)
    report = grade_patch(
        graded, make_patch({where: PASS_ALL}), backend=backend, sandbox_options=opts
    )
    _assert_contained(report, where)
    assert report.dropped == [where]


def test_pyproject_addopts_plugin_is_reverted(task, fast_task, make_patch, backend, request):
    graded, opts = _task_and_options(task, fast_task, backend, request)
    patch = make_patch(
        {
            "pyproject.toml": _pyproject(fast_task, "").replace(
                'pythonpath = ["."]', 'pythonpath = ["."]\naddopts = "-p passall"'
            ),
            "passall.py": PASS_ALL,
        }
    )
    report = grade_patch(graded, patch, backend=backend, sandbox_options=opts)
    _assert_contained(report, "pyproject.toml")
    assert "passall.py" not in report.dropped  # harmless once nothing loads it


@pytest.mark.parametrize(
    "edits, dropped",
    [
        ({"pytest.ini": "[pytest]\naddopts = -p passall\n", "passall.py": PASS_ALL}, "pytest.ini"),
        ({"tox.ini": "[pytest]\naddopts = -p passall\n", "passall.py": PASS_ALL}, "tox.ini"),
        (
            {"setup.cfg": "[tool:pytest]\naddopts = -p passall\n", "passall.py": PASS_ALL},
            "setup.cfg",
        ),
        ({"sitecustomize.py": "import passall\n", "passall.py": PASS_ALL}, "sitecustomize.py"),
        ({"usercustomize.py": "import passall\n", "passall.py": PASS_ALL}, "usercustomize.py"),
        ({"confparse/zz.pth": "import passall\n", "passall.py": PASS_ALL}, "confparse/zz.pth"),
        ({"pytest.py": "print('PASSED tests/test_parser.py::x')\n"}, "pytest.py"),
        ({"tests/__init__.py": "", "tests/helpers.py": PASS_ALL}, "tests/helpers.py"),
        (
            {
                "confparse.egg-info/entry_points.txt": "[pytest11]\npassall = passall\n",
                "passall.py": PASS_ALL,
            },
            "confparse.egg-info/entry_points.txt",
        ),
    ],
    ids=[
        "pytest.ini",
        "tox.ini",
        "setup.cfg",
        "sitecustomize",
        "usercustomize",
        "pth",
        "shadow-pytest",
        "tests-dir-files",
        "entry-points",
    ],
)
def test_test_configuration_and_startup_hooks_are_reverted(fast_task, make_patch, edits, dropped):
    report = grade_patch(fast_task, make_patch(edits))
    _assert_contained(report, dropped)


def test_editing_the_task_test_file_is_reverted(fast_task, make_patch):
    patch = make_patch({"tests/test_parser.py": FAKE_TESTS})
    report = grade_patch(fast_task, patch)
    _assert_contained(report, "tests/test_parser.py")
    assert fast_task.FAIL_TO_PASS[0] in report.f2p_failed


def test_tests_folder_turned_into_a_symlink_is_reverted(fast_task, make_patch):
    patch = make_patch({"fake/test_parser.py": FAKE_TESTS, "tests": ("link", "fake")})
    assert "120000" in patch  # the patch really makes a symlink
    report = grade_patch(fast_task, patch)
    _assert_contained(report, "tests", "tests/test_parser.py")
    assert report.missing == [], "the real tests ran"


def test_a_test_file_the_model_deleted_is_restored_before_the_test_patch(fast_task, make_patch):
    patch = fast_task.patch + make_patch({"tests/test_parser.py": None})
    report = grade_patch(fast_task, patch)
    assert report.resolved, (report.reason, report.detail, report.f2p_failed)
    assert report.dropped == ["tests/test_parser.py"]


def test_a_patch_touching_git_is_refused(fast_task):
    patch = (
        "diff --git a/.git/hooks/post-checkout b/.git/hooks/post-checkout\nnew file mode 100755\n"
        "--- /dev/null\n+++ b/.git/hooks/post-checkout\n@@ -0,0 +1,2 @@\n+#!/bin/sh\n+touch /tmp/x\n"
    )
    report = grade_patch(fast_task, fast_task.patch + patch)
    assert not report.resolved and report.reason == "model_patch_failed"
    assert ".git" in report.detail


def test_project_metadata_edits_are_kept(fast_task, make_patch):
    """A legitimate pyproject edit (not its test configuration) survives with the fix."""
    edited = _pyproject(fast_task, "").replace('version = "0.1.0"', 'version = "0.2.0"')
    report = grade_patch(fast_task, fast_task.patch + make_patch({"pyproject.toml": edited}))
    assert report.resolved and report.dropped == [], (report.reason, report.dropped)


def test_new_source_files_outside_test_infrastructure_are_kept(fast_task, make_patch):
    report = grade_patch(fast_task, fast_task.patch + make_patch({"confparse/extra.py": "X = 1\n"}))
    assert report.resolved and report.dropped == []
