"""Red-team fixtures: a started sandbox on each backend over a bundled starter task.

``backend`` runs every test on ``local`` and ``docker`` (Docker: a loud skip without a daemon,
a failure under CI=true). ``make_sb(**options)`` builds, starts and after the test closes a
sandbox; ``task`` is the starter task used; ``future_commits`` the commits of its repository
that come after ``base_commit`` (the fix among them).
"""

from __future__ import annotations

import subprocess
import uuid

import pytest

from swe_gym.sandbox import make_sandbox

RUN_ID = f"pytest-security-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def docker_client(docker_client):
    """The shared daemon fixture (tests/conftest.py), with the base image built and this run's
    containers reaped at the end."""
    from swe_gym.images.base import build_base

    client = docker_client
    build_base(client)
    yield client
    from swe_gym import reap

    reap.reap(run_id=RUN_ID, client=client)


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request) -> str:
    if request.param == "docker":
        request.getfixturevalue("docker_client")
    return request.param


@pytest.fixture(scope="session")
def task():
    from swe_gym.starter import starter_tasks

    return starter_tasks()[0]


@pytest.fixture(scope="session")
def future_commits(task) -> list[str]:
    from swe_gym.repos import local_repo

    repo = local_repo(task.repo)
    out = subprocess.run(
        ["git", "-C", str(repo), "rev-list", "--all", f"^{task.base_commit}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out, "the starter repository should hold commits after the base (the fixes)"
    return out


@pytest.fixture()
def make_sb(backend, task, request):
    made = []

    def factory(**options):
        if backend == "docker":
            options.setdefault("run_id", RUN_ID)
            options["client"] = request.getfixturevalue("docker_client")
            if "max_procs" in options:
                options["pids_limit"] = options.pop("max_procs")
        sb = make_sandbox(options.pop("task", task), backend, **options)
        made.append(sb)
        sb.start()
        return sb

    yield factory
    for sb in made:
        sb.close()
