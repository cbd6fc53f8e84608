"""DockerSandbox: isolation, faults, cleanup. Behaviour shared with the local backend (persistent
shell, timeouts, output cap, files, diff) is tested once in tests/swe_gym/sandbox/ for both."""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from swe_gym import reap
from swe_gym.errors import SandboxError, SandboxUnavailable

pytestmark = pytest.mark.docker


def test_isolation_defaults_and_labels(make_sandbox, run_id, starter):
    sb = make_sandbox()
    attrs = sb.client.api.inspect_container(sb.container.id)
    host = attrs["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"]
    assert host["PidsLimit"] == 256 and host["Memory"] == 2048 * 2**20 and host["NanoCpus"] == 10**9
    assert attrs["Mounts"] == [] and not host.get("Binds")
    assert host["Tmpfs"] == {"/tmp": "rw,nosuid,nodev,size=512m,mode=1777"}  # a capped /tmp
    labels = attrs["Config"]["Labels"]
    assert labels["owner"] == "swe-gym" and labels["swe-gym.run"] == run_id
    assert (
        labels["swe-gym.task"] == starter[0].instance_id
        and labels["swe-gym.episode"] == sb.episode_id
    )
    assert float(labels["swe-gym.started"]) > 0
    r = sb.run("pwd; git rev-parse HEAD; git status --porcelain | wc -l")
    assert r.output.split() == ["/testbed", starter[0].base_commit, "0"]


def test_no_history_after_base_commit(make_sandbox, starter):
    later = [t for t in starter if t.base_commit != starter[0].base_commit]
    sb = make_sandbox(later[0] if later else starter[0])
    r = sb.run("git log --all --format=%H | wc -l; git rev-list --count HEAD")
    all_commits, head_commits = r.output.split()
    assert all_commits == head_commits  # nothing reachable beyond HEAD: no future commits leak


def test_network_attempt_fails(make_sandbox):
    sb = make_sandbox()
    r = sb.run(
        "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=3)\"; "
        "cat /sys/class/net/*/operstate | wc -l; ls /sys/class/net",
        timeout=20,
    )
    assert "Network is unreachable" in r.output
    assert r.output.split()[-1] == "lo"  # only the loopback interface exists


def test_a_command_that_never_ends_times_out_and_the_shell_survives(make_sandbox):
    sb = make_sandbox()
    sb.run("cd /tmp && export KEEP=1")
    r = sb.run("sleep 1000", timeout=1.5)
    assert r.timed_out and r.exit_code is None
    after = sb.run("echo still-here; ps -eo comm | grep -c '^sleep$' || true")
    assert after.output.split()[0] == "still-here"
    assert after.output.split()[1] == "1"  # only the container's own `sleep infinity` is left


def test_memory_hog_is_oom_killed_and_reported(make_sandbox):
    sb = make_sandbox(memory_mb=128)
    r = sb.run("python3 -c 'x = bytearray(400 * 1024 * 1024); print(len(x))'", timeout=60)
    assert r.oom_killed and r.exit_code == 137
    assert "OOM killer" in r.output and "128 MB" in r.output
    ok = sb.run("echo fine")
    assert ok.output.strip() == "fine" and not ok.oom_killed


def test_fork_bomb_hits_the_pids_limit_and_the_sandbox_recovers(make_sandbox):
    sb = make_sandbox(pids_limit=64)
    sb.write_file("kept.txt", "kept\n")
    r = sb.run("bomb() { bomb | bomb & }; bomb; sleep 2; echo bomb-done", timeout=20)
    assert "Resource temporarily unavailable" in r.output
    assert r.restarted and "process limit (64 processes)" in r.output
    after = sb.run("cat kept.txt; ps -e --no-headers | wc -l")
    lines = after.output.split()
    assert lines[0] == "kept" and int(lines[1]) < 10


def test_container_killed_from_outside_gives_a_clear_error_and_a_new_sandbox_works(make_sandbox):
    sb = make_sandbox()
    sb.client.api.kill(sb.container.id)
    with pytest.raises(SandboxError, match="stopped or removed from outside the sandbox"):
        sb.run("echo hi")
    sb.close()
    sb.close()  # idempotent
    fresh = make_sandbox()
    assert fresh.run("echo hi").output == "hi\n"


def test_container_removed_from_outside_then_close_is_quiet(make_sandbox):
    sb = make_sandbox()
    sb.client.api.remove_container(sb.container.id, force=True)
    with pytest.raises(SandboxError, match="from outside"):
        sb.run("true")
    with pytest.raises(SandboxError):
        sb.read_file("README.md")
    sb.close()


def test_twenty_episodes_with_random_exceptions_leave_no_container(docker_client, starter):
    """Episodes in a thread pool (as the rollout code runs them) die at random points, one of
    them while another thread is inside ``run``; no container may outlive them."""
    from swe_gym.sandbox.docker import DockerSandbox

    run = f"chaos-{random.randrange(1 << 30)}"
    rng = random.Random(0)
    plan = [rng.choice(["before-start", "after-start", "mid-command", "clean"]) for _ in range(20)]
    errors: list[str] = []
    runners: list[threading.Thread] = []
    lock = threading.Lock()

    class Boom(Exception):
        pass

    def blocked_run(sb: DockerSandbox) -> None:
        try:
            sb.run("sleep 60", timeout=90)
        except SandboxError:
            pass  # the sandbox was closed under it: the expected outcome

    def episode(i: int) -> None:
        sb = DockerSandbox(starter[i % len(starter)], client=docker_client, run_id=run)
        try:
            if plan[i] == "before-start":
                raise Boom(i)
            sb.start()
            if plan[i] == "after-start":
                raise Boom(i)
            sb.run("echo step >> log.txt")
            if plan[i] == "mid-command":
                t = threading.Thread(target=blocked_run, args=(sb,))
                t.start()
                with lock:
                    runners.append(t)
                time.sleep(0.3)
                raise Boom(i)
        except Boom:
            pass
        except Exception as e:  # anything else is a real failure
            with lock:
                errors.append(f"{i}: {e!r}")
        finally:
            sb.close()

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(episode, range(20)))
    for t in runners:
        t.join(timeout=30)
    assert not errors
    assert not [t for t in runners if t.is_alive()], "a run() blocked past close()"
    assert reap.find(docker_client, run_id=run) == []


def test_daemon_down_is_one_clear_error(starter, monkeypatch, tmp_path):
    from swe_gym.docker_daemon import get_client
    from swe_gym.sandbox.docker import DockerSandbox

    host = f"unix://{tmp_path}/no-daemon.sock"
    with pytest.raises(
        SandboxUnavailable,
        match=r"Docker daemon not reachable at unix://.*no-daemon\.sock; start it with \.ci/docker-up\.sh",
    ):
        get_client(host)
    monkeypatch.setenv("DOCKER_HOST", host)
    with pytest.raises(SandboxUnavailable, match="Docker daemon not reachable"):
        DockerSandbox(starter[0]).start()


def test_reap_by_run_and_age(docker_client, base_image, starter):
    from swe_gym.sandbox.docker import DockerSandbox

    run = f"reap-test-{random.randrange(1 << 30)}"
    sbs = [DockerSandbox(starter[0], client=docker_client, run_id=run) for _ in range(2)]
    for sb in sbs:
        sb.start()
    try:
        assert len(reap.find(docker_client, run_id=run)) == 2
        assert reap.reap(run_id=run, older_than_s=3600, client=docker_client) == 0  # too young
        assert reap.reap(run_id=run, client=docker_client, dry_run=True) == 2
        assert reap.reap(run_id=run, client=docker_client) == 2
        assert reap.find(docker_client, run_id=run) == []
        with pytest.raises(SandboxError):
            sbs[0].run("true")
    finally:
        for sb in sbs:
            sb.close()


def test_parse_duration():
    assert reap.parse_duration("90") == 90 and reap.parse_duration("1h30m") == 5400
    assert reap.parse_duration("2d") == 172800
    with pytest.raises(ValueError, match="bad duration '1y'"):
        reap.parse_duration("1y")
