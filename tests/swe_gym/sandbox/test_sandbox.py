"""The Sandbox contract, run on every backend in ``BACKENDS_UNDER_TEST`` (see conftest)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import tracemalloc
from pathlib import Path

import pytest

from swe_gym.sandbox.base import Sandbox


def test_is_a_sandbox(make_sb):
    sb = make_sb()
    assert isinstance(sb, Sandbox)
    assert sb.run("pwd").output.strip() == sb.workdir


def test_cwd_and_exported_variables_persist(make_sb):
    sb = make_sb()
    assert sb.run("cd pkg && export GREETING='hi there' && X=local").exit_code == 0
    r = sb.run('pwd; echo "$GREETING"; echo "$X"')
    assert r.output.splitlines() == [f"{sb.workdir}/pkg", "hi there", "local"]
    assert sb.run("ls core.py").exit_code == 0


def test_exit_codes_and_syntax_errors(make_sb):
    sb = make_sb()
    assert sb.run("true").exit_code == 0
    assert sb.run("false").exit_code == 1
    assert sb.run("sh -c 'exit 7'").exit_code == 7
    r = sb.run("echo 'unbalanced")
    assert r.exit_code not in (0, None) and not r.restarted
    r = sb.run("if then fi")
    assert r.exit_code not in (0, None)
    # Quotes, heredocs and multi-line scripts arrive byte for byte.
    r = sb.run("cat <<'EOF'\nit's \"quoted\" $HOME `x` \\n\nEOF\necho done")
    assert r.output == 'it\'s "quoted" $HOME `x` \\n\ndone\n'
    assert sb.run("echo after").output == "after\n"


def test_output_merges_stderr_and_keeps_no_trailing_sentinel(make_sb):
    sb = make_sb()
    r = sb.run("echo out; echo err >&2; printf 'no newline'")
    assert r.output == "out\nerr\nno newline"
    assert sb.run("printf ''").output == ""


def test_stdin_is_empty_so_readers_do_not_hang(make_sb):
    sb = make_sb()
    r = sb.run("read x; echo rc=$?; cat; python3 -c 'import sys; print(len(sys.stdin.read()))'", 20)
    assert not r.timed_out
    assert r.output.splitlines()[0] == "rc=1"
    assert sb.run("echo $PAGER $GIT_PAGER $EDITOR $TERM").output.split() == [
        "cat",
        "cat",
        "true",
        "dumb",
    ]


def test_exec_redirection_does_not_break_the_session(make_sb):
    sb = make_sb()
    sb.run("exec >/dev/null 2>&1; echo hidden")
    assert sb.run("echo visible").output == "visible\n"


def test_timeout_kills_the_command_process_group_and_session_survives(make_sb):
    sb = make_sb()
    sb.run("cd pkg; export KEEP=1")
    sb.run("sleep 300 & echo $! > /tmp/old_job")  # an earlier background job: must survive
    r = sb.run("sleep 300 & echo $! > /tmp/child; echo started; sleep 300", timeout=1)
    assert r.timed_out and r.exit_code is None and not r.restarted
    assert r.output.startswith("started\n")
    assert r.output.endswith("<command timed out after 1 s and was killed>")
    after = sb.run(
        "kill -0 $(cat /tmp/child) 2>/dev/null && echo alive || echo gone; pwd; echo $KEEP"
    )
    assert after.output.splitlines()[-3:] == ["gone", f"{sb.workdir}/pkg", "1"]
    assert sb.run("kill -0 $(cat /tmp/old_job) && echo alive").output.strip() == "alive"


def test_timeout_of_a_loop_inside_the_shell_restarts_it_in_the_same_directory(make_sb):
    sb = make_sb()
    sb.run("cd pkg")  # the directory as of the last finished command is kept
    r = sb.run("export A=1; while true; do :; done", timeout=1)
    assert r.timed_out and r.restarted
    assert "was running inside the shell itself" in r.output
    assert sb.run("pwd; echo A=$A").output.splitlines() == [f"{sb.workdir}/pkg", "A="]


def test_endless_output_is_capped_with_head_and_tail_in_bounded_memory(make_sb):
    sb = make_sb(output_limit=2000)
    tracemalloc.start()
    try:
        r = sb.run("echo FIRST; yes", timeout=2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert r.timed_out and r.truncated
    assert r.output.startswith("FIRST\ny\ny\n")
    assert "<output truncated:" in r.output
    assert len(r.output) < 2000 + 200
    assert peak < 8 * 2**20, f"peak Python memory while reading was {peak / 2**20:.1f} MiB"
    # The session is still usable and the next output is whole.
    assert sb.run("echo ok").output == "ok\n"


def test_long_finite_output_is_truncated_not_timed_out(make_sb):
    sb = make_sb(output_limit=1000)
    r = sb.run("seq 1 100000")
    assert r.exit_code == 0 and r.truncated and not r.timed_out
    assert r.output.startswith("1\n2\n3\n") and r.output.endswith("99999\n100000\n")


def test_invalid_utf8_is_replaced(make_sb):
    sb = make_sb()
    r = sb.run(r"printf 'ok \xff\xfe end\n'")
    assert r.output == "ok \ufffd\ufffd end\n"


def test_fork_bomb_hits_the_process_limit_and_the_host_is_fine(make_sb):
    sb = make_sb(max_procs=64)
    script = (
        "import os, time\n"
        "n = 0\n"
        "try:\n"
        "    for _ in range(500):\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(30)\n"
        "            os._exit(0)\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print('fork failed after', n, e.strerror)\n"
    )
    sb.write_file("forker.py", script)
    r = sb.run("python3 forker.py", timeout=30)
    assert "fork failed after" in r.output, r.output
    assert int(r.output.split("after")[1].split()[0]) < 64
    sb.run(":(){ :|:& };:", timeout=3)  # the classic bomb
    assert subprocess.run(["true"], timeout=10).returncode == 0  # the host can still fork


def test_network_is_unreachable(make_sb):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    accepted: list[object] = []

    def accept() -> None:
        try:
            accepted.append(server.accept())
        except OSError:  # the socket was closed at the end of the test
            pass

    threading.Thread(target=accept, daemon=True).start()
    try:
        sb = make_sb()
        probe = (
            "import socket\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
            "    print('connected')\n"
            "except OSError as e:\n"
            "    print('failed', type(e).__name__)\n"
        )
        sb.write_file("probe.py", probe)
        r = sb.run("python3 probe.py", timeout=20)
        assert r.output.startswith("failed"), r.output
        assert not accepted
        ifaces = sb.run("tail -n +3 /proc/net/dev | cut -d: -f1").output.split()
        assert ifaces == ["lo"]
    finally:
        server.close()


def test_writes_outside_the_workspace_fail(make_sb, backend, tmp_path):
    marker = tmp_path / "host_secret.txt"
    marker.write_text("host file")
    sb = make_sb()
    home = str(Path.home())
    for target in ["/usr/sandbox_probe", f"{home}/sandbox_probe", "/etc/sandbox_probe"]:
        r = sb.run(f"echo x > {target}")
        if backend == "local":  # the host's tree is bound read-only
            assert r.exit_code != 0, target
        # A container has its own root file system: a write there may succeed, never on the host.
        assert not Path(target).exists()
    assert sb.run(f"test -e {marker}").exit_code != 0  # the host's /tmp is not visible
    name = f"/tmp/scratch_{marker.parent.name}"
    assert sb.run(f"echo scratch > {name} && cat {name}").output == "scratch\n"
    assert not Path(name).exists()  # the sandbox's /tmp is private
    assert sb.run("echo ok > $HOME/f && cat $HOME/f").output == "ok\n"  # a private HOME


def test_exit_restarts_the_shell_with_a_message(make_sb):
    sb = make_sb()
    sb.run("cd pkg; export A=1")
    r = sb.run("echo bye; exit 3")
    assert r.restarted and r.exit_code is None
    assert r.output.startswith("bye\n")
    assert f"a new shell was started in {sb.workdir}" in r.output
    assert "exported variables and cwd were reset" in r.output
    assert sb.run("pwd; echo A=$A").output.splitlines() == [sb.workdir, "A="]


def test_kill_9_of_the_shell_restarts_it(make_sb):
    sb = make_sb()
    r = sb.run("kill -9 $$")
    assert r.restarted and "the shell exited" in r.output
    assert sb.run("echo alive").output == "alive\n"


def test_read_write_and_diff_with_new_deleted_and_binary_files(make_sb, repo_task, tmp_path):
    task, repos = repo_task
    sb = make_sb()
    assert sb.read_file("pkg/core.py") == b"def f(x):\n    return x + 1\n"
    assert sb.read_file(f"{sb.workdir}/README.md") == b"widgets\n"
    sb.write_file("pkg/core.py", "def f(x):\n    return x + 2\n")
    sb.write_file("new/dir/notes.txt", b"new file\n")
    blob = bytes(range(255, -1, -1)) * 3
    sb.write_file("new/data.bin", blob)
    assert sb.read_file("new/data.bin") == blob
    assert sb.run("rm pkg/old.txt && echo made-inside > inside.txt").exit_code == 0
    diff = sb.diff()
    for path in ["pkg/core.py", "new/dir/notes.txt", "new/data.bin", "pkg/old.txt", "inside.txt"]:
        assert f"diff --git a/{path} b/{path}" in diff
    assert "GIT binary patch" in diff
    # The diff applies to a fresh checkout of base_commit and reproduces the working copy.
    clone = tmp_path / "check"
    repo = repos / "acme__widgets"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", task.base_commit], check=True)
    subprocess.run(
        ["git", "-C", str(clone), "apply", "--binary", "-"],
        input=diff.encode("utf-8", "surrogateescape"),
        check=True,
    )
    assert (clone / "new" / "data.bin").read_bytes() == blob
    assert (clone / "inside.txt").read_text() == "made-inside\n"
    assert not (clone / "pkg" / "old.txt").exists()
    # Files written through the API are usable from the shell.
    assert sb.run("cat new/dir/notes.txt && echo more >> new/dir/notes.txt").exit_code == 0


def test_diff_is_empty_for_an_untouched_copy_and_ignores_commits(make_sb):
    sb = make_sb()
    assert sb.diff() == ""
    sb.run("echo 'x = 1' >> pkg/core.py && git add -A && git commit -qm wip")
    assert "+x = 1" in sb.diff()  # against base_commit, not HEAD


def test_paths_escaping_the_workspace_are_refused(make_sb):
    sb = make_sb()
    for bad in ["../outside.txt", "/etc/passwd", "pkg/../../x"]:
        with pytest.raises(ValueError, match="outside the workspace"):
            sb.read_file(bad)
        with pytest.raises(ValueError, match="outside the workspace"):
            sb.write_file(bad, "x")
    sb.run("ln -s /etc escape")
    with pytest.raises(ValueError, match="outside the workspace"):
        sb.read_file("escape/hostname")
    with pytest.raises(FileNotFoundError, match="no_such_file"):
        sb.read_file("no_such_file")


def test_git_works_inside_and_later_commits_are_not_reachable(make_sb, repo_task):
    task, _ = repo_task
    sb = make_sb()
    r = sb.run("git rev-parse HEAD; git status --porcelain; git log --all --format=%s; git tag")
    lines = r.output.splitlines()
    assert r.exit_code == 0, r.output
    assert lines == [task.base_commit, "base", "v1.0"]


def test_two_sandboxes_on_one_task_do_not_share_state(make_sb):
    a, b = make_sb(), make_sb()
    a.write_file("pkg/core.py", "A\n")
    a.run("export WHO=a; echo a > /tmp/who; cd pkg")
    assert b.read_file("pkg/core.py") == b"def f(x):\n    return x + 1\n"
    r = b.run("echo ${WHO:-unset}; cat /tmp/who 2>/dev/null || echo no-file; pwd")
    assert r.output.splitlines() == ["unset", "no-file", b.workdir]
    assert b.diff() == "" and "A" in a.diff()


def test_the_python_interpreter_of_the_host_toolchain_runs(make_sb, backend):
    sb = make_sb()
    python = sys.executable if backend == "local" else "python"  # the image's own interpreter
    r = sb.run(f"{python} -c 'print(6 * 7)'", timeout=30)
    assert r.output == "42\n", r.output
