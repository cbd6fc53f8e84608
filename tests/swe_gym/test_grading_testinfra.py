"""The test-infrastructure rule of ``swe_gym.grading.testinfra`` as pure functions (no sandbox)."""

from __future__ import annotations

import pytest

from swe_gym.grading.patches import unsafe_path
from swe_gym.grading.testinfra import changes_test_config, protected_by_name

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


def test_patches_touching_git_are_found_in_any_quoting_or_case():
    hook = "diff --git a/.git/hooks/x b/.git/hooks/x\nnew file mode 100755\n--- /dev/null\n+++ b/.git/hooks/x\n"
    assert "a/.git/hooks/x" in unsafe_path(hook)
    plain = "--- a/pkg/x.py\n+++ b/sub/.git/config\n@@ -1 +1 @@\n-a\n+b\n"
    assert "b/sub/.git/config" in unsafe_path(plain)
    octal = 'diff --git "a/\\056git/config" "b/\\056git/config"\n--- "a/\\056git/config"\n'
    assert ".git/config" in unsafe_path(octal)  # git unquotes \056 to "."
    for variant in (".GIT/config", "sub/.Git/hooks/x", ".git./config", "x/.git /y"):
        assert unsafe_path(f"diff --git a/{variant} b/{variant}\n"), variant
    assert "absolute" in unsafe_path("--- /etc/passwd\n+++ /etc/passwd\n")
    assert "climbs" in unsafe_path("diff --git a/../x b/../x\n")
    assert unsafe_path("diff --git a/.github/x.yml b/.github/x.yml\n") is None
    assert unsafe_path("diff --git a/.gitignore b/.gitignore\n") is None
    # A removed line reading "-- ../.git" is content, not a header.
    body = "diff --git a/q.sql b/q.sql\n--- a/q.sql\n+++ b/q.sql\n@@ -1 +1 @@\n--- ../.git\n+x\n"
    assert unsafe_path(body) is None


def test_config_names_are_protected_in_any_case_and_new_modules_may_not_shadow_installed_ones():
    for name in ("pytest.toml", ".pytest.toml", "PYTEST.INI", "Conftest.py", "sub/PyTest.toml"):
        assert protected_by_name(name, [], in_base=False), name
    assert protected_by_name("PyProject.toml", [], in_base=False)  # a case variant: never config
    assert not protected_by_name("pyproject.toml", [], in_base=True)  # checked by content instead
    assert protected_by_name("FORGE.DIST-INFO/entry_points.txt", [], in_base=False)
    assert protected_by_name("x.Egg-Info/entry_points.txt", [], in_base=False)
    installed = frozenset({"pytest_timeout", "iniconfig"})
    assert protected_by_name("pytest_timeout.py", [], False, installed)
    assert protected_by_name("iniconfig/__init__.py", [], False, installed)
    assert not protected_by_name("pkg/iniconfig.py", [], False, installed)  # not on sys.path
    assert not protected_by_name("pytest_timeout.py", [], True, installed)  # the repo's own
