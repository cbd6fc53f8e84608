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
CODE_FIXED = CODE.replace("    return word", "    import inflection\n    return inflection.camelize(word)")
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
TESTS_NEW = TESTS + """

def test_camel():
    from oldpy import camel
    assert camel("snake_case") == "SnakeCase"
"""
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
        "PASS_TO_PASS": ["tests/test_oldpy.py::test_installed", "tests/test_oldpy.py::test_pinned_runner"],
        "install_config": dict(RECIPE),
    }
