"""Sandbox fixtures shared by every backend.

``backend`` is parametrised over the backends this suite runs on (add ``"docker"`` to
``BACKENDS_UNDER_TEST`` and a branch in ``make_sb`` to run the same tests on Docker).
``make_sb(task=None, **options)`` builds, starts and (after the test) closes a sandbox.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from swe_gym.sandbox import make_sandbox
from swe_gym.tasks import Task

BACKENDS_UNDER_TEST = ["local", pytest.param("docker", marks=pytest.mark.docker)]

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z",
}


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **_GIT_ENV}
    cmd = ["git", "-c", "init.defaultBranch=main", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def build_repo(repos_dir: Path, repo: str = "acme/widgets") -> tuple[Path, str]:
    """A small repository ``repos_dir/<owner>__<name>`` with a base commit and a later commit
    (the 'future' the sandbox must not expose through refs); returns (path, base sha)."""
    path = repos_dir / repo.replace("/", "__")
    (path / "pkg").mkdir(parents=True)
    git(path, "init", "-q")
    (path / "README.md").write_text("widgets\n")
    (path / "pkg" / "__init__.py").write_text("")
    (path / "pkg" / "core.py").write_text("def f(x):\n    return x + 1\n")
    (path / "pkg" / "old.txt").write_text("to be deleted\n")
    (path / "logo.bin").write_bytes(bytes(range(256)) * 4)
    git(path, "add", "-A")
    git(path, "commit", "-qm", "base")
    git(path, "tag", "v1.0")
    base = git(path, "rev-parse", "HEAD").strip()
    (path / "pkg" / "core.py").write_text("def f(x):\n    return x + 2  # the future fix\n")
    git(path, "commit", "-qam", "future fix")
    git(path, "tag", "v2.0")
    return path, base


def make_task(repo: str, base: str, instance_id: str = "acme__widgets-1") -> Task:
    return Task(
        instance_id=instance_id,
        repo=repo,
        base_commit=base,
        problem_statement="f is off by one",
        patch="",
        test_patch="",
        FAIL_TO_PASS=["tests/test_core.py::test_f"],
        PASS_TO_PASS=[],
    )


@pytest.fixture(scope="session")
def repo_task(tmp_path_factory) -> tuple[Task, Path]:
    """(task, repos_dir) for the small repository above."""
    repos = tmp_path_factory.mktemp("sandbox_repos")
    _, base = build_repo(repos)
    return make_task("acme/widgets", base), repos


@pytest.fixture()
def repo_builder():
    """``build_repo(repos_dir, repo)`` for tests that need a repository of their own."""
    return build_repo


@pytest.fixture()
def task_factory():
    """``make_task(repo, base, instance_id)``."""
    return make_task


@pytest.fixture(params=BACKENDS_UNDER_TEST)
def backend(request) -> str:
    if request.param == "docker":
        request.getfixturevalue(
            "docker_client"
        )  # skips loudly (fails under CI=true) without a daemon
    return request.param


@pytest.fixture()
def make_sb(backend, repo_task):
    """``make_sb(task=None, **options)`` -> a started sandbox on ``backend``, closed after the
    test (also when the test fails)."""
    task0, repos = repo_task
    made = []

    def factory(task: Task | None = None, **options):
        options.setdefault("repos_dir", repos)
        if backend == "docker" and "max_procs" in options:  # the same limit, Docker's name
            options["pids_limit"] = options.pop("max_procs")
        sb = make_sandbox(task or task0, backend, **options)
        made.append(sb)
        sb.start()
        return sb

    yield factory
    for sb in made:
        sb.close()
