"""``fork(n)`` on every backend: what a child takes from its parent, what it does not, and that
children, parent and siblings stay apart; the errors; nothing left behind on failure or crash."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from swe_gym.errors import SandboxError
from swe_gym.sandbox.fork import ForkUnsupported, fork_sandbox

BIG_MB = 20
ROOT = Path(__file__).resolve().parents[3]  # the checkout, imported first by the child


def _procs(sb) -> str:
    """Every command line running in the sandbox, as its own shell sees them."""
    return sb.run("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '").output


def _gone(sb, backend) -> bool:
    """Whether every process (local) or the container (docker) of a closed sandbox is gone."""
    if backend == "local":
        return bool(sb._pids_before_close) and not any(map(_alive, sb._pids_before_close))
    import docker.errors

    try:
        sb.client.containers.get(sb._id_before_close)
    except docker.errors.NotFound:
        return True
    return False


def _note(sb, backend) -> None:
    """Remember what ``_gone`` checks, before ``close`` drops it."""
    if backend == "local":
        sb._pids_before_close = sb._session.transport.remaining()
    else:
        sb._id_before_close = sb.container.id


@pytest.fixture()
def forked(make_sb):
    """``forked(parent, n)``: ``parent.fork(n)``, children closed after the test."""
    kids = []

    def fork(parent, n):
        made = parent.fork(n)
        kids.extend(made)
        return made

    yield fork
    for k in kids:
        k.close()


def test_children_get_the_tree_and_the_shell_state_but_no_process(make_sb, forked):
    parent = make_sb()
    parent.write_file("pkg/new.py", "NEW = 1\n")
    setup = (
        f"head -c {BIG_MB}M /dev/urandom > big.bin && rm pkg/old.txt && cd pkg && "
        "export GREETING='hi there' PARENT_ONLY=1 && unset LANG; f() { echo from-f; }; "
        "umask 027; set -o pipefail; (exec -a forkbg-sleep sleep 300) &"
    )
    assert parent.run(setup, timeout=60).exit_code == 0
    big = hashlib.sha256(parent.read_file("big.bin")).hexdigest()
    kids = forked(parent, 2)
    assert len(kids) == 2 and len({id(k) for k in kids}) == 2
    for kid in kids:
        r = kid.run('pwd; echo "$GREETING"; echo "${LANG-unset}"; f; umask; set -o | grep pipefail')
        assert r.output.split("\n")[:5] == [
            f"{kid.workdir}/pkg",
            "hi there",
            "unset",
            "from-f",
            "0027",
        ]
        assert "on" in r.output.split("\n")[5]
        assert kid.read_file("pkg/new.py") == b"NEW = 1\n"
        assert kid.path_kind("pkg/old.txt") is None
        assert hashlib.sha256(kid.read_file("big.bin")).hexdigest() == big
        assert "forkbg-sleep" not in _procs(kid)  # processes are not carried
        assert kid.run("jobs").output == ""
        # the session still works as a session: job control, timeouts
        r = kid.run("sleep 30", timeout=1)
        assert r.timed_out and kid.run("pwd").output.strip() == f"{kid.workdir}/pkg"
    # the parent was frozen only while it was copied: its job runs again
    assert _states(parent, "forkbg-sleep") == ["S"]


def test_the_parent_is_resumed_and_its_own_stopped_jobs_stay_stopped(make_sb, forked):
    parent = make_sb()
    parent.run("(exec -a tick-loop sh -c 'while :; do echo t >> /tmp/ticks; sleep 0.05; done') &")
    parent.run("(exec -a held-sleep sleep 300) & sleep 0.3; kill -STOP $!")
    forked(parent, 1)
    before = parent.run("wc -l < /tmp/ticks").output.strip()
    parent.run("sleep 0.5")
    assert int(parent.run("wc -l < /tmp/ticks").output.strip()) > int(before)
    assert _states(parent, "held-sleep") == ["T"]


def _states(sb, name: str) -> list[str]:
    """The state letters (``/proc/PID/stat``) of the sandbox's processes named ``name``. A
    process may exit while the loop reads it (the tick loop's sleeps do): its files' errors are
    dropped, the redirection first so that it covers the failed ``<`` too."""
    script = (
        "for p in /proc/[0-9]*; do tr '\\0' ' ' 2>/dev/null < $p/cmdline | "
        f"grep -q '^{name}' && cut -d' ' -f3 $p/stat 2>/dev/null; done"
    )
    return sb.run(script).output.split()


def test_children_parent_and_siblings_are_isolated(make_sb, forked):
    parent = make_sb()
    base_diff = parent.diff()
    a, b = forked(parent, 2)
    a.run("echo A > pkg/core.py && echo a-new > a.txt && rm README.md && cd pkg && export ONLY_A=1")
    b.run("(exec -a only-b-sleep sleep 300) &")
    parent.run("echo P > parent.txt")
    assert b.read_file("pkg/core.py") == parent.read_file("pkg/core.py") != b"A\n"
    assert b.path_kind("a.txt") is None and parent.path_kind("a.txt") is None
    assert b.path_kind("README.md") == "file" == parent.path_kind("README.md")
    assert a.path_kind("parent.txt") is None and b.path_kind("parent.txt") is None
    assert b.run('pwd; echo "${ONLY_A-unset}"').output.split() == [b.workdir, "unset"]
    assert parent.run('echo "${ONLY_A-unset}"').output.strip() == "unset"
    assert "only-b-sleep" not in _procs(a) and "only-b-sleep" not in _procs(parent)
    assert "a.txt" in a.diff() and "a.txt" not in b.diff()
    assert b.diff() == base_diff
    assert "parent.txt" in parent.diff() and "parent.txt" not in a.diff()


def test_each_child_has_its_own_limits_and_identity(make_sb, forked, backend):
    parent = make_sb(max_procs=64)
    kids = forked(parent, 2)
    if backend == "local":
        assert all(k.max_procs == 64 for k in kids)
        if os.geteuid() == 0:  # as root each sandbox runs as its own uid: its own process budget
            uids = {sb.run("id -u").output.strip() for sb in [parent, *kids]}
            assert len(uids) == 3
        assert len({k.root for k in kids} | {parent.root}) == 3
    else:
        for k in kids:
            k.container.reload()
            assert k.container.attrs["HostConfig"]["PidsLimit"] == 64
            assert k.labels["swe-gym.parent"] == parent.episode_id
            assert k.labels["swe-gym.episode"] != parent.episode_id
        assert len({k.container.id for k in kids}) == 2


def test_closing_children_reaps_their_processes_and_leaves_the_parent_as_it_was(make_sb, backend):
    parent = make_sb()
    parent.run("cd pkg && export KEEP=1; (exec -a parent-sleep sleep 300) &")
    kids = parent.fork(2)
    for k in kids:
        k.run("(exec -a child-sleep sleep 300) & echo x > pkg/core.py")
        _note(k, backend)
        k.close()
        k.close()  # idempotent
        assert _gone(k, backend)
        with pytest.raises(SandboxError):
            k.run("true")
    r = parent.run('pwd; echo "$KEEP"; cat core.py')
    assert r.output.split("\n")[:3] == [f"{parent.workdir}/pkg", "1", "def f(x):"]
    assert "parent-sleep" in _procs(parent) and "child-sleep" not in _procs(parent)
    assert parent.diff() == ""


def test_bad_counts_and_closed_parents_are_refused(make_sb):
    parent = make_sb()
    for bad in (0, -1, "2", 1.5, True, None):
        with pytest.raises(ValueError, match=r"integer >= 1.*got " + repr(bad).replace(".", r"\.")):
            parent.fork(bad)
    with pytest.raises(ValueError, match="got 0"):
        fork_sandbox(parent, 0)
    parent.close()
    with pytest.raises(SandboxError, match="closed|not started"):
        parent.fork(1)


def test_a_backend_without_fork_is_named():
    class Plain:
        workdir = "/testbed"

        def start(self): ...
        def run(self, command, timeout=None): ...
        def read_file(self, path, max_bytes=None): ...
        def path_kind(self, path): ...
        def write_file(self, path, data): ...
        def diff(self): ...
        def close(self): ...

    with pytest.raises(ForkUnsupported, match="Plain cannot fork"):
        fork_sandbox(Plain(), 2)


def test_a_failed_child_closes_the_children_made(make_sb, backend, monkeypatch):
    parent = make_sb()
    parent.run("echo changed > pkg/core.py")
    if backend == "local":
        from swe_gym.sandbox.local import LocalSandbox

        target, name = LocalSandbox, "_launch"
    else:
        from swe_gym.sandbox.docker import DockerSandbox

        target, name = DockerSandbox, "_open_session"
    real, calls, made = getattr(target, name), [], []

    def flaky(self):
        calls.append(self)
        made.append(self.root if backend == "local" else self.container.id)
        if len(calls) == 2:
            raise SandboxError("injected start failure")
        return real(self)

    monkeypatch.setattr(target, name, flaky)
    with pytest.raises(SandboxError, match="injected"):
        parent.fork(3)
    monkeypatch.setattr(target, name, real)
    if backend == "local":
        assert len(made) == 2 and not any(r.exists() for r in made)
        assert all(c._session is None for c in calls)
    else:
        import docker.errors

        client = parent.client
        left = client.containers.list(
            all=True, filters={"label": f"swe-gym.parent={parent.episode_id}"}
        )
        assert left == []
        images = client.images.list(filters={"label": f"swe-gym.fork-image={parent.episode_id}"})
        assert images == []
        for cid in made:
            with pytest.raises(docker.errors.NotFound):
                client.containers.get(cid)
    assert parent.run("cat pkg/core.py").output == "changed\n"


def test_children_of_a_crashed_run_are_reaped(backend, repo_task, tmp_path):
    """A process that forks and dies (SIGKILL, no close) leaves nothing running: the local
    children die with it (``--die-with-parent``); the Docker children and the temporary image
    carry the run's labels, so ``swe_gym.reap`` finds them."""
    task, repos = repo_task
    run_id = f"forkcrash-{os.getpid()}-{time.monotonic_ns()}"
    opts = {"repos_dir": str(repos)}
    if backend == "docker":
        opts["run_id"] = run_id
    else:  # a killed process leaves its temp dirs; here they go with the test's
        opts["tmp_dir"] = str(tmp_path)
    script = _crash_script(task, backend, opts)
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == -9, out.stderr[-3000:]
    pids = [int(x) for x in out.stdout.split()]
    if backend == "local":
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.05)
        assert pids and not any(_alive(p) for p in pids)
        return
    from swe_gym import reap
    from swe_gym.docker_daemon import get_client

    client = get_client()
    found = reap.find(client, run_id=run_id)
    assert len(found) == 3  # the parent and its two children
    labels = [(c.attrs.get("Labels") or {}) for c in found]
    assert sum("swe-gym.parent" in lab for lab in labels) == 2
    assert reap.reap(run_id=run_id, client=client) == 3
    assert reap.find(client, run_id=run_id) == []
    assert (
        client.images.list(filters={"label": [f"swe-gym.run={run_id}", "swe-gym.fork-image"]}) == []
    )


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def _crash_script(task, backend: str, opts: dict) -> str:
    row = {
        "instance_id": task.instance_id,
        "repo": task.repo,
        "base_commit": task.base_commit,
        "problem_statement": task.problem_statement,
        "patch": "",
        "test_patch": "",
        "FAIL_TO_PASS": task.FAIL_TO_PASS,
        "PASS_TO_PASS": [],
    }
    return textwrap.dedent(
        f"""
        import os, signal
        from swe_gym.sandbox import make_sandbox
        from swe_gym.tasks import Task
        sb = make_sandbox(Task(**{row!r}), {backend!r}, **{opts!r})
        sb.start()
        kids = sb.fork(2)
        for k in kids:
            k.run("(exec -a crash-sleep sleep 300) &")
        if {backend!r} == "local":
            pids = [p for s in [sb, *kids] for p in s._session.transport.remaining()]
            print(" ".join(map(str, pids)), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )


@pytest.mark.docker
def test_docker_routes_give_the_same_children(docker_client, repo_task, run_id_docker):
    """``commit`` (the default) and ``archive`` carry the same tree and shell state; an unknown
    route is named with the accepted ones."""
    from swe_gym.sandbox.docker import DockerSandbox

    task, repos = repo_task
    parent = DockerSandbox(task, repos_dir=repos, client=docker_client, run_id=run_id_docker)
    parent.start()
    try:
        parent.run(f"head -c {BIG_MB}M /dev/urandom > big.bin; rm pkg/old.txt; cd pkg; export R=1")
        big = hashlib.sha256(parent.read_file("big.bin")).hexdigest()
        with pytest.raises(ValueError, match="choose one of: archive, commit"):
            parent.fork(1, method="rsync")
        seen = []
        for method in ("commit", "archive"):
            (kid,) = parent.fork(1, method=method)
            try:
                assert hashlib.sha256(kid.read_file("big.bin")).hexdigest() == big
                assert kid.path_kind("pkg/old.txt") is None
                seen.append((kid.run('pwd; echo "$R"').output, kid.read_file("pkg/core.py")))
            finally:
                kid.close()
        assert seen[0] == seen[1] == (f"{parent.workdir}/pkg\n1\n", parent.read_file("pkg/core.py"))
    finally:
        parent.close()
    assert (
        docker_client.images.list(filters={"label": f"swe-gym.fork-image={parent.episode_id}"})
        == []
    )


@pytest.fixture()
def run_id_docker(docker_client):
    """A run label of this test's own, reaped after it."""
    from swe_gym import reap

    rid = f"forktest-{os.getpid()}-{time.monotonic_ns()}"
    yield rid
    reap.reap(run_id=rid, client=docker_client)
