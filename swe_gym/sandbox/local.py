"""``LocalSandbox``: a fresh git working copy at ``base_commit`` and a bubblewrap-isolated shell.

Layout: one private temp dir per sandbox (never visible inside it) holding ``testbed/`` (the
working copy, ``/testbed`` inside, as in SWE-bench images) and ``diffgit/`` (the private git
dir of ``diff``). What the sandbox sees is an allow list (``swe_gym.sandbox.mounts``): a
read-only runtime, the interpreter, the base commit's objects, a size-capped ``/tmp``; nothing
of the host's home folders, of this project, its cache or other sandboxes. The interpreter is
the task's environment where it has one (``swe_gym.taskenv``, option ``environment``): its
venv first on ``PATH``, only its venv and interpreter prefix bound, the install step's
generated files copied into the working copy; else the host's. No network (only
``lo``), its own pid/ipc/uts namespaces, a new session, ``--die-with-parent``, no capabilities,
``no_new_privs``, and ``prlimit`` limits on processes, address space and file size.

The kernel never applies ``RLIMIT_NPROC`` to real uid 0, so when the host process is root the
shell runs as a random unprivileged uid (the working copy is chowned to it); otherwise it runs
as the caller's uid in a user namespace (where the process limit counts per sandbox).

The working copy's ``.git`` has an ``alternates`` file to a pack of the objects reachable from
``base_commit`` (``swe_gym.sandbox.objects``): no later commit, tree or blob is in reach. Host
git never runs over the agent-writable tree: ``diff`` runs in a fresh sandboxed process with a
private git dir (``swe_gym.sandbox.gitdiff``), and ``read_file``/``write_file`` walk the tree
without following links out of it (``swe_gym.sandbox.safefs``).

Disk: ``/tmp`` and ``/dev/shm`` are tmpfs capped at ``tmp_size_mb`` / 64 MB (writes past the
cap fail with "No space left on device"); the working copy lives on the host's disk under
``tmp_dir`` and is capped per file (``file_size_mb``), not in total.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

from swe_gym import taskenv
from swe_gym.errors import SandboxError, SandboxUnavailable
from swe_gym.repos import local_repo
from swe_gym.sandbox.base import DEFAULT_COMMAND_TIMEOUT, DEFAULT_OUTPUT_LIMIT, CommandResult
from swe_gym.sandbox.gitdiff import DIFF_SCRIPT, diff_env
from swe_gym.sandbox.local_transport import LocalTransport
from swe_gym.sandbox.mounts import SANDBOX_WORKDIR, bwrap_mounts
from swe_gym.sandbox.objects import BasePack, base_pack, init_repo
from swe_gym.sandbox.safefs import force_rmtree, kind_in_tree, read_in_tree, write_in_tree
from swe_gym.sandbox.shell import ShellSession
from swe_gym.sandbox.treediff import DIFF_TIMEOUT, MAX_PATCH_BYTES, run_bounded
from swe_gym.taskenv.build import TaskEnv
from swe_gym.taskenv.tree import copy_generated
from swe_gym.tasks import Task

TMP_ENV = "SWE_GYM_SANDBOX_TMP"
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
_DIFF_GIT_DIR = "/.swe_gym_diff"  # where the diff process sees its private git dir
_REPO_CONFIG = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"


def find_bwrap() -> str | None:
    """Path of the ``bwrap`` executable, or ``None`` (tests replace this to simulate absence)."""
    return shutil.which("bwrap")


class LocalSandbox:
    """A task's repository at ``base_commit`` in a private temp dir, with a persistent shell.

    Args:
        task: the task (``repo`` and ``base_commit`` are used).
        repos_dir: where clones named ``<owner>__<name>`` live (see ``swe_gym.repos``);
            default: the row's own ``repos_dir`` field (rows ``swe_gym.synth`` writes carry it).
        allow_unsandboxed: run a bare bash on the host when bubblewrap is missing (warns).
        memory_mb: address-space limit per process (``RLIMIT_AS``).
        max_procs: process/thread limit (``RLIMIT_NPROC``).
        file_size_mb: largest file a process may write (``RLIMIT_FSIZE``).
        tmp_size_mb: size of the sandbox's ``/tmp`` (a tmpfs, in RAM).
        output_limit: characters of output kept per command.
        command_timeout: default per-command timeout in seconds.
        network: keep the host network (default: only ``lo``).
        tmp_dir: where the private temp dir goes (default ``$SWE_GYM_SANDBOX_TMP``, else the
            system temp dir). A tmpfs such as ``/dev/shm`` makes start() several times faster
            on slow disks (the checkout writes every file) at the cost of RAM.
        max_patch_bytes, diff_timeout: bounds of ``diff`` (``DiffError`` past them).
        environment: ``"auto"``, ``"task"`` or ``"host"``: the task environment the shell
            runs in (``swe_gym.taskenv``; built on first use, cached by recipe). With one,
            its interpreter is first on ``PATH`` and only its venv and interpreter prefix are
            bound: none of the host's site-packages or pytest plugins.
        allow_nearest_python: build with the nearest Python on the machine when the recipe's
            version is not there (else ``PythonNotFound`` naming it).
        binds: ``(host dir, sandbox path, writable)`` bound into the shell's sandbox (not the
            diff's): an agent harness's files and its endpoint (``swe_gym.sandbox.harness``).
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
        tmp_size_mb: int = 512,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        command_timeout: float = DEFAULT_COMMAND_TIMEOUT,
        network: bool = False,
        tmp_dir: str | os.PathLike | None = None,
        max_patch_bytes: int = MAX_PATCH_BYTES,
        diff_timeout: float = DIFF_TIMEOUT,
        environment: str = "auto",
        allow_nearest_python: bool = False,
        binds: Sequence[tuple[str, str, bool]] = (),
    ):
        for name, value in (
            ("memory_mb", memory_mb),
            ("max_procs", max_procs),
            ("file_size_mb", file_size_mb),
            ("tmp_size_mb", tmp_size_mb),
        ):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.task = task
        self.repos_dir = repos_dir if repos_dir is not None else task.extra.get("repos_dir")
        self.allow_unsandboxed = allow_unsandboxed
        self.memory_mb, self.max_procs, self.file_size_mb = memory_mb, max_procs, file_size_mb
        self.tmp_size_mb = tmp_size_mb
        self.output_limit = output_limit
        self.command_timeout = command_timeout
        self.network = network
        self.max_patch_bytes, self.diff_timeout = max_patch_bytes, diff_timeout
        self.tmp_dir = tmp_dir if tmp_dir is not None else os.environ.get(TMP_ENV) or None
        self.workdir = SANDBOX_WORKDIR
        self.sandboxed: bool | None = None
        self.root: Path | None = None  # private temp dir (host)
        self.host_workdir: Path | None = None  # the working copy on the host
        self._uid: int | None = None  # sandbox uid when the host is root
        self._session: ShellSession | None = None
        self._pack: BasePack | None = None
        self.environment, self.allow_nearest_python = environment, allow_nearest_python
        self.task_env: TaskEnv | None = None  # None: the host's interpreter
        self.env_seconds = 0.0  # time to find (or build) the task environment at start()
        self.binds = [(str(h), str(i), bool(w)) for h, i, w in binds]

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
        self.sandboxed = bwrap is not None
        if not self.sandboxed:
            warnings.warn(
                "bubblewrap not found: LocalSandbox runs commands directly on the host with only "
                "resource limits (no filesystem or network isolation)",
                RuntimeWarning,
                stacklevel=2,
            )
        self._pack = self._base_pack()
        t0 = time.monotonic()
        self.task_env = taskenv.resolve(
            self.task, self.environment, self.repos_dir, self.allow_nearest_python
        )
        self.env_seconds = time.monotonic() - t0
        self.root = Path(tempfile.mkdtemp(prefix="swe_gym_local_", dir=self.tmp_dir))
        try:
            self.host_workdir = self.root / "testbed"
            (self.root / "tmp" / "home").mkdir(parents=True)
            self.host_workdir.mkdir()
            git_dir = self.host_workdir / ".git"
            init_repo(git_dir, self._pack, work_tree=self.host_workdir)
            (git_dir / "config").write_text(_REPO_CONFIG)
            # The diff's private index starts as the checkout's (its stat data is a cache).
            (self.root / "diffgit").mkdir()
            if self.task_env is not None:
                copy_generated(self.task_env, self.host_workdir, [git_dir, self.root / "diffgit"])
            shutil.copyfile(git_dir / "index", self.root / "diffgit" / "index")
            self._launch()
        except BaseException:
            self.close()
            raise

    def _launch(self) -> None:
        """Own the working copy under ``root`` (a fresh uid when root) and start the shell."""
        assert self.root is not None
        self.host_workdir = self.root / "testbed"
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

    def fork(self, n: int) -> list[LocalSandbox]:
        """``n`` started copies of this sandbox (working copy, shell cwd, exports, options),
        each with its own uid, processes and limits; this one is unchanged. See
        ``swe_gym.sandbox.local_fork``."""
        from swe_gym.sandbox.local_fork import fork_local

        return fork_local(self, n)

    def _base_pack(self) -> BasePack:
        base = self.task.base_commit
        try:
            return base_pack(self.task.repo, None, base)  # cached: no repository lookup
        except SandboxError:
            pass
        repo = local_repo(self.task.repo, self.repos_dir)
        try:
            return base_pack(self.task.repo, repo, base)
        except SandboxError as e:
            raise SandboxError(f"task {self.task.instance_id}: {e}") from None

    def _chown(self, path: Path) -> None:
        if self._uid is None:
            return
        # chown's one C walk (no link followed): several times faster than os.walk on 10k files
        uid = self._uid
        subprocess.run(["chown", "-hR", f"{uid}:{uid}", "--", str(path)], check=True)

    def _shell_env(self) -> dict[str, str]:
        assert self.root is not None  # start() made it
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

    def _base_env(self) -> dict[str, str]:
        if self.task_env is not None:  # nothing of the host's Python setup
            env = {k: os.environ[k] for k in ("LANG", "LC_ALL") if k in os.environ}
            env.setdefault("LANG", "C.UTF-8")
            return {**env, "PATH": self.task_env.path(), "VIRTUAL_ENV": str(self.task_env.venv)}
        env = {k: os.environ[k] for k in _PASS_ENV if k in os.environ}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        env.setdefault("LANG", "C.UTF-8")
        return env

    def _wrap(self, inner: list[str], *, diff: bool = False) -> list[str]:
        """bwrap + options + (setpriv to the sandbox uid) + ``inner``."""
        argv = [find_bwrap() or "bwrap", *self._bwrap_args(diff=diff)]
        if self._uid is not None:
            setpriv = shutil.which("setpriv")
            if setpriv is None:
                raise SandboxUnavailable(
                    "running as root, the sandbox needs `setpriv` (util-linux) to drop to an "
                    "unprivileged uid (the kernel ignores process limits for uid 0)"
                )
            uid = str(self._uid)
            inner = [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", *inner]
        return [*argv, "--", *inner]

    def _spawn(self) -> LocalTransport:
        assert self.root is not None and self.host_workdir is not None
        env = self._base_env()
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
        # The shell must lead its own session (ShellTransport contract); bwrap's --new-session
        # makes its init the leader, so `setsid` again (no fork: the shell is not a group leader).
        setsid = shutil.which("setsid")
        if setsid is None:
            raise SandboxUnavailable("the sandbox needs `setsid` (util-linux) on the host")
        return LocalTransport(self._wrap([setsid, *inner]), env, "/", sandboxed=True)

    def _bwrap_args(self, diff: bool = False) -> list[str]:
        assert self.root is not None and self.host_workdir is not None and self._pack is not None
        root_mode, env = self._uid is not None, self.task_env
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
        if not self.network or diff:
            args.append("--unshare-net")
        if not root_mode:
            args.append("--unshare-user")  # unprivileged bwrap needs it; limits count per ns
        args += ["--cap-drop", "ALL"]
        if root_mode:  # only to switch to the sandbox uid; setresuid then clears all caps
            args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        args += bwrap_mounts(
            workdir_host=str(self.host_workdir),
            readonly_worktree=diff,
            objects=[str(d) for d in self._pack.chain],
            extra_binds=[(str(self.root / "diffgit"), _DIFF_GIT_DIR, True)] if diff else self.binds,
            identity=self._identity_files() if root_mode else None,
            tmp_size_mb=self.tmp_size_mb,
            repos_dir=self.repos_dir,
            toolchain=env.binds[1:] if env else None,
            env_binds=[(env.binds[0], False)] if env else [],
            hide=env.base_site_packages() if env else [],
        )
        return [*args, "--chdir", SANDBOX_WORKDIR]

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
            force_rmtree(root)

    # -- commands and files -----------------------------------------------------------------

    def _live_session(self) -> ShellSession:
        if self._session is None:
            raise SandboxError("the sandbox is not started (call start()) or already closed")
        return self._session

    def run(self, command: str, timeout: float | None = None) -> CommandResult:
        """Run ``command`` in the persistent shell; see ``ShellSession.run``."""
        return self._live_session().run(command, timeout)

    def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        """Bytes of a file in the working copy (relative to ``workdir``, or absolute inside).
        ValueError outside it, FileNotFoundError, IsADirectoryError (also for non-files),
        FileTooLarge past ``max_bytes`` (sized by fstat of our own fd)."""
        self._live_session()
        assert self.host_workdir is not None
        return read_in_tree(str(self.host_workdir), self.workdir, path, max_bytes)

    def path_kind(self, path: str) -> str | None:
        """``"file"``, ``"dir"``, ``"other"`` or None, seen from the host (``kind_in_tree``),
        never asked of the agent's shell."""
        self._live_session()
        assert self.host_workdir is not None
        return kind_in_tree(str(self.host_workdir), self.workdir, path)

    def write_file(self, path: str, data: bytes | str) -> None:
        """Write a file in the working copy, creating parent directories."""
        self._live_session()
        assert self.host_workdir is not None
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        write_in_tree(str(self.host_workdir), self.workdir, path, raw, self._uid)

    def diff(self) -> str:
        """``git diff`` of the working copy against ``base_commit``, new and binary files
        included (``--binary``), nested repositories' files as ordinary files. Undecodable
        bytes are kept as surrogate escapes, so ``diff().encode("utf-8", "surrogateescape")``
        gives git's exact bytes. Taken by a fresh sandboxed process (see module doc)."""
        self._live_session()
        assert self.root is not None and self._pack is not None
        if self.sandboxed:
            gd, wt = _DIFF_GIT_DIR, SANDBOX_WORKDIR
            argv = self._wrap(["bash", "--norc", "--noprofile", "-c", DIFF_SCRIPT], diff=True)
        else:
            gd, wt = str(self.root / "diffgit"), str(self.host_workdir)
            argv = ["bash", "--norc", "--noprofile", "-c", DIFF_SCRIPT]
        env = diff_env(
            git_dir=gd,
            work_tree=wt,
            index=f"{gd}/index",
            base=self._pack.sha,
            alternate="\n".join(str(d) for d in self._pack.chain),
            path=self._base_env()["PATH"],
        )
        out = run_bounded(argv, env, timeout=self.diff_timeout, max_bytes=self.max_patch_bytes)
        return out.decode("utf-8", "surrogateescape")


__all__ = ["SANDBOX_WORKDIR", "TMP_ENV", "LocalSandbox", "LocalTransport", "find_bwrap"]
