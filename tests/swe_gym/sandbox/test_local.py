"""LocalSandbox specifics: cleanup of processes and temp dirs, the bubblewrap requirement,
repository lookup, and the shell helpers."""

from __future__ import annotations

import os
import tempfile
import time

import pytest

from swe_gym.errors import SandboxError, SandboxUnavailable
from swe_gym.repos import REPOS_ENV, local_repo
from swe_gym.sandbox import local as local_mod
from swe_gym.sandbox.interactive import interactive_command_message
from swe_gym.sandbox.local import LocalSandbox
from swe_gym.sandbox.shell import ansi_c_quote
from swe_gym.sandbox.transport import ProcInfo, parse_proc_stat, select_victims


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rpartition(")")[2].split()[0] not in ("Z", "X"):
                    out.append(pid)
        except OSError:
            pass
    return out


def _alive_after(pids: list[int], timeout: float = 5.0) -> list[int]:
    """The pids still alive once they are all gone or ``timeout`` passed (a loaded host is slow)."""
    deadline = time.monotonic() + timeout
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _alive(pids)


def _sandbox_pids(sb: LocalSandbox) -> list[int]:
    return sb._session.transport.remaining()  # type: ignore[union-attr]


def test_close_leaves_no_processes_and_no_files(repo_task):
    task, repos = repo_task
    sb = LocalSandbox(task, repos_dir=repos)
    sb.start()
    sb.run("sleep 300 & (sleep 300 &) ; nohup sleep 300 >/dev/null 2>&1 & setsid sleep 300 &")
    pids = _sandbox_pids(sb)
    assert len(pids) >= 5  # init, shell and the sleeps
    root = sb.root
    assert root is not None and root.exists()
    sb.close()
    sb.close()  # idempotent
    assert not root.exists()
    assert _alive_after(pids) == []
    with pytest.raises(SandboxError, match="not started"):
        sb.run("true")


def test_close_runs_when_the_with_block_raises(repo_task):
    task, repos = repo_task
    with pytest.raises(RuntimeError, match="boom"):
        with LocalSandbox(task, repos_dir=repos) as sb:
            sb.run("sleep 300 &")
            pids, root = _sandbox_pids(sb), sb.root
            raise RuntimeError("boom")
    assert root is not None and not root.exists()
    assert _alive_after(pids) == []


def test_workdir_is_testbed_and_files_live_in_a_private_temp_dir(repo_task):
    task, repos = repo_task
    with LocalSandbox(task, repos_dir=repos) as sb:
        assert sb.workdir == "/testbed" and sb.sandboxed
        assert sb.host_workdir is not None and (sb.host_workdir / "pkg" / "core.py").is_file()
        assert sb.run("cat /proc/self/status | grep ^CapEff").output.split()[1] == "0" * 16
        assert "uid=0(" not in sb.run("id").output  # never root inside: limits apply


def test_refuses_without_bubblewrap_unless_opted_in(repo_task, monkeypatch):
    task, repos = repo_task
    monkeypatch.setattr(local_mod, "find_bwrap", lambda: None)
    with pytest.raises(SandboxUnavailable, match="allow_unsandboxed=True"):
        LocalSandbox(task, repos_dir=repos).start()
    with pytest.warns(RuntimeWarning, match="bubblewrap not found"):
        sb = LocalSandbox(task, repos_dir=repos, allow_unsandboxed=True, command_timeout=5)
        sb.start()
    try:
        assert sb.sandboxed is False and sb.workdir == str(sb.host_workdir)
        assert sb.run("cd pkg; export Y=2").exit_code == 0
        assert sb.run("pwd; echo $Y").output.splitlines() == [f"{sb.workdir}/pkg", "2"]
        r = sb.run("sleep 300 & echo $! > child; sleep 300", timeout=1)
        assert r.timed_out and not r.restarted
        child = int(sb.read_file("pkg/child"))
        assert _alive_after([child]) == []
        sb.write_file("pkg/core.py", "changed\n")
        assert "+changed" in sb.diff()
    finally:
        sb.close()


def test_unknown_base_commit_and_missing_repo_are_clear_errors(
    repo_task, tmp_path, task_factory, monkeypatch
):
    make_task = task_factory
    task, repos = repo_task
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    bad = make_task(task.repo, "0" * 40, "acme__widgets-bad")
    with pytest.raises(SandboxError, match="base_commit '0{40}' is not in the repository"):
        LocalSandbox(bad, repos_dir=repos).start()
    with pytest.raises(SandboxUnavailable, match="nobody__nothing"):
        LocalSandbox(make_task("nobody/nothing", "0" * 40), repos_dir=tmp_path).start()
    assert os.listdir(temp) == []  # the failed start removed its temp dir


def test_bad_limits_are_rejected(repo_task):
    task, repos = repo_task
    with pytest.raises(ValueError, match="max_procs must be a positive integer, got 0"):
        LocalSandbox(task, repos_dir=repos, max_procs=0)


def test_local_repo_lookup_order(tmp_path, monkeypatch, repo_builder):
    path, _ = repo_builder(tmp_path, "o/r")
    assert local_repo("o/r", tmp_path) == path.resolve()
    monkeypatch.setenv(REPOS_ENV, str(tmp_path))
    assert local_repo("o/r") == path.resolve()
    monkeypatch.delenv(REPOS_ENV)
    with pytest.raises(SandboxUnavailable, match=r"'o/r'.*repos_dir=.*backend='docker'"):
        local_repo("o/r")
    with pytest.raises(SandboxUnavailable, match="o__missing"):
        local_repo("o/missing", tmp_path)


def test_local_repo_finds_the_bundled_starter_repos():
    starter = pytest.importorskip("swe_gym.starter")
    repo = sorted(starter.STARTER_REPOS)[0]
    path = local_repo(repo)
    assert (path / ".git").exists() or (path / "HEAD").exists()


# -- shell helpers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cmd",
    [
        "vim setup.py",
        "cd src && nano x.py",
        "git log | less",
        "man ls",
        "top",
        "python",
        "python3",
        "ipython",
        "FOO=1 sudo vi /etc/x",
        "tail -f log.txt",
        "/usr/bin/vim x",
    ],
)
def test_interactive_programs_get_a_message(cmd):
    msg = interactive_command_message(cmd)
    assert msg is not None and ("cannot run here" in msg or "never ends" in msg), msg


@pytest.mark.parametrize(
    "cmd",
    [
        "ls -la",
        "python -m pytest -x",
        "python3 script.py",
        "python -c 'print(1)'",
        "grep -r vim .",
        "echo 'less is more'",
        "cat file | head",
        "git commit -m 'use nano'",
        "tail -n 20 log.txt",
    ],
)
def test_ordinary_commands_pass(cmd):
    assert interactive_command_message(cmd) is None


def test_ansi_c_quote_round_trips_through_bash():
    import subprocess

    text = "a'b\"c\\d $x `y` \n\t\x01 ünï €"
    out = subprocess.run(
        ["bash", "-c", f"printf %s {ansi_c_quote(text)}"], capture_output=True, check=True
    )
    assert out.stdout.decode() == text


def test_parse_proc_stat_handles_odd_command_names():
    text = "12 (a b) c)) S 1 12 12 0 -1\n13 (sh) R 12 13 12 0\n"
    assert parse_proc_stat(text) == [ProcInfo(12, 12, 12), ProcInfo(13, 13, 12)]


def test_select_victims_spares_the_shell_and_earlier_jobs():
    procs = [
        ProcInfo(10, 10, 10),  # the shell
        ProcInfo(11, 11, 10),  # an earlier background job
        ProcInfo(12, 12, 10),  # the timed-out command
        ProcInfo(13, 12, 10),
        ProcInfo(14, 10, 10),  # started with job control off: killed alone
        ProcInfo(20, 20, 20),  # another session
    ]
    assert select_victims(procs, 10, {11}) == ([12], [14])


def test_packs_of_later_bases_chain_to_earlier_ones(
    tmp_path, monkeypatch, repo_builder, task_factory
):
    """A later base's pack holds only what an earlier packed base lacks; its sandbox still sees
    the whole history up to its base and nothing after it."""
    import subprocess

    from swe_gym.sandbox import objects

    monkeypatch.setenv("SWE_GYM_CACHE", str(tmp_path / "cache"))
    path, first = repo_builder(tmp_path / "repos", "o/chain")

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(path), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    second = git("rev-parse", "HEAD")  # the 'future fix' commit of the fixture repo
    (path / "late.txt").write_text("after both bases\n")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "later")
    early = objects.base_pack("o/chain", path, first)
    late = objects.base_pack("o/chain", path, second)
    assert late.chain == (late.objects, early.objects)
    task = task_factory("o/chain", second, "o__chain-1")
    with LocalSandbox(task, repos_dir=tmp_path / "repos") as sb:
        r = sb.run(
            "git log --format=%s | tr '\\n' ' '; echo; git cat-file --batch-all-objects "
            "--batch-check | wc -l; git rev-list --objects --all | wc -l; git fsck 2>&1 | wc -l"
        )
        log, n_all, n_reach, fsck = r.output.splitlines()
        assert log.split() == ["future", "fix", "base"] and n_all == n_reach and fsck == "0"
        later = git("rev-parse", "HEAD")
        assert sb.run(f"git cat-file -e {later}").exit_code != 0
