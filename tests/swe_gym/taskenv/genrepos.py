"""Generated repositories shaped like the failures of published rows (no network, no clone):
an old-Python feature, tests that need the package's ``pip install -e .`` (metadata and a
generated ``_version.py``), a package the host lacks, a pin older than the host's pytest."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import diff_of, git

SETUP = """\
from setuptools import setup
open("oldpy/_version.py", "w").write("version = '0.1'\\n")  # as setuptools-scm does
setup(name="oldpy", version="0.1", packages=["oldpy"])
"""
CODE = """\
import collections
Mapping = collections.Mapping  # gone in Python 3.10


def camel(word):
    return word
"""
CODE_FIXED = CODE.replace(
    "    return word", "    import inflection\n    return inflection.camelize(word)"
)
TESTS = """\
import importlib.metadata

import pytest

from oldpy import Mapping
from oldpy._version import version


def test_installed():
    assert importlib.metadata.version("oldpy") == version == "0.1"


def test_pinned_runner():
    assert pytest.__version__ == "7.4.4"
"""
TESTS_NEW = (
    TESTS
    + """

def test_camel():
    from oldpy import camel
    assert camel("snake_case") == "SnakeCase"
"""
)
RECIPE = {
    "python": "3.9",
    "pip_packages": ["pytest==7.4.4", "inflection==0.5.1"],
    "install": "python -m pip install --no-build-isolation -e .",
    "test_cmd": "pytest -rA -p no:cacheprovider",
    "log_parser": "parse_log_pytest",
}


def oldpy_repo(repos: Path, history: int = 0) -> dict:
    """``<repos>/gen__oldpy`` and its row; ``history`` extra commits before the base."""
    repo = repos / "gen__oldpy"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    for i in range(history):
        (repo / "HISTORY").write_text(f"{i}\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", f"old {i}")
    (repo / "oldpy").mkdir()
    (repo / "tests").mkdir()
    (repo / "setup.py").write_text(SETUP)
    (repo / ".gitignore").write_text("oldpy/_version.py\n*.egg-info/\n")
    (repo / "oldpy" / "__init__.py").write_text(CODE)
    (repo / "tests" / "test_oldpy.py").write_text(TESTS)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "oldpy")
    base = git(repo, "rev-parse", "HEAD").strip()
    return {
        "instance_id": "gen__oldpy-1",
        "repo": "gen/oldpy",
        "version": "0.1",
        "base_commit": base,
        "environment_setup_commit": base,
        "created_at": "2024-01-01T00:00:00Z",
        "problem_statement": "camel() does not camelize.",
        "patch": diff_of(repo, "oldpy/__init__.py", CODE_FIXED),
        "test_patch": diff_of(repo, "tests/test_oldpy.py", TESTS_NEW),
        "FAIL_TO_PASS": ["tests/test_oldpy.py::test_camel"],
        "PASS_TO_PASS": [
            "tests/test_oldpy.py::test_installed",
            "tests/test_oldpy.py::test_pinned_runner",
        ],
        "install_config": dict(RECIPE),
    }


SHADOW_CODE = """\
class LRUCache(dict):
    def __init__(self, maxsize):
        super().__init__()
        self.maxsize = maxsize

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
"""
SHADOW_FIXED = SHADOW_CODE.replace(
    "        super().__setitem__(key, value)\n",
    "        super().__setitem__(key, value)\n        while len(self) > self.maxsize:\n"
    "            del self[next(iter(self))]\n",
)
SHADOW_TEST = (
    "from cachetools import LRUCache\n\n\ndef test_get():\n    c = LRUCache(maxsize=2)\n"
    "    c['a'] = 1\n    assert c['a'] == 1\n"
)
SHADOW_TEST_NEW = SHADOW_TEST + (
    "\n\ndef test_evicts():\n    c = LRUCache(maxsize=1)\n    c['a'] = 1\n    c['b'] = 2\n"
    "    assert 'a' not in c\n"
)


def shadow_repo(repos: Path) -> dict:
    """``gen/cachetools``: a package the host also has installed, its bug fixed there. On the
    host's interpreter the tests import the host's copy and the failing test passes with an
    empty patch (as pytest-dev__pytest-11143 did against the host's pytest 9); in its
    environment (``pip install -e .``) they test the tree's copy."""
    repo = repos / "gen__cachetools"
    (repo / "src" / "cachetools").mkdir(parents=True)
    (repo / "tests").mkdir()
    git(repo, "init", "-q")
    (repo / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "cachetools"\nversion = "0.0.1"\n'
    )
    (repo / "src" / "cachetools" / "__init__.py").write_text(SHADOW_CODE)
    (repo / "tests" / "test_cache.py").write_text(SHADOW_TEST)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "cachetools")
    base = git(repo, "rev-parse", "HEAD").strip()
    return {
        "instance_id": "gen__cachetools-1", "repo": "gen/cachetools", "version": "0.0",
        "base_commit": base, "environment_setup_commit": base,
        "problem_statement": "LRUCache never evicts",
        "patch": diff_of(repo, "src/cachetools/__init__.py", SHADOW_FIXED),
        "test_patch": diff_of(repo, "tests/test_cache.py", SHADOW_TEST_NEW),
        "FAIL_TO_PASS": ["tests/test_cache.py::test_evicts"],
        "PASS_TO_PASS": ["tests/test_cache.py::test_get"],
        "install_config": {"python": "3.12", "pip_packages": ["pytest==7.4.4", "setuptools", "wheel"],
                           "install": "python -m pip install --no-build-isolation -e .",
                           "test_cmd": "pytest -rA -p no:cacheprovider"},
    }  # fmt: skip
