"""The test-infrastructure rule of ``swe_gym.testinfra`` as pure functions (no sandbox)."""

from __future__ import annotations

import pytest

from swe_gym.testinfra import changes_test_config, git_path_in_patch, protected_by_name

TEST_FILES = ["tests/test_calc.py", "pkg/sub/test_new.py"]


@pytest.mark.parametrize(
    "path, in_base",
    [
        ("conftest.py", True),
        ("src/pkg/conftest.py", False),
        ("tests/helpers.py", True),
        ("pkg/core/tests/__init__.py", False),
        ("test/data.json", False),
        ("testing/plugin.py", True),
        ("pkg/test_other.py", True),
        ("pkg/other_test.py", False),
        ("tests", False),  # an ancestor of a task test file (e.g. made a symlink)
        ("pkg/sub", False),
        ("pytest.ini", False),
        ("deep/tox.ini", False),
        ("sitecustomize.py", False),
        ("lib/usercustomize.py", False),
        ("x.pth", False),
        ("pkg/__pycache__/calc.cpython-311.pyc", False),
        ("pkg.egg-info/entry_points.txt", True),
        ("pytest.py", False),
        ("_pytest/__init__.py", False),
        ("src/pluggy/__init__.py", False),
        (".pytest_cache/v/cache/lastfailed", False),
    ],
)
def test_test_infrastructure_is_protected(path, in_base):
    assert protected_by_name(path, TEST_FILES, in_base)


@pytest.mark.parametrize(
    "path, in_base",
    [
        ("pkg/calc.py", True),
        ("django/test/testcases.py", True),  # library code named test, below the top level
        ("numpy/testing/utils.py", True),
        ("src/_pytest/python.py", True),  # pytest's own source: edits to existing files are fine
        ("src/pytest/__init__.py", True),
        ("pkg/contest.py", False),
        ("docs/testing.rst", False),
        ("pyproject.toml", True),  # judged by its test configuration, not its name
    ],
)
def test_source_is_not_protected(path, in_base):
    assert not protected_by_name(path, TEST_FILES, in_base)


BASE_TOML = (
    '[project]\nname = "p"\nversion = "1"\n\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'
)


@pytest.mark.parametrize(
    "after, changed",
    [
        (BASE_TOML.replace('version = "1"', 'version = "2"'), False),
        (BASE_TOML + "\n[tool.ruff]\nline-length = 90\n", False),
        (
            BASE_TOML.replace('testpaths = ["tests"]', 'testpaths = ["tests"]\naddopts = "-p x"'),
            True,
        ),
        (BASE_TOML + '\n[project.entry-points.pytest11]\nx = "x"\n', True),
        (BASE_TOML + '\n[tool.pytest]\nminversion = "9"\n', True),
        ("[project\nbroken", True),
        (None, True),  # deleted: its test configuration is gone
    ],
)
def test_pyproject_test_configuration_changes(after, changed):
    assert changes_test_config("pyproject.toml", BASE_TOML, after) is changed


def test_a_new_pyproject_without_test_configuration_is_kept():
    assert not changes_test_config("sub/pyproject.toml", None, '[project]\nname = "q"\n')
    assert changes_test_config(
        "sub/pyproject.toml", None, "[tool.pytest.ini_options]\naddopts = '-x'\n"
    )


def test_setup_cfg_test_sections_and_plugins():
    base = "[metadata]\nname = p\n\n[tool:pytest]\ntestpaths = tests\n"
    assert not changes_test_config("setup.cfg", base, base.replace("name = p", "name = q"))
    assert changes_test_config("setup.cfg", base, base + "addopts = -p x\n")
    assert changes_test_config(
        "setup.cfg", base, base + "\n[options.entry_points]\npytest11 =\n  x = x\n"
    )
    assert not changes_test_config("README.md", "a", "b")


def test_patches_touching_git_are_found():
    hook = "diff --git a/.git/hooks/x b/.git/hooks/x\nnew file mode 100755\n--- /dev/null\n+++ b/.git/hooks/x\n"
    assert git_path_in_patch(hook) == "a/.git/hooks/x b/.git/hooks/x"
    plain = "--- a/pkg/x.py\n+++ b/sub/.git/config\n@@ -1 +1 @@\n-a\n+b\n"
    assert git_path_in_patch(plain) == "b/sub/.git/config"
    assert git_path_in_patch("diff --git a/.github/x.yml b/.github/x.yml\n") is None
    assert git_path_in_patch("diff --git a/.gitignore b/.gitignore\n") is None
