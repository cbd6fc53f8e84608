"""Docker fixtures: a reachable daemon (or a loud skip; a failure under CI=true), built images,
and a unique run label whose containers must all be gone when the session ends."""

from __future__ import annotations

import uuid

import pytest

from swe_gym.docker_daemon import docker_host

RUN_ID = f"pytest-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def run_id(docker_client):
    """This session's run label; at the end no container may carry it (then they are reaped)."""
    from swe_gym import reap

    yield RUN_ID
    left = reap.find(docker_client, run_id=RUN_ID)
    reap.reap(run_id=RUN_ID, client=docker_client)
    assert not left, f"containers left behind with run label {RUN_ID}: {[c.name for c in left]}"


@pytest.fixture(scope="session")
def base_image(docker_client):
    from swe_gym.images.base import build_base

    return build_base(docker_client)  # seconds from the cached tarball, ~1-3 min the first time


@pytest.fixture(scope="session")
def starter(base_image):
    from swe_gym.starter import starter_tasks

    return starter_tasks()


@pytest.fixture()
def make_sandbox(docker_client, run_id, starter):
    """``make_sandbox(task=None, **opts)`` -> a started DockerSandbox, closed after the test."""
    from swe_gym.sandbox.docker import DockerSandbox

    made = []

    def make(task=None, **opts):
        opts.setdefault("run_id", run_id)
        sb = DockerSandbox(task or starter[0], client=docker_client, **opts)
        made.append(sb)
        sb.start()
        return sb

    yield make
    for sb in made:
        sb.close()


def pytest_report_header(config):
    return f"docker: DOCKER_HOST={docker_host()} run label swe-gym.run={RUN_ID}"
