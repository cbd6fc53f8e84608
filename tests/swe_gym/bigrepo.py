"""A generated repository with 700+ pytest tests and real git history, for grading at scale.

``make_bigrepo(repos_dir)`` writes ``local/bigrepo`` (``<repos_dir>/local__bigrepo``): a nested
package ``bigpkg`` (``core``, ``util/text``, ``util/numbers``), a base commit with a bug in
``bigpkg.core.ranges.clamp``, and returns the task row (gold patch, test patch touching three
test files in nested folders) with the exact FAIL_TO_PASS / PASS_TO_PASS the tests imply. Its
``pytest -rA`` log is far over the agent's 16,000-character observation cap. Built in well
under a second: files are generated, not copied.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

N_PER_FILE = 240  # tests per touched test file (three files): ~720 tests in the graded run
_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z",
}

RANGES = "def clamp(x, lo, hi):\n    return max(lo, min(x, hi - 1))\n"  # the bug: hi - 1
RANGES_FIXED = "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n"
TEXT = "def shout(s):\n    return s.upper() + '!'\n\n\ndef double(s):\n    return s + s\n"
NUMBERS = "def square(n):\n    return n * n\n\n\ndef cube(n):\n    return n * n * n\n"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        env={**os.environ, **_ENV},
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def _tests(module: str, names: list[str], bodies: list[str]) -> str:
    head = f"from {module} import *  # noqa: F403\n\n"
    return head + "".join(f"\ndef {n}():\n    {b}\n\n" for n, b in zip(names, bodies, strict=True))


def _numbers_tests(extra: bool) -> tuple[list[str], str]:
    names = [f"test_square_of_a_rather_long_named_value_{i}" for i in range(N_PER_FILE)]
    bodies = [f"assert square({i}) == {i * i}" for i in range(N_PER_FILE)]
    if extra:
        names.append("test_cube_is_consistent_with_square")
        bodies.append("assert cube(3) == square(3) * 3")
    return names, _tests("bigpkg.util.numbers", names, bodies)


def _text_tests(extra: bool) -> tuple[list[str], str]:
    names = ["test_shout_adds_an_exclamation_mark"]
    bodies = ["assert shout('a') == 'A!'"]
    names += [f"test_double_repeats_the_string_of_length_{i}" for i in range(N_PER_FILE - 1)]
    bodies += [f"assert double('x' * {i}) == 'x' * {2 * i}" for i in range(N_PER_FILE - 1)]
    if extra:
        names.append("test_double_of_empty_is_empty")
        bodies.append("assert double('') == ''")
    return names, _tests("bigpkg.util.text", names, bodies)


def _ranges_tests(fixed_tests: bool) -> tuple[list[str], str]:
    names = [f"test_clamp_inside_the_range_keeps_value_{i}" for i in range(N_PER_FILE)]
    bodies = [f"assert clamp({i}, 0, 1000) == {i}" for i in range(N_PER_FILE)]
    if fixed_tests:  # the issue: clamp(x, lo, hi) never returns hi
        names += [f"test_clamp_at_upper_bound_returns_hi_{i}" for i in range(5)]
        bodies += [f"assert clamp({10 + i}, 0, {10 + i}) == {10 + i}" for i in range(5)]
    return names, _tests("bigpkg.core.ranges", names, bodies)


def _write(repo: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)


def _diff(repo: Path, files: dict[str, str]) -> str:
    """The diff from HEAD to ``files`` (the tree is left at HEAD)."""
    _write(repo, files)
    git(repo, "add", "-A")
    out = git(repo, "diff", "--cached", "HEAD")
    git(repo, "reset", "-q", "--hard", "HEAD")
    return out


TEST_FILES = {
    "ranges": "tests/core/test_ranges.py",
    "text": "tests/util/text/test_text.py",
    "numbers": "tests/util/test_numbers.py",
}


def make_bigrepo(repos_dir: Path) -> dict:
    """Write the repository under ``repos_dir`` and return its task row (see the module doc)."""
    repo = repos_dir / "local__bigrepo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    src = {
        "pyproject.toml": '[project]\nname = "bigpkg"\nversion = "0.1"\n\n[tool.pytest.ini_options]\npythonpath = ["."]\n',
        "bigpkg/__init__.py": "",
        "bigpkg/core/__init__.py": "",
        "bigpkg/core/ranges.py": RANGES,
        "bigpkg/util/__init__.py": "",
        "bigpkg/util/text.py": TEXT,
        "bigpkg/util/numbers.py": NUMBERS,
    }
    old = {
        "ranges": _ranges_tests(False),
        "text": _text_tests(False),
        "numbers": _numbers_tests(False),
    }
    new = {
        "ranges": _ranges_tests(True),
        "text": _text_tests(True),
        "numbers": _numbers_tests(True),
    }
    _write(repo, src | {TEST_FILES[k]: v[1] for k, v in old.items()})
    # an untouched test file: not run by grading (only the test patch's files are)
    _write(repo, {"tests/test_untouched.py": "def test_never_run():\n    assert True\n"})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD").strip()
    patch = _diff(repo, {"bigpkg/core/ranges.py": RANGES_FIXED})
    test_patch = _diff(repo, {TEST_FILES[k]: v[1] for k, v in new.items()})
    old_ids = {f"{TEST_FILES[k]}::{n}" for k, v in old.items() for n in v[0]}
    new_ids = {f"{TEST_FILES[k]}::{n}" for k, v in new.items() for n in v[0]}
    # F2P: the new clamp tests fail before. The two other new tests pass before and after.
    f2p = sorted(i for i in new_ids if "upper_bound" in i)
    p2p = sorted(new_ids - set(f2p))
    assert len(old_ids) + 2 + len(f2p) == len(new_ids)
    return {
        "instance_id": "local__bigrepo-1",
        "repo": "local/bigrepo",
        "base_commit": base,
        "problem_statement": "clamp(x, lo, hi) never returns hi.",
        "patch": patch,
        "test_patch": test_patch,
        "FAIL_TO_PASS": f2p,
        "PASS_TO_PASS": p2p,
        "install_config": {
            "test_cmd": "python -m pytest -rA -p no:cacheprovider",
            "log_parser": "parse_log_pytest",
            # the host's installed pytest plugins cost seconds per run and play no part here
            "env_vars": {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        },
    }


# A model patch that breaks exactly one PASS_TO_PASS test (shout is used by one test only).
BREAK_ONE = TEXT.replace("return s.upper() + '!'", "return s.upper()")

# A conftest that reports every test as passed: the cheapest way to game a test-based reward.
PASS_ALL_CONFTEST = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""


def add_file(path: str, text: str) -> str:
    """A git diff adding ``path`` with ``text``."""
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n{body}"
    )
