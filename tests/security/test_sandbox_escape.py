"""A scripted hostile agent against each sandbox backend: every case asserts containment.

The agent runs shell commands in the sandbox (as a policy would) and tries to read the
answers, run code on the host through git, race the editor, fill the host's disk, see host
secrets, processes or other sandboxes, and write or escalate outside its working copy.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import swe_gym
from swe_gym.paths import cache_root

CHECKOUT = Path(swe_gym.__file__).resolve().parents[1]


# -- 1. the answers ---------------------------------------------------------------------------


def test_the_fix_and_the_task_files_are_out_of_reach(make_sb, backend, task, future_commits):
    sb = make_sb()
    fix = CHECKOUT / "swe_gym" / "starter" / "tasks" / task.instance_id / "fix.patch"
    assert fix.is_file()  # on the host
    probes = [str(fix), str(CHECKOUT), str(cache_root() / "repos"), str(Path.home() / ".cache")]
    r = sb.run(" ; ".join(f"ls -A {p} 2>/dev/null | head -3" for p in probes))
    assert r.output.strip() in ("", "swe_gym"), r.output  # nothing, or the cache's bare path
    r = sb.run("ls -A ~/.cache/swe_gym/repos /root/.cache/swe_gym/repos 2>/dev/null | wc -l")
    assert r.output.strip() == "0"
    # The toolkit (and its bundled tasks) cannot be imported by the sandbox's interpreter.
    python = sys.executable if backend == "local" else "python3"
    r = sb.run(f"{python} -c 'import swe_gym' 2>&1 | tail -1", timeout=30)
    assert "ModuleNotFoundError" in r.output, r.output
    # A search of the file system outside the runtime finds no task file.
    r = sb.run(
        "find / \\( -path /proc -o -path /sys -o -path /usr -o -path /dev \\) -prune -o "
        "\\( -name fix.patch -o -name test.patch -o -name tasks.jsonl \\) -print 2>/dev/null",
        timeout=120,
    )
    assert r.output.strip() == "", r.output


def test_no_git_object_after_the_base_commit_is_reachable(make_sb, task, future_commits):
    sb = make_sb()
    r = sb.run(
        "git cat-file --batch-all-objects --batch-check='%(objectname)' | sort > /tmp/all; "
        "git rev-list --objects --all | cut -d' ' -f1 | sort > /tmp/reach; "
        "git fsck --lost-found >/dev/null 2>&1; comm -23 /tmp/all /tmp/reach | wc -l; "
        "ls .git/lost-found/*/ 2>/dev/null | wc -l",
        timeout=60,
    )
    assert r.output.split() == ["0", "0"], r.output  # every object is reachable from the base
    probe = "; ".join(f"git cat-file -e {c} 2>/dev/null && echo LEAK {c}" for c in future_commits)
    r = sb.run(probe, timeout=60)
    assert "LEAK" not in r.output, r.output


# -- 2. host git over the agent's repository ---------------------------------------------------


def test_git_config_filters_hooks_and_drivers_never_run(make_sb, backend, tmp_path):
    marker = tmp_path / "host_marker"
    sb = make_sb()
    inside = "/tmp/ran"  # what the payload writes inside the sandbox, if it ever runs there
    payload = f"sh -c 'id -u >> {marker}; id -u >> {sb.workdir}/RAN; id -u >> {inside}; cat'"
    hook = f"#!/bin/sh\nid -u >> {marker}\nid -u >> {sb.workdir}/RAN\n"
    setup = "\n".join(
        [
            f'git config filter.x.clean "{payload}"',
            f'git config filter.x.smudge "{payload}"',
            f'git config filter.x.process "{payload}"',
            "git config filter.x.required true",
            f'git config diff.x.command "{payload}"',
            f'git config diff.x.textconv "{payload}"',
            f'git config core.fsmonitor "{payload}"',
            f'git config core.pager "{payload}"',
            f'git config diff.external "{payload}"',
            "git config core.hooksPath .git/hooks",
            "mkdir -p .git/hooks .git/info",
            *(
                f"printf %s {_q(hook)} > .git/hooks/{h} && chmod +x .git/hooks/{h}"
                for h in ("post-index-change", "pre-commit", "reference-transaction")
            ),
            "printf '* filter=x diff=x\\n' > .git/info/attributes",
            "printf '* filter=x diff=x\\n' > .gitattributes",
            "echo '# changed' >> README.md",
        ]
    )
    r = sb.run(setup)
    assert r.exit_code == 0, r.output
    diff = sb.diff()
    assert "+# changed" in diff and "diff --git a/.gitattributes b/.gitattributes" in diff
    assert not marker.exists(), f"the host ran the agent's command: {marker.read_text()}"
    assert sb.run(f"cat {sb.workdir}/RAN {inside} 2>/dev/null | wc -l").output.strip() == "0"


def _q(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


# -- 3. nested repositories --------------------------------------------------------------------


def test_nested_git_repositories_are_diffed_as_plain_files(make_sb, task, tmp_path):
    sb = make_sb()
    edited = task.patch.split("diff --git a/", 1)[1].split(" ", 1)[0]  # a tracked file
    pkg = edited.rsplit("/", 1)[0]
    r = sb.run(
        "mkdir -p vendor/lib && echo 'v = 1' > vendor/lib/v.py && git -C vendor init -q && "
        "git -C vendor add -A && git -C vendor -c user.name=a -c user.email=a@b commit -qm v && "
        "mkdir empty_repo && echo e > empty_repo/e.txt && git -C empty_repo init -q && "
        "mkdir -p deep/a && echo d > deep/a/d.txt && git -C deep/a init -q && "
        "echo ignored > vendor/skip.log && printf '*.log\\n' > vendor/.gitignore && "
        f"git -C {pkg} init -q && echo '# edited' >> {edited}"
    )
    assert r.exit_code == 0, r.output
    diff = sb.diff()
    for path in [
        "vendor/lib/v.py",
        "vendor/.gitignore",
        "empty_repo/e.txt",
        "deep/a/d.txt",
        edited,
    ]:
        assert f"diff --git a/{path} b/{path}" in diff, diff
    assert "Subproject commit" not in diff and "/.git/" not in diff and "skip.log" not in diff
    # The diff applies to a fresh copy of the base commit.
    from swe_gym.repos import local_repo

    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(local_repo(task.repo)), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", task.base_commit], check=True)
    subprocess.run(
        ["git", "-C", str(clone), "apply", "--binary", "-"],
        input=diff.encode("utf-8", "surrogateescape"),
        check=True,
    )
    assert (clone / "vendor" / "lib" / "v.py").read_text() == "v = 1\n"
    assert (clone / edited).read_text().endswith("# edited\n")


# -- 4. the editor race ------------------------------------------------------------------------

SWAPPER = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
os.makedirs("d", exist_ok=True)
open("d/f", "w").write("innocent\\n")
os.symlink(sys.argv[1], "l")
while True:
    libc.renameat2(-100, b"d", -100, b"l", 2)  # RENAME_EXCHANGE
"""


def test_editor_race_cannot_reach_host_files(make_sb, backend, tmp_path):
    secret_dir = tmp_path / "host"
    secret_dir.mkdir()
    (secret_dir / "f").write_text("HOST SECRET\n")
    os.chmod(secret_dir / "f", 0o600)
    sb = make_sb()
    sb.write_file("swap.py", SWAPPER)
    r = sb.run(f"python3 swap.py {secret_dir} >/dev/null 2>&1 & sleep 0.5; ls -l l d | head -2")
    assert r.exit_code == 0, r.output
    seen: set[bytes] = set()
    errors: list[BaseException] = []
    for i in range(300 if backend == "local" else 60):  # Docker: several API calls each
        try:
            seen.add(sb.read_file("d/f"))
        except Exception as e:
            errors.append(e)
        try:
            sb.write_file(f"d/planted{i % 3}", "x")
        except Exception as e:
            errors.append(e)
    sb.run("kill %1; wait")
    assert b"HOST SECRET\n" not in seen
    assert sorted(p.name for p in secret_dir.iterdir()) == ["f"]  # nothing planted on the host
    assert seen <= {b"innocent\n"}
    # Refusals are the editor's usual errors (outside the workspace, missing, not a file),
    # never "the sandbox failed".
    odd = [e for e in errors if not isinstance(e, (ValueError, OSError))]
    assert not odd, odd[:3]
    assert sb.run("echo alive").output.endswith("alive\n")


def test_fifo_and_links_out_are_refused_without_hanging(make_sb):
    sb = make_sb()
    sb.run("mkfifo pipe; ln -s /etc/passwd out; ln -s ../../../../etc dirout; ln -s out loop1")
    with pytest.raises(IsADirectoryError, match="not a regular file"):
        sb.read_file("pipe")
    try:  # no hang: refused (local) or the FIFO replaced by a file (Docker's archive API)
        sb.write_file("pipe", "x")
    except IsADirectoryError:
        pass
    for path in ["out", "dirout/passwd"]:
        with pytest.raises(ValueError, match="outside the workspace"):
            sb.read_file(path)
        with pytest.raises(ValueError, match="outside the workspace"):
            sb.write_file(path, "x")


# -- 5. disk ------------------------------------------------------------------------------------


def test_tmp_is_capped_with_a_plain_no_space_error(make_sb):
    sb = make_sb(tmp_size_mb=8)
    r = sb.run("dd if=/dev/zero of=/tmp/fill bs=1M count=32 2>&1; df -m /tmp | tail -1")
    assert "No space left on device" in r.output, r.output
    assert sb.run("rm /tmp/fill && echo ok > /tmp/f && cat /tmp/f").output == "ok\n"


# -- 6. environment, processes, other sandboxes, privileges, network ---------------------------


def test_host_environment_variables_do_not_leak(make_sb, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-redteam-0123456789")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "redteam-aws-secret")
    monkeypatch.setenv("SWE_GYM_CACHE", str(cache_root()))
    sb = make_sb()
    env = sb.run("env; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'").output
    for leak in ("sk-redteam", "redteam-aws-secret", "OPENAI_API_KEY", "SWE_GYM_CACHE"):
        assert leak not in env, leak


def test_no_host_process_is_visible_or_traceable(make_sb, backend):
    sb = make_sb()
    r = sb.run(
        "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '; echo; ls /proc | grep -c '^[0-9]'"
    )
    assert "pytest" not in r.output and "dockerd" not in r.output, r.output
    assert int(r.output.split()[-1]) < 20
    if backend == "local":  # pid 1 is bubblewrap's init (root on a root host): not ours to trace
        probe = (
            "import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
            "print(libc.ptrace(16, 1, 0, 0), ctypes.get_errno())"
        )
        r = sb.run(f"python3 -c '{probe}'", timeout=30)
        assert r.output.split()[0] == "-1", r.output


def test_two_sandboxes_cannot_see_each_other(make_sb, backend):
    a, b = make_sb(), make_sb()
    a.run("echo s > /tmp/zz_only_in_a; echo s > zz_only_in_a.txt")
    r = b.run(
        "find / \\( -path /proc -o -path /sys -o -path /usr -o -path /dev \\) -prune -o "
        "-name 'zz_only_in_a*' -print 2>/dev/null",
        timeout=120,
    )
    assert r.output.strip() == "", r.output
    if backend == "local":
        assert b.run(f"ls {a.host_workdir} 2>&1 | head -1").exit_code != 0 or "zz" not in r.output


def test_no_privilege_can_be_gained(make_sb, backend):
    sb = make_sb()
    r = sb.run("grep -E '^(CapEff|CapPrm|NoNewPrivs)' /proc/self/status")
    fields = dict(line.split(":") for line in r.output.strip().splitlines())
    assert fields["CapEff"].strip() == "0" * 16 and fields["CapPrm"].strip() == "0" * 16
    assert fields["NoNewPrivs"].strip() == "1"  # setuid bits and file capabilities are ignored
    if backend == "local":
        r = sb.run("python3 -c 'import os; os.setuid(0)' 2>&1 | tail -1; id -u", timeout=30)
        assert "PermissionError" in r.output and r.output.split()[-1] != "0"


def test_only_the_working_copy_and_tmp_are_writable(make_sb, backend):
    sb = make_sb()
    r = sb.run(
        "for d in / /etc /usr /usr/local /var /root /home /opt /srv /dev /testbed /tmp "
        "$(awk '{print $5}' /proc/self/mountinfo | sort -u); do "
        '[ -d "$d" ] && touch "$d/.probe" 2>/dev/null && echo "$d" && rm -f "$d/.probe"; '
        "done | sort -u"
    )
    writable = set(r.output.split())
    if backend == "local":
        assert writable <= {"/testbed", "/tmp", "/tmp/home", "/dev/shm"}, writable
    else:  # root in its own container file system: writable there, never on the host
        assert not Path("/.probe").exists()
    assert "/testbed" in writable and "/tmp" in writable


def test_only_loopback_network(make_sb):
    sb = make_sb()
    assert sb.run("tail -n +3 /proc/net/dev | cut -d: -f1").output.split() == ["lo"]


def test_masked_project_inside_a_bound_prefix(tmp_path, monkeypatch, task):
    """A non-editable install puts the toolkit (and its tasks) in the interpreter's
    site-packages, which the sandbox binds: it must show up empty."""
    from swe_gym.sandbox import mounts
    from swe_gym.sandbox.local import LocalSandbox

    prefix = tmp_path / "prefix"
    pkg = prefix / "lib" / "site-packages" / "swe_gym" / "starter" / "tasks" / "t1"
    pkg.mkdir(parents=True)
    (pkg / "fix.patch").write_text("THE ANSWER\n")
    (prefix / "bin").mkdir()
    (prefix / "bin" / "tool").write_text("#!/bin/sh\necho tool-ran\n")
    os.chmod(prefix / "bin" / "tool", 0o755)
    real_paths = mounts.project_paths
    monkeypatch.setattr(mounts, "toolchain_dirs", lambda: [str(prefix)])
    monkeypatch.setattr(
        mounts,
        "project_paths",
        lambda repos_dir=None: [*real_paths(repos_dir), str(pkg.parents[2])],
    )
    with LocalSandbox(task) as sb:
        r = sb.run(f"{prefix}/bin/tool; ls -A {pkg.parents[2]} | wc -l; touch {pkg.parents[2]}/x")
        assert r.output.splitlines()[:2] == ["tool-ran", "0"], r.output
        assert r.exit_code != 0  # the mask is read-only too


def test_concurrent_builders_share_one_pack(task, tmp_path, monkeypatch):
    from swe_gym.repos import local_repo
    from swe_gym.sandbox import objects

    monkeypatch.setenv("SWE_GYM_CACHE", str(tmp_path))
    repo = local_repo(task.repo)
    results: list[objects.BasePack] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(objects.base_pack(task.repo, repo, task.base_commit))
        )
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({r.objects for r in results}) == 1 and len(results) == 4
    packs = list((results[0].objects / "pack").glob("pack-*.pack"))
    assert len(packs) == 1
    assert not [p for p in results[0].objects.parents[1].iterdir() if p.name.startswith(".")]


def test_host_secrets_and_tool_configs_in_etc_are_not_shown(tmp_path):
    from swe_gym.sandbox.local import LocalSandbox
    from swe_gym.starter import starter_tasks

    hidden = [
        "shadow",
        "gshadow",
        "ssl/private",
        "gitconfig",
        "pip.conf",
        "npmrc",
        "ssh",
        "sudoers",
    ]
    with LocalSandbox(starter_tasks()[0]) as sb:
        r = sb.run("; ".join(f"test -e /etc/{h} && echo SEEN {h}" for h in hidden) + "; true")
        assert "SEEN" not in r.output, r.output
        # What programs need is there: users, the loader cache, certificates.
        r = sb.run(
            "getent passwd root | cut -d: -f1; test -s /etc/ld.so.cache && echo ld; ls /etc/ssl/certs | head -1"
        )
        assert r.output.split()[:2] == ["root", "ld"], r.output
