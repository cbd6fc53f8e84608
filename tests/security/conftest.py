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


@pytest.fixture(scope="module")
def make_patch(task, tmp_path_factory, request):
    """``make_patch({path: text | None | ("link", target) | ("append", text) | fix})`` -> a git
    diff from the base commit of the module's ``task`` (``tests/security/patching.py``)."""
    from tests.security.patching import patch_maker

    return patch_maker(task, tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]))


@pytest.fixture
def grade(backend, request):
    """``grade(task, patch)``: ``grade_patch`` on this test's backend (Docker: this run's
    containers, reaped at the end of the session)."""
    from swe_gym.grading import grade_patch

    opts = {}
    if backend == "docker":
        opts = {"client": request.getfixturevalue("docker_client"), "run_id": RUN_ID}

    def run(task, patch: str):
        return grade_patch(task, patch, backend=backend, sandbox_options=opts, timeout=300)

    return run
