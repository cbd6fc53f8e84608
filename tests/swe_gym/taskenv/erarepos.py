"""Generated repositories shaped like the build failures of older published rows, one per
class: a package that imports ``pkg_resources`` at run time (setuptools 81 dropped it), an old
``setup.py`` project whose editable install needs an era pip and an era setuptools in its
build isolation (setuptools 72 dropped ``setuptools.command.test``; pip 25 dropped the
``setup.py develop`` editable), and a row whose install differs between its base commit and
its ``environment_setup_commit`` (a dependency dropped later)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.conftest import diff_of, git

TEST_CMD = "python -m pytest -rA -p no:cacheprovider"  # the tree on sys.path


def _commit(repo: Path, files: dict[str, str], msg: str, date: str) -> str:
    """Commit ``files`` dated ``date`` (a setup commit's date is the row's resolution date)."""
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "add", "-A")
    env = {**os.environ, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date,
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip
    subprocess.run(["git", "commit", "-qm", msg], cwd=repo, env=env, check=True)
    return git(repo, "rev-parse", "HEAD").strip()


def _row(name: str, repo: Path, base: str, setup: str, fix: tuple[str, str, str], **extra) -> dict:
    path, code, fixed = fix
    test = f"tests/test_{name}.py"
    return {
        "instance_id": f"gen__{name}-1", "repo": f"gen/{name}", "version": "1.0",
        "base_commit": base, "environment_setup_commit": setup,
        "problem_statement": f"{name}: double() is wrong",
        "patch": diff_of(repo, path, fixed),
        "test_patch": diff_of(repo, test, (repo / test).read_text() + NEW_TEST.format(name=name)),
        "FAIL_TO_PASS": [f"{test}::test_double"], "PASS_TO_PASS": [f"{test}::test_loads"],
        **extra,
    }  # fmt: skip


NEW_TEST = "\n\ndef test_double():\n    from {name} import double\n    assert double(2) == 4\n"
DOUBLE, DOUBLE_FIXED = "def double(x):\n    return x + 1\n", "def double(x):\n    return 2 * x\n"


def pkgres_repo(repos: Path) -> dict:
    """``gen/pkgres``: imports ``pkg_resources`` (as many 2010s packages do); no install step."""
    repo = repos / "gen__pkgres"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    code = "import pkg_resources  # noqa: F401\n\n" + DOUBLE
    base = _commit(repo, {
        "pkgres/__init__.py": code,
        "tests/test_pkgres.py": "def test_loads():\n    import pkgres  # noqa: F401\n",
    }, "pkgres", "2023-06-01T00:00:00Z")  # fmt: skip
    fix = ("pkgres/__init__.py", code, code.replace(DOUBLE, DOUBLE_FIXED))
    return _row("pkgres", repo, base, base, fix, created_at="2023-06-01T00:00:00Z",
                install_config={"python": "3.11", "pip_packages": ["pytest==7.3.1"],
                                "test_cmd": TEST_CMD})  # fmt: skip


OLD_SETUP = """\
from setuptools import setup
from setuptools.command.test import test as TestCommand  # deprecated since setuptools 72


class PyTest(TestCommand):
    pass


setup(name="oldsetup", version="1.0", packages=["oldsetup"], cmdclass={"test": PyTest})
"""
# a build-system table with no pin: pip builds in isolation from whatever the index serves
PYPROJECT = '[build-system]\nrequires = ["setuptools", "wheel"]\nbuild-backend = "setuptools.build_meta:__legacy__"\n'


def oldsetup_repo(repos: Path) -> dict:
    """``gen/oldsetup``: a 2021 ``setup.py`` that imports ``setuptools.command.test``, installed
    with ``pip install -e .`` in build isolation, as SWE-bench's specs do."""
    repo = repos / "gen__oldsetup"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    base = _commit(repo, {
        "setup.py": OLD_SETUP, "pyproject.toml": PYPROJECT,
        ".gitignore": "*.egg-info/\n", "oldsetup/__init__.py": DOUBLE,
        "tests/test_oldsetup.py": (
            "def test_loads():\n    import importlib.metadata as m\n"
            "    assert m.version('oldsetup') == '1.0'\n"
        ),
    }, "oldsetup", "2021-06-01T00:00:00Z")  # fmt: skip
    fix = ("oldsetup/__init__.py", DOUBLE, DOUBLE_FIXED)
    return _row("oldsetup", repo, base, base, fix, created_at="2021-06-01T00:00:00Z",
                install_config={"python": "3.9", "pip_packages": ["pytest==6.2.4"],
                                "install": "python -m pip install -e .", "test_cmd": TEST_CMD})  # fmt: skip


def moved_repo(repos: Path) -> dict:
    """``gen/moved``: at the base commit the package needs ``inflection`` (its ``setup.py``
    says so); the version's later ``environment_setup_commit`` dropped it. Installed at the
    setup commit, the base tree cannot import."""
    repo = repos / "gen__moved"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    setup = (
        'from setuptools import setup\nsetup(name="moved", version="1.0", packages=["moved"]{})\n'
    )
    code = "import inflection  # noqa: F401\n\n" + DOUBLE
    base = _commit(repo, {
        "setup.py": setup.format(', install_requires=["inflection==0.5.1"]'),
        ".gitignore": "*.egg-info/\n", "moved/__init__.py": code,
        "tests/test_moved.py": "def test_loads():\n    import moved  # noqa: F401\n",
    }, "moved", "2024-01-10T00:00:00Z")  # fmt: skip
    fix = ("moved/__init__.py", code, code.replace(DOUBLE, DOUBLE_FIXED))
    row = _row("moved", repo, base, base, fix, created_at="2024-03-01T00:00:00Z",
               install_config={"python": "3.12", "pip_packages": ["pytest==8.0.2"],
                               "install": "python -m pip install -e .", "test_cmd": TEST_CMD})  # fmt: skip
    row["environment_setup_commit"] = _commit(
        repo,
        {"setup.py": setup.format(""), "moved/__init__.py": DOUBLE},
        "drop inflection",
        "2024-03-01T00:00:00Z",
    )
    return row


__all__ = ["moved_repo", "oldsetup_repo", "pkgres_repo"]
