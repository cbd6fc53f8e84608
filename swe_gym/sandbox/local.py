"""``LocalSandbox``: a fresh git working copy at ``base_commit`` and a bubblewrap-isolated shell.

Layout: one private temp dir per sandbox holding ``testbed/`` (the working copy) and ``tmp/``.
Inside bubblewrap the working copy is ``/testbed`` (as in SWE-bench images) and ``tmp/`` is
``/tmp``; every other path is a read-only bind of the host's (``/root``, ``/home``, ``/run``,
``/sys`` and the host's ``/tmp`` are not visible; toolchains on ``PATH`` that live under a home
directory, e.g. ``~/.pyenv``, are bound read-only). No network (only ``lo``), its own pid/ipc/uts
namespaces, a new session, ``--die-with-parent``, no capabilities, and ``prlimit`` limits on
processes, address space and file size.

The kernel never applies ``RLIMIT_NPROC`` to real uid 0, so when the host process is root the
shell runs as a random unprivileged uid (the working copy is chowned to it); otherwise it runs
as the caller's uid in a user namespace (where the process limit counts per sandbox).

The working copy is ``git init`` + an ``alternates`` file pointing at the cached repository's
objects + ``read-tree -u`` of ``base_commit``: no object is copied, the copy has its own
``.git`` (so ``git`` works inside), and it holds no refs but a detached ``HEAD`` and the tags
reachable from it (later commits are not reachable through refs).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

from swe_gym.errors import SandboxError, SandboxUnavailable
from swe_gym.repos import local_repo
from swe_gym.sandbox.base import DEFAULT_COMMAND_TIMEOUT, DEFAULT_OUTPUT_LIMIT, CommandResult
from swe_gym.sandbox.shell import ProcInfo, ShellSession, select_victims
from swe_gym.tasks import Task

SANDBOX_WORKDIR = "/testbed"
TMP_ENV = "SWE_GYM_SANDBOX_TMP"
# Top-level host directories NOT bound into the sandbox (private, volatile or host-specific).
_HIDDEN_TOP = {
    "proc",
    "dev",
    "sys",
    "tmp",
    "root",
    "home",
    "run",
    "lost+found",
    "boot",
    "mnt",
    "media",
    "old_root",
}
_HOME_ROOTS = ("/root", "/home")
_PASS_ENV = (
    "PATH",
    "LANG",
    "LC_ALL",
    "PYENV_ROOT",
    "PYENV_VERSION",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "CONDA_DEFAULT_ENV",
)
_GIT_TIMEOUT = 120.0


def find_bwrap() -> str | None:
    """Path of the ``bwrap`` executable, or ``None`` (tests replace this to simulate absence)."""
    return shutil.which("bwrap")


def _git(
    *args: str, cwd: Path | str, env: dict[str, str] | None = None, input: bytes | None = None
) -> bytes:
    """Run git on the host (as the caller); raise SandboxError with git's message on failure."""
    cmd = ["git", "-c", "safe.directory=*", "-c", "core.fsmonitor=false", *args]
    try:
        p = subprocess.run(
            cmd,
            cwd=cwd,
            env=env,
            input=input,
            capture_output=True,
            timeout=_GIT_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise SandboxError(f"`git {' '.join(args)}` timed out after {_GIT_TIMEOUT:g} s") from e
    if p.returncode != 0:
        msg = p.stderr.decode("utf-8", "replace").strip()
        raise SandboxError(f"`git {' '.join(args)}` failed in {cwd}: {msg}")
    return p.stdout


def _objects_dir(repo: Path) -> Path:
    dotgit = repo / ".git"
    if dotgit.is_dir():
        return (dotgit / "objects").resolve()
    if (repo / "objects").is_dir() and (repo / "HEAD").is_file():
        return (repo / "objects").resolve()
    common = _git("rev-parse", "--git-common-dir", cwd=repo).decode().strip()
    return (repo / common / "objects").resolve()


def _scan_procs() -> list[tuple[ProcInfo, int, str]]:
    """Every live host process as (stat in host numbers, innermost-namespace pid, pid-ns link).

    Zombies are left out: they run nothing and hold no memory; an orphaned sandbox zombie
    waits for the host's init to reap it, which can take seconds."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode("utf-8", "replace")
            with open(f"/proc/{name}/status", "rb") as f:
                status = f.read().decode("utf-8", "replace")
            ns = os.readlink(f"/proc/{name}/ns/pid")
        except OSError:  # exited meanwhile, or not ours to read
            continue
        rest = stat.rpartition(")")[2].split()
        if len(rest) < 4 or rest[0] in ("Z", "X"):
            continue
        nspid = int(name)
        for line in status.splitlines():
            if line.startswith("NSpid:"):
                nspid = int(line.split()[-1])
                break
        out.append((ProcInfo(int(name), int(rest[2]), int(rest[3])), nspid, ns))
    return out


class LocalTransport:
    """The shell as a host subprocess (bwrap, or a bare bash when unsandboxed)."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str, sandboxed: bool):
        self.sandboxed = sandboxed
        info_r = info_w = None
        if sandboxed:
            info_r, info_w = os.pipe()
            argv = [argv[0], "--info-fd", str(info_w), *argv[1:]]
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,
                close_fds=True,
                pass_fds=(info_w,) if info_w is not None else (),
            )
        except OSError as e:
            raise SandboxUnavailable(f"cannot start the sandbox shell {argv[0]!r}: {e}") from e
        finally:
            if info_w is not None:
                os.close(info_w)
        self._out = self.proc.stdout.fileno()  # type: ignore[union-attr]
        self._in = self.proc.stdin.fileno()  # type: ignore[union-attr]
        self.pidns: str | None = None
        if info_r is not None:
            with os.fdopen(info_r, "rb") as f:
                raw = f.read()  # bwrap writes the JSON and closes the fd (or exits)
            try:
                child = int(json.loads(raw.decode())["child-pid"])
                self.pidns = os.readlink(f"/proc/{child}/ns/pid")
            except (ValueError, KeyError, OSError):
                out = self.read(1.0) or b""
                self.close()
                raise SandboxError(
                    "bubblewrap failed to start the sandbox: "
                    f"{out.decode('utf-8', 'replace').strip() or raw!r}"
                ) from None

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self._in, view)
            view = view[n:]

    def read(self, timeout: float) -> bytes | None:
        ready, _, _ = select.select([self._out], [], [], max(0.0, timeout))
        if not ready:
            return b""
        data = os.read(self._out, 1 << 16)
        return data if data else None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _members(self) -> list[tuple[ProcInfo, int]]:
        procs = _scan_procs()
        if self.sandboxed:
            return [(p, nspid) for p, nspid, ns in procs if ns == self.pidns]
        return [(p, p.pid) for p, _, _ in procs]

    def kill_command(self, shell_pid: int, keep_pgids: set[int]) -> int:
        signalled = 0
        for _ in range(5):  # repeat: a forking command may add processes between scan and kill
            members = self._members()
            host_of = {nspid: p.pid for p, nspid in members}
            shell_host = host_of.get(shell_pid)
            if shell_host is None:
                return signalled
            keep = {host_of[k] for k in keep_pgids if k in host_of}
            groups, pids = select_victims([p for p, _ in members], shell_host, keep)
            if not groups and not pids:
                return signalled
            for g in groups:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(g, signal.SIGKILL)
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            signalled += len(groups) + len(pids)
            time.sleep(0.01)
        return signalled

    def remaining(self) -> list[int]:
        """Host pids of processes still alive in this sandbox (its pid namespace, or when
        unsandboxed the shell's session)."""
        if self.sandboxed:
            return [p.pid for p, _ in self._members()]
        return [p.pid for p, _ in self._members() if p.sid == self.proc.pid]

    def close(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                # bwrap's init gets SIGKILL with its parent (--die-with-parent); the kernel then
                # kills the whole pid namespace. Unsandboxed: the shell's session group.
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        deadline = time.monotonic() + 5
        while (left := self.remaining()) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)
        for f in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                f.close()  # type: ignore[union-attr]


class LocalSandbox:
    """A task's repository at ``base_commit`` in a private temp dir, with a persistent shell.

    Args:
        task: the task (``repo`` and ``base_commit`` are used).
        repos_dir: where clones named ``<owner>__<name>`` live (see ``swe_gym.repos``).
        allow_unsandboxed: run a bare bash on the host when bubblewrap is missing (warns).
        memory_mb: address-space limit per process (``RLIMIT_AS``).
        max_procs: process/thread limit (``RLIMIT_NPROC``).
        file_size_mb: largest file a process may write (``RLIMIT_FSIZE``).
        output_limit: characters of output kept per command.
        command_timeout: default per-command timeout in seconds.
        network: keep the host network (default: only ``lo``).
        tmp_dir: where the private temp dir goes (default ``$SWE_GYM_SANDBOX_TMP``, else the
            system temp dir). A tmpfs such as ``/dev/shm`` makes start() several times faster
            on slow disks (the checkout writes every file) at the cost of RAM.
    """

    def __init__(
        self,
        task: Task,
        *,
        repos_dir: str | os.PathLike | None = None,
        allow_unsandboxed: bool = False,
        memory_mb: int = 2048,
        max_procs: int = 256,
        file_size_mb: int = 512,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        command_timeout: float = DEFAULT_COMMAND_TIMEOUT,
        network: bool = False,
        tmp_dir: str | os.PathLike | None = None,
    ):
        for name, value in (
            ("memory_mb", memory_mb),
            ("max_procs", max_procs),
            ("file_size_mb", file_size_mb),
        ):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.task = task
        self.repos_dir = repos_dir
        self.allow_unsandboxed = allow_unsandboxed
        self.memory_mb, self.max_procs, self.file_size_mb = memory_mb, max_procs, file_size_mb
        self.output_limit = output_limit
        self.command_timeout = command_timeout
        self.network = network
        self.tmp_dir = tmp_dir if tmp_dir is not None else os.environ.get(TMP_ENV) or None
        self.workdir = SANDBOX_WORKDIR
        self.sandboxed: bool | None = None
        self.root: Path | None = None  # private temp dir (host)
        self.host_workdir: Path | None = None  # the working copy on the host
        self._uid: int | None = None  # sandbox uid when the host is root
        self._session: ShellSession | None = None
        self._objects: Path | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> LocalSandbox:
        if self._session is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Make the working copy and start the shell. Raises ``SandboxUnavailable`` when
        bubblewrap is missing (unless ``allow_unsandboxed``) or the repository is not found."""
        if self._session is not None:
            raise SandboxError("start() called twice; make a new sandbox instead")
        bwrap = find_bwrap()
        if bwrap is None and not self.allow_unsandboxed:
            raise SandboxUnavailable(
                "bubblewrap (bwrap) is not installed, so the local backend cannot isolate "
                "commands; install it (apt-get install bubblewrap), use backend='docker', or "
                "pass allow_unsandboxed=True to run commands directly on the host"
            )
        repo = local_repo(self.task.repo, self.repos_dir)
        self.sandboxed = bwrap is not None
        if not self.sandboxed:
            warnings.warn(
                "bubblewrap not found: LocalSandbox runs commands directly on the host with only "
                "resource limits (no filesystem or network isolation)",
                RuntimeWarning,
                stacklevel=2,
            )
        self.root = Path(tempfile.mkdtemp(prefix="swe_gym_local_", dir=self.tmp_dir))
        try:
            self.host_workdir = self.root / "testbed"
            (self.root / "tmp" / "home").mkdir(parents=True)
            self._objects = _objects_dir(repo)
            self._checkout(repo)
            if self.sandboxed and os.geteuid() == 0:
                self._uid = 100_000 + random.randrange(1 << 20)  # own uid: own process budget
                self._chown(self.root)
            if not self.sandboxed:
                self.workdir = str(self.host_workdir)
            self._session = ShellSession(
                self._spawn,
                self.workdir,
                env=self._shell_env(),
                output_limit=self.output_limit,
                command_timeout=self.command_timeout,
            )
            self._session.start()
        except BaseException:
            self.close()
            raise

    def _checkout(self, repo: Path) -> None:
        ws = self.host_workdir
        assert ws is not None and self._objects is not None
        base = self.task.base_commit
        _git("-c", "init.defaultBranch=main", "init", "-q", "--template=", str(ws), cwd=self.root)
        (ws / ".git" / "objects" / "info").mkdir(parents=True, exist_ok=True)
        (ws / ".git" / "objects" / "info" / "alternates").write_text(f"{self._objects}\n")
        try:
            sha = _git("rev-parse", "--verify", "-q", f"{base}^{{commit}}", cwd=ws).decode().strip()
        except SandboxError:
            raise SandboxError(
                f"task {self.task.instance_id}: base_commit {base!r} is not in the repository "
                f"{repo} (for {self.task.repo!r}); fetch it there first"
            ) from None
        _git("read-tree", "-u", "--reset", sha, cwd=ws)
        _git("update-ref", "--no-deref", "HEAD", sha, cwd=ws)
        # Tags reachable from base (version tools such as setuptools_scm read them).
        tags = _git(
            "for-each-ref",
            f"--merged={sha}",
            "--format=%(objectname) %(refname)",
            "refs/tags",
            cwd=repo,
        )
        if tags.strip():
            (ws / ".git" / "packed-refs").write_bytes(b"# pack-refs with: peeled\n" + tags)

    def _chown(self, path: Path) -> None:
        if self._uid is None:
            return
        uid = self._uid
        os.lchown(path, uid, uid)
        for dirpath, dirnames, filenames in os.walk(path):
            for n in dirnames + filenames:
                os.lchown(os.path.join(dirpath, n), uid, uid)

    def _shell_env(self) -> dict[str, str]:
        home = "/tmp/home" if self.sandboxed else str(self.root / "tmp" / "home")
        return {
            "HOME": home,
            "TMPDIR": "/tmp" if self.sandboxed else str(self.root / "tmp"),
            "USER": "agent",
            "LOGNAME": "agent",
            "SHELL": "/bin/bash",
            "GIT_AUTHOR_NAME": "agent",
            "GIT_AUTHOR_EMAIL": "agent@sandbox.invalid",
            "GIT_COMMITTER_NAME": "agent",
            "GIT_COMMITTER_EMAIL": "agent@sandbox.invalid",
        }

    def _spawn(self) -> LocalTransport:
        assert self.root is not None and self.host_workdir is not None
        env = {k: os.environ[k] for k in _PASS_ENV if k in os.environ}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        env.setdefault("LANG", "C.UTF-8")
        limits = [
            f"--nproc={self.max_procs}",
            f"--as={self.memory_mb << 20}",
            f"--fsize={self.file_size_mb << 20}",
            "--core=0",
        ]
        shell = ["bash", "--norc", "--noprofile"]
        prlimit = shutil.which("prlimit")
        inner = ([prlimit, *limits, "--"] if prlimit else []) + shell
        if not self.sandboxed:
            env.update(self._shell_env())
            return LocalTransport(inner, env, str(self.host_workdir), sandboxed=False)
        argv = [find_bwrap() or "bwrap", *self._bwrap_args()]
        # The shell must lead its own session (ShellTransport contract); bwrap's --new-session
        # makes its init the leader, so `setsid` again (no fork: the shell is not a group leader).
        setsid = shutil.which("setsid")
        if setsid is None:
            raise SandboxUnavailable("the sandbox needs `setsid` (util-linux) on the host")
        inner = [setsid, *inner]
        if self._uid is not None:
            setpriv = shutil.which("setpriv")
            if setpriv is None:
                raise SandboxUnavailable(
                    "running as root, the sandbox needs `setpriv` (util-linux) to drop to an "
                    "unprivileged uid (the kernel ignores process limits for uid 0)"
                )
            inner = [
                setpriv,
                f"--reuid={self._uid}",
                f"--regid={self._uid}",
                "--clear-groups",
                "--",
                *inner,
            ]
        return LocalTransport([*argv, "--", *inner], env, "/", sandboxed=True)

    def _bwrap_args(self) -> list[str]:
        assert self.root is not None and self.host_workdir is not None
        root_mode = self._uid is not None
        args = [
            "--die-with-parent",
            "--new-session",
            "--unshare-ipc",
            "--unshare-pid",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--hostname",
            "sandbox",
        ]
        if not self.network:
            args.append("--unshare-net")
        if not root_mode:
            args.append("--unshare-user")  # unprivileged bwrap needs it; limits count per ns
        args += ["--cap-drop", "ALL"]
        if root_mode:  # only to switch to the sandbox uid; setresuid then clears all caps
            args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        for entry in sorted(os.listdir("/")):
            path = "/" + entry
            if entry in _HIDDEN_TOP:
                continue
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                args += ["--ro-bind", path, path]
        args += [
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--perms",
            "0755",
            "--dir",
            "/sys",
            "--ro-bind-try",
            "/sys/devices/system/cpu",
            "/sys/devices/system/cpu",
            "--bind",
            str(self.root / "tmp"),
            "/tmp",
            "--bind",
            str(self.host_workdir),
            SANDBOX_WORKDIR,
        ]
        for extra in [*self._home_toolchains(), *map(str, self._object_dirs())]:
            args += [*_parent_dirs(extra), "--ro-bind", extra, extra]
        if root_mode:
            passwd, group = self._identity_files()
            args += ["--ro-bind", passwd, "/etc/passwd", "--ro-bind", group, "/etc/group"]
        return [*args, "--chdir", SANDBOX_WORKDIR]

    def _home_toolchains(self) -> list[str]:
        """Directories on PATH (and Python's prefix) under a hidden home, bound read-only, e.g.
        /root/.pyenv for a pyenv interpreter. Bound at depth home+1 (the tool's root)."""
        found: set[str] = set()
        paths = os.environ.get("PATH", "").split(os.pathsep) + [sys.prefix, sys.base_prefix]
        for p in paths:
            real = os.path.realpath(p) if p else ""
            for cand in {p, real}:
                if not cand or not os.path.isabs(cand):
                    continue
                for home in _HOME_ROOTS:
                    parts = (
                        Path(cand).relative_to(home).parts if cand.startswith(home + "/") else ()
                    )
                    depth = 2 if home == "/home" else 1  # /home/<user>/<tool>, /root/<tool>
                    if len(parts) >= depth:
                        top = os.path.join(home, *parts[:depth])
                        if os.path.isdir(top):
                            found.add(top)
        return sorted(found)

    def _object_dirs(self) -> list[Path]:
        """The cached repository's objects dir and any alternates it chains to."""
        assert self._objects is not None
        out, todo = [], [self._objects]
        while todo and len(out) < 5:
            d = todo.pop()
            if d in out:
                continue
            out.append(d)
            alt = d / "info" / "alternates"
            if alt.is_file():
                for line in alt.read_text().splitlines():
                    if line.strip() and not line.startswith("#"):
                        todo.append((d / line.strip()).resolve())
        return out

    def _identity_files(self) -> tuple[str, str]:
        assert self.root is not None and self._uid is not None
        uid = self._uid
        passwd, group = self.root / "passwd", self.root / "group"
        if not passwd.exists():
            base_p = Path("/etc/passwd").read_text() if Path("/etc/passwd").exists() else ""
            base_g = Path("/etc/group").read_text() if Path("/etc/group").exists() else ""
            passwd.write_text(base_p + f"agent:x:{uid}:{uid}:agent:/tmp/home:/bin/bash\n")
            group.write_text(base_g + f"agent:x:{uid}:\n")
        return str(passwd), str(group)

    def close(self) -> None:
        """Kill the shell and every process of the sandbox; remove the working copy and temp
        dirs. Idempotent."""
        session, self._session = self._session, None
        if session is not None:
            session.close()
        root, self.root = self.root, None
        if root is not None and root.exists():
            shutil.rmtree(root, onerror=_force_remove)

    # -- commands and files -----------------------------------------------------------------

    def _live_session(self) -> ShellSession:
        if self._session is None:
            raise SandboxError("the sandbox is not started (call start()) or already closed")
        return self._session

    def run(self, command: str, timeout: float | None = None) -> CommandResult:
        """Run ``command`` in the persistent shell; see ``ShellSession.run``."""
        return self._live_session().run(command, timeout)

    def _host_path(self, path: str) -> Path:
        self._live_session()
        assert self.host_workdir is not None
        ws = self.host_workdir.resolve()
        p = str(path)
        if os.path.isabs(p):
            rel = os.path.relpath(os.path.normpath(p), self.workdir)
            if rel == ".." or rel.startswith("../"):
                raise ValueError(
                    f"path {path!r} is outside the workspace {self.workdir}; pass a path "
                    "relative to it or an absolute path inside it"
                )
            p = rel
        target = (ws / p).resolve()  # follows symlinks on the host: an escaping link is caught
        if target != ws and ws not in target.parents:
            raise ValueError(
                f"path {path!r} resolves outside the workspace {self.workdir} "
                "(through '..' or a symlink); only files inside it can be read or written"
            )
        return target

    def read_file(self, path: str) -> bytes:
        """Bytes of a file in the working copy (relative to ``workdir``, or absolute inside)."""
        target = self._host_path(path)
        try:
            return target.read_bytes()
        except FileNotFoundError:
            raise FileNotFoundError(f"no such file in the sandbox: {path!r}") from None
        except IsADirectoryError:
            raise IsADirectoryError(f"{path!r} is a directory, not a file") from None

    def write_file(self, path: str, data: bytes | str) -> None:
        """Write a file in the working copy, creating parent directories."""
        target = self._host_path(path)
        if isinstance(data, str):
            data = data.encode("utf-8")
        ws = self.host_workdir
        assert ws is not None
        missing = [d for d in [target.parent, *target.parent.parents] if not d.exists()]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        if self._uid is not None:
            for d in [target, *missing]:
                os.lchown(d, self._uid, self._uid)

    def diff(self) -> str:
        """``git diff`` of the working copy against ``base_commit``, new and binary files
        included (``--binary``). Undecodable bytes are kept as surrogate escapes, so
        ``diff().encode("utf-8", "surrogateescape")`` gives git's exact bytes."""
        self._live_session()
        ws, root = self.host_workdir, self.root
        assert ws is not None and root is not None
        index = root / "diff.index"
        env = {**os.environ, "GIT_INDEX_FILE": str(index)}
        try:
            real_index = ws / ".git" / "index"
            if real_index.is_file():  # its stat data makes `add -A` skip unchanged files
                shutil.copyfile(real_index, index)
            else:
                _git("read-tree", self.task.base_commit, cwd=ws, env=env)
            _git("add", "-A", cwd=ws, env=env)
            out = _git(
                "diff",
                "--cached",
                "--binary",
                "--no-color",
                "--no-ext-diff",
                self.task.base_commit,
                cwd=ws,
                env=env,
            )
        finally:
            with contextlib.suppress(FileNotFoundError):
                index.unlink()
        return out.decode("utf-8", "surrogateescape")


def _parent_dirs(path: str) -> list[str]:
    """``--dir`` options (mode 0755) for the ancestors of ``path`` that bwrap would otherwise
    create with mode 0700 (those under a top-level directory that is not bound, e.g. /root),
    so that the unprivileged sandbox user can traverse them."""
    parts = Path(path).parts[1:-1]
    if not parts or parts[0] not in _HIDDEN_TOP:
        return []
    out: list[str] = []
    for i in range(1, len(parts) + 1):
        sub = "/" + "/".join(parts[:i])
        if sub != "/tmp":
            out += ["--perms", "0755", "--dir", sub]
    return out


def _force_remove(func, path, exc_info) -> None:  # noqa: ANN001 - shutil.rmtree's onerror
    """Make a directory writable again (a command may have chmod-ed it) and retry."""
    with contextlib.suppress(OSError):
        os.chmod(os.path.dirname(path), 0o700)
        os.chmod(path, 0o700)
    with contextlib.suppress(OSError):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)


__all__ = ["SANDBOX_WORKDIR", "TMP_ENV", "LocalSandbox", "LocalTransport", "find_bwrap"]
