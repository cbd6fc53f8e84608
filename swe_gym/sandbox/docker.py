"""``DockerSandbox``: one container per episode, a persistent bash over a ``docker exec`` socket.

The container runs ``sleep infinity`` under Docker's init from the task's image (see
``swe_gym.images``) with the repository at ``base_commit`` in ``/testbed``. Isolation by
default: no network (``network=True`` opts in), every capability dropped,
``no-new-privileges``, a pids limit, a memory limit with no swap, a CPU quota, no host mounts.
Labels (``swe_gym.reap``): ``owner=swe-gym``, ``swe-gym.run``, ``swe-gym.episode``,
``swe-gym.task``, ``swe-gym.started``.

The bash session is ``swe_gym.sandbox.shell`` (shared with the local backend) over
``DockerExecStream``: ``api.exec_create(stdin=True, tty=False)`` + ``api.exec_start(socket=True)``,
whose output arrives as 8-byte-header multiplexed frames. Per-command timeouts kill the
command's process groups with a second exec; when that is impossible (a fork bomb at the pids
limit) the container's processes are all killed and it is started again (files kept).
Files go through the archive API (``swe_gym.sandbox.docker_files``), not the shell; the diff
runs nothing in the container: ``/testbed`` is streamed out as an archive and diffed by the
host's git (``swe_gym.sandbox.treediff``), bounded in time and size. Disk: ``/tmp`` is a tmpfs capped
at ``tmp_size_mb`` ("No space left on device" past it); the container's writable layer
(``/testbed`` included) is not capped by this class.

Many environments in parallel: each ``DockerSandbox`` is independent and thread-safe to use
from its own thread; starts are capped process-wide (``SWE_GYM_DOCKER_MAX_STARTS``, default 8)
and retried on transient daemon errors.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from swe_gym.docker_daemon import get_client, host_of, is_connection_error, unavailable
from swe_gym.errors import SandboxError, SandboxUnavailable, unknown_choice
from swe_gym.images.common import WORKDIR
from swe_gym.images.resolve import PULL_POLICIES, ensure_image
from swe_gym.reap import LABEL_EPISODE, LABEL_OWNER, LABEL_RUN, LABEL_STARTED, LABEL_TASK, OWNER
from swe_gym.sandbox.base import DEFAULT_COMMAND_TIMEOUT, DEFAULT_OUTPUT_LIMIT, CommandResult
from swe_gym.sandbox.docker_files import DockerFiles
from swe_gym.sandbox.docker_transport import DockerExecTransport
from swe_gym.sandbox.gitdiff import DIFF_SCRIPT, diff_env
from swe_gym.sandbox.image_git import image_objects
from swe_gym.sandbox.treediff import (
    DIFF_TIMEOUT,
    MAX_PATCH_BYTES,
    MAX_TREE_BYTES,
    extract_archive,
    run_bounded,
)
from swe_gym.tasks import Task

# Concurrent container starts in this process: the daemon serialises much of create/start, and
# a burst of 64 starts is slower in total than 8 at a time.
_start_slots = threading.BoundedSemaphore(int(os.environ.get("SWE_GYM_DOCKER_MAX_STARTS", "8")))
# One id per process unless set: tests and trainers pass their own to reap exactly their containers.
DEFAULT_RUN_ID = os.environ.get("SWE_GYM_RUN_ID") or f"pid{os.getpid()}-{uuid.uuid4().hex[:8]}"
START_ATTEMPTS = 4
OOM_MESSAGE = (
    "\n[the command was killed by the kernel's OOM killer: the sandbox's memory limit is {mb} MB]"
)
PIDS_MESSAGE = (
    "\n[the sandbox hit its process limit ({n} processes); every process in it was killed and "
    "a fresh shell started (files are kept, the working directory and variables are not)]"
)


def _transient(exc: BaseException) -> bool:
    import docker.errors

    if is_connection_error(exc):
        return True
    if isinstance(exc, docker.errors.APIError):
        code = exc.status_code or 0
        text = str(exc).lower()
        return code == 429 or (code >= 500 and "no such image" not in text) or "timeout" in text
    return False


class DockerSandbox(DockerFiles):
    """A task's repository in a fresh container with a persistent bash session. See module doc."""

    workdir = WORKDIR

    def __init__(
        self,
        task: Task,
        *,
        image: str | None = None,
        pull_policy: str = "if-missing",
        network: bool = False,
        memory_mb: int = 2048,
        cpus: float = 1.0,
        pids_limit: int = 256,
        tmp_size_mb: int = 512,
        command_timeout: float = DEFAULT_COMMAND_TIMEOUT,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        labels: dict[str, str] | None = None,
        client: Any = None,
        run_id: str | None = None,
        build: bool = True,
        repos_dir: str | os.PathLike | None = None,
        max_patch_bytes: int = MAX_PATCH_BYTES,
        max_tree_bytes: int = MAX_TREE_BYTES,
        diff_timeout: float = DIFF_TIMEOUT,
        binds: Sequence[tuple[str, str, bool]] = (),
    ):
        if pull_policy not in PULL_POLICIES:
            raise unknown_choice("pull_policy", pull_policy, PULL_POLICIES)
        for name, value, low in (
            ("memory_mb", memory_mb, 16),
            ("pids_limit", pids_limit, 8),
            ("tmp_size_mb", tmp_size_mb, 1),
        ):
            if not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if not cpus > 0:
            raise ValueError(f"cpus must be > 0, got {cpus!r}")
        if not command_timeout > 0:
            raise ValueError(f"command_timeout must be > 0 seconds, got {command_timeout!r}")
        self.task = task
        self.image = image
        self.pull_policy = pull_policy
        self.network = network
        self.memory_mb = memory_mb
        self.cpus = cpus
        self.pids_limit = pids_limit
        self.tmp_size_mb = tmp_size_mb
        self.command_timeout = command_timeout
        self.output_limit = output_limit
        self.build = build
        # where a local build finds the repository (swe_gym.repos); a row may name its own
        self.repos_dir = repos_dir if repos_dir is not None else task.extra.get("repos_dir")
        self.max_patch_bytes, self.max_tree_bytes = max_patch_bytes, max_tree_bytes
        self.diff_timeout = diff_timeout
        # (host dir, container path, writable): an agent harness's files and its endpoint
        # (swe_gym.sandbox.harness); the daemon must run on this host to bind them.
        self.binds = [(str(h), str(i), bool(w)) for h, i, w in binds]
        self.run_id = run_id or DEFAULT_RUN_ID
        self.episode_id = uuid.uuid4().hex[:12]
        self.labels = {
            LABEL_OWNER: OWNER,
            LABEL_RUN: self.run_id,
            LABEL_EPISODE: self.episode_id,
            LABEL_TASK: task.instance_id,
            **(labels or {}),
        }
        self._client = client
        self.container: Any = None
        self._session: Any = None
        self._oom_kills = 0
        self._closed = False
        self._lock = threading.RLock()

    # ------------------------------------------------------------------------------ lifecycle

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = get_client()
        return self._client

    def start(self) -> None:
        """Resolve the image, start the container, open the shell. Raises SandboxUnavailable
        when the daemon or the image is missing, SandboxError when the container will not run."""
        with self._lock:
            if self.container is not None:
                return
            self._closed = False
            try:
                image = ensure_image(
                    self.task,
                    image=self.image,
                    pull_policy=self.pull_policy,
                    build=self.build,
                    client=self.client,
                    repos_dir=self.repos_dir,
                )
            except Exception as e:
                if is_connection_error(e):
                    raise unavailable(host_of(self._client), e) from None
                raise
            self.image = image
            with _start_slots:
                self.container = self._create_with_retries(image)
            try:
                self._open_session()
            except BaseException:
                self.close()
                raise

    def _create_with_retries(self, image: str) -> Any:
        import docker.errors

        delay = 0.2
        last: BaseException | None = None
        for attempt in range(START_ATTEMPTS):
            labels = {**self.labels, LABEL_STARTED: f"{time.time():.3f}"}
            name = f"swe-gym-{self.episode_id}-{attempt}"
            try:
                return self.client.containers.run(
                    image,
                    ["sleep", "infinity"],
                    name=name,
                    detach=True,
                    init=True,  # reaps orphans (zombies would count against the pids limit)
                    working_dir=self.workdir,
                    network_mode="bridge" if self.network else "none",
                    cap_drop=["ALL"],
                    security_opt=["no-new-privileges"],
                    pids_limit=self.pids_limit,
                    mem_limit=f"{self.memory_mb}m",
                    memswap_limit=f"{self.memory_mb}m",  # no swap: a hog is OOM-killed, not paged
                    nano_cpus=int(self.cpus * 1e9),
                    # A capped /tmp: writes past it fail with "No space left on device".
                    tmpfs={"/tmp": f"rw,nosuid,nodev,size={self.tmp_size_mb}m,mode=1777"},
                    labels=labels,
                    volumes={h: {"bind": i, "mode": "rw" if w else "ro"} for h, i, w in self.binds},
                )
            except docker.errors.ImageNotFound as e:
                raise SandboxUnavailable(f"image {image!r} not found on the daemon: {e}") from None
            except Exception as e:
                last = e
                self._remove_by_name(name)  # a create that half-succeeded
                if not _transient(e):
                    break
                time.sleep(delay)
                delay *= 2
        if last is not None and is_connection_error(last):
            raise unavailable(host_of(self._client), last) from None
        raise SandboxError(
            f"could not start a container from {image!r} for task {self.task.instance_id!r} "
            f"after {attempt + 1} attempt(s): {last}"
        )

    def _remove_by_name(self, name: str) -> None:
        try:
            self.client.api.remove_container(name, force=True)
        except Exception:
            pass

    def close(self) -> None:
        """Remove the container (force). Idempotent; safe after any exception, also mid-start."""
        with self._lock:
            self._closed = True
            session, self._session = self._session, None
            container, self.container = self.container, None
        if container is not None:
            import docker.errors

            for _ in range(3):
                try:
                    container.remove(force=True)
                    break
                except docker.errors.NotFound:
                    break
                except docker.errors.APIError as e:
                    if "already in progress" in str(e):
                        break
                    time.sleep(0.2)
                except Exception:
                    time.sleep(0.2)  # the daemon blinked; the reaper catches what this misses
        if session is not None:
            try:
                session.close()  # after the removal: nothing left to kill, just the socket
            except Exception:
                pass

    def fork(self, n: int, method: str | None = None) -> list[DockerSandbox]:
        """``n`` started copies of this sandbox (files, the shell's cwd, exports and options),
        each its own container; this one is unchanged. See ``swe_gym.sandbox.docker_fork``."""
        from swe_gym.sandbox.docker_fork import fork_docker

        return fork_docker(self, n, method)

    def __enter__(self) -> DockerSandbox:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------------------------- shell

    def _spawn(self) -> DockerExecTransport:
        try:
            return DockerExecTransport(
                self.client.api, self.container.id, self.workdir, closing=lambda: self._closed
            )
        except Exception as e:
            raise self._container_gone(e) from None

    def _open_session(self) -> None:
        from swe_gym.sandbox.shell import ShellSession

        session = ShellSession(
            self._spawn,
            self.workdir,
            output_limit=self.output_limit,
            command_timeout=self.command_timeout,
        )
        session.start()
        self._session = session

    def _require(self) -> None:
        if self._closed or self.container is None:
            raise SandboxError(
                f"sandbox for {self.task.instance_id!r} is {'closed' if self._closed else 'not started'}; "
                "call start() first"
            )

    def _container_gone(self, cause: object) -> SandboxError:
        """A clear error when the container stopped or vanished under us."""
        import docker.errors

        if is_connection_error(cause):  # type: ignore[arg-type]
            return unavailable(host_of(self._client), cause)
        if self._closed or self.container is None:
            return SandboxError(f"sandbox for {self.task.instance_id!r} was closed ({cause})")
        state = "removed"
        try:
            self.container.reload()
            s = self.container.attrs.get("State", {})
            state = (
                f"{s.get('Status')} (exit code {s.get('ExitCode')}, OOMKilled={s.get('OOMKilled')})"
            )
            if s.get("Running"):
                return SandboxError(
                    f"container {self.container.name} is running but the shell failed: {cause}"
                )
        except docker.errors.NotFound:
            pass
        except Exception as e:
            if is_connection_error(e):
                return unavailable(host_of(self._client), e)
        return SandboxError(
            f"container {getattr(self.container, 'name', '?')} for task {self.task.instance_id!r} was "
            f"stopped or removed from outside the sandbox (state: {state}); this episode cannot "
            f"continue: close it and start a new sandbox (env.reset())"
        )

    def run(self, command: str, timeout: float | None = None) -> CommandResult:
        """Run ``command`` in the persistent shell; never raises for a failing command."""
        self._require()
        try:
            result = self._session.run(command, timeout=timeout or self.command_timeout)
        except Exception as e:
            # A shell that cannot be (re)started: the container is at its pids limit, or gone.
            result = CommandResult(f"<the shell failed: {e}>", None, restarted=True)
            if not self._recover_pids(result):
                if isinstance(e, SandboxError) and "from outside" in str(e):
                    raise
                raise self._container_gone(e) from None
            return result
        if result.exit_code == 137 or result.restarted or result.timed_out:
            self._note_oom(result)
        if result.timed_out or "Resource temporarily unavailable" in result.output:
            self._recover_pids(result)
        return result

    def _oom_kill_count(self) -> int | None:
        """The container cgroup's OOM-kill counter (v1 memory.oom_control, v2 memory.events)."""
        try:
            r = self.container.exec_run(
                [
                    "sh",
                    "-c",
                    "cat /sys/fs/cgroup/memory.events 2>/dev/null "
                    "|| cat /sys/fs/cgroup/memory/memory.oom_control",
                ],
            )
        except Exception:
            return None
        for line in r.output.decode(errors="replace").splitlines():
            k, _, v = line.partition(" ")
            if k == "oom_kill" and v.strip().isdigit():
                return int(v)
        return None

    def _note_oom(self, result: CommandResult) -> None:
        n = self._oom_kill_count()
        if n is not None and n > self._oom_kills:
            self._oom_kills = n
            result.oom_killed = True
            result.output += OOM_MESSAGE.format(mb=self.memory_mb)

    def _pids_current(self) -> int | None:
        try:
            st = self.client.api.stats(self.container.id, stream=False, one_shot=True)
            return int(st.get("pids_stats", {}).get("current"))
        except Exception:
            return None

    def _recover_pids(self, result: CommandResult) -> bool:
        """At the pids limit nothing new can run (not even our kill exec): kill every process by
        restarting the container (its files stay) and open a fresh shell."""
        cur = self._pids_current()
        # A bomb's process count churns below the limit while its members die and fork again,
        # so "near the limit" is read as at least half of it (after fork failures were seen).
        if cur is None or cur < self.pids_limit // 2:
            return False
        try:
            if self._session is not None:
                self._session.close()
            self.container.kill()
            self.container.start()
            self._open_session()
        except Exception as e:
            raise self._container_gone(e) from None
        result.restarted = True
        result.output += PIDS_MESSAGE.format(n=self.pids_limit)
        return True

    def diff(self) -> str:
        """``git diff`` against ``base_commit`` with new (untracked, not ignored) files included,
        nested repositories' files as ordinary files, undecodable bytes as surrogate escapes.
        Nothing runs in the container: the daemon streams ``/testbed`` as an archive, the host
        writes it out as data and diffs it with its own git (``swe_gym.sandbox.treediff``).
        DiffError past ``diff_timeout``, ``max_patch_bytes`` or ``max_tree_bytes``."""
        self._require()
        deadline = time.monotonic() + self.diff_timeout
        objects, base = self._base_objects()
        with tempfile.TemporaryDirectory(prefix="swe_gym_dtree_") as tmp:
            tree = os.path.join(tmp, "tree")
            os.mkdir(tree)
            try:
                stream, _ = self.client.api.get_archive(self.container.id, self.workdir)
            except Exception as e:
                raise self._container_gone(e) from None
            extract_archive(stream, tree, max_bytes=self.max_tree_bytes, deadline=deadline)
            env = diff_env(
                git_dir=os.path.join(tmp, "git"), work_tree=tree, index=os.path.join(tmp, "index"),
                base=base, alternate="\n".join(objects), filemode=False,
                path=os.environ.get("PATH", "/usr/bin:/bin"),
            )  # fmt: skip
            out = run_bounded(
                ["bash", "--norc", "--noprofile", "-c", DIFF_SCRIPT],
                env,
                timeout=max(1.0, deadline - time.monotonic()),
                max_bytes=self.max_patch_bytes,
            )
        return out.decode("utf-8", "surrogateescape")

    def _base_objects(self) -> tuple[list[str], str]:
        """Object directories holding ``base_commit`` and its full sha, from trusted sources
        only: the base's cached pack, else one built from the local repository, else the
        image's own ``/testbed/.git`` (copied out of a container that never ran)."""
        from swe_gym.repos import local_repo
        from swe_gym.sandbox.objects import base_pack

        base = self.task.base_commit
        try:
            try:
                pack = base_pack(self.task.repo, None, base)
            except SandboxError:
                pack = base_pack(self.task.repo, local_repo(self.task.repo, self.repos_dir), base)
            return [str(d) for d in pack.chain], pack.sha
        except SandboxError:
            return image_objects(self.client, self.image, base)
