"""A daemon restart between episodes, through .ci/docker-up.sh / docker-down.sh.

It restarts a *second* daemon (own socket, data root, exec root, pid file) started by the same
scripts, so the shared daemon other tests use is never interrupted; the second one is stopped
at the end whatever happens.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from swe_gym.errors import SandboxUnavailable

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def second_daemon(base_image, docker_client):
    from swe_gym.docker_daemon import get_client
    from swe_gym.images.base import build_base, cache_dir

    root = cache_dir() / "docker-restart-test"  # kept between runs: the image import is paid once
    env = {
        **os.environ,
        "SWE_GYM_DOCKER_SOCK": "/var/run/swe-gym-docker-test.sock",
        "SWE_GYM_DOCKER_ROOT": str(root / "data"),
        "SWE_GYM_DOCKER_EXEC_ROOT": "/var/run/swe-gym-docker-test",
        "SWE_GYM_DOCKER_PID": "/var/run/swe-gym-docker-test.pid",
        "SWE_GYM_DOCKER_LOG": str(root / "dockerd.log"),
    }

    def script(name: str) -> str:
        r = subprocess.run(
            ["bash", str(REPO / ".ci" / name)], env=env, capture_output=True, text=True, timeout=120
        )
        assert r.returncode == 0, f"{name} failed: {r.stderr[-2000:]}"
        return r.stdout

    out = script("docker-up.sh")
    assert out.strip() == "export DOCKER_HOST=unix:///var/run/swe-gym-docker-test.sock"
    assert script("docker-up.sh") == out  # idempotent: a second call reuses the running daemon
    try:
        host = out.strip().split("=", 1)[1]
        client = get_client(host)
        build_base(client)  # imported from the cached root tarball
        yield client, script, host
    finally:
        script("docker-down.sh")


def test_episodes_survive_a_daemon_restart(second_daemon, starter, run_id):
    from swe_gym import reap
    from swe_gym.sandbox.docker import DockerSandbox

    client, script, host = second_daemon

    def episode() -> str:
        with DockerSandbox(
            starter[0],
            image="swe-gym/base:bookworm",
            pull_policy="never",
            client=client,
            run_id=run_id,
        ) as sb:
            return sb.run("echo episode-ok").output

    assert episode() == "episode-ok\n"
    script("docker-down.sh")
    with pytest.raises(SandboxUnavailable, match=f"Docker daemon not reachable at {host}"):
        episode()
    script("docker-up.sh")
    assert episode() == "episode-ok\n"  # the same client object reconnects
    assert reap.find(client, run_id=run_id) == []
