"""``LocalSandbox.fork(n)``: n started copies of a running local sandbox.

The parent's working copy (``testbed/``, and ``diffgit/``, the diff's private index) is copied
once while every process of the parent is stopped (SIGSTOP through the host's ``/proc``, its
pid namespace), then resumed: the copy is a consistent snapshot, and no agent process can swap a
directory for a symlink under the host-side ``cp`` (which runs as the caller, root included,
and would then copy whatever the link points at). The other children are copied from that
first copy, in which nothing runs yet. ``cp --reflink=auto`` shares extents where the
filesystem can (btrfs, XFS) and copies elsewhere (ext4, tmpfs); a hard-link farm is not used,
since an in-place write in one child would show in the others.

Each child is then a sandbox of its own, as ``start`` makes one: its private temp dir, its uid
when the host is root (so its process limit and files are its own), its shell, into which the
parent's shell state is replayed (``swe_gym.sandbox.fork``). Nothing of the parent's
processes or ``/tmp`` is carried. A failure closes every child made so far.
"""

from __future__ import annotations

import contextlib
import copy
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swe_gym.errors import SandboxError
from swe_gym.sandbox.fork import (
    capture_shell_state,
    check_fork_count,
    close_all,
    each,
    replay_into,
)

if TYPE_CHECKING:
    from swe_gym.sandbox.local import LocalSandbox

_COPIED = ("testbed", "diffgit")
_COPY_TIMEOUT = 600.0
_STOP_WAIT = 2.0  # seconds to wait for stopped processes to leave their system calls


def fork_local(parent: LocalSandbox, n: int) -> list[LocalSandbox]:
    """See the module docstring; ``n`` checked first (ValueError), a closed parent refused."""
    check_fork_count(n)
    session = parent._live_session()  # SandboxError when not started or closed
    assert parent.root is not None
    state = capture_shell_state(parent.run, parent.output_limit)
    children: list[LocalSandbox] = []
    try:
        for _ in range(n):
            child = _blank_copy(parent)
            child.root = Path(tempfile.mkdtemp(prefix="swe_gym_local_", dir=parent.tmp_dir))
            children.append(child)  # from here its close() removes its root
        first = children[0].root
        assert first is not None
        with _frozen(session.transport):
            _copy_tree(parent.root, first)
        each(lambda dst: _copy_tree(first, dst), [c.root for c in children[1:] if c.root])
        # In this thread: bwrap's --die-with-parent fires when the thread that started it
        # exits, so a pool's worker thread would take the child's shell with it.
        for child in children:
            child._launch()
            wmap = None if parent.sandboxed else (str(parent.root), str(child.root))
            replay_into([child], state, wmap)
    except BaseException:
        close_all(children)
        raise
    return children


def _blank_copy(parent: LocalSandbox) -> LocalSandbox:
    """A not-started sandbox with the parent's task and options (its pack and task
    environment are shared: both are read-only)."""
    from swe_gym.sandbox.mounts import SANDBOX_WORKDIR

    child = copy.copy(parent)
    child.root = child.host_workdir = child._uid = child._session = None
    child.workdir = SANDBOX_WORKDIR
    return child


def _copy_tree(src: Path, dst: Path) -> None:
    """``src/{testbed,diffgit}`` into ``dst``: modes, times and hard links kept, no link
    followed. Not owners (the child's uid is set after, or the caller owns every file) nor
    xattrs: a syscall or two less per file."""
    keep = "--preserve=mode,timestamps,links"
    argv = ["cp", "-R", "-P", keep, "--reflink=auto", *(str(src / d) for d in _COPIED), str(dst)]
    try:
        res = subprocess.run(argv, capture_output=True, timeout=_COPY_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise SandboxError(
            f"copying the working copy to fork took over {_COPY_TIMEOUT:g} s"
        ) from None
    if res.returncode != 0:
        err = res.stderr.decode("utf-8", "replace").strip()[-2000:]
        raise SandboxError(f"could not copy the working copy to fork: {err}")
    (dst / "tmp" / "home").mkdir(parents=True, exist_ok=True)


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0].decode()
    except (OSError, IndexError):
        return None


@contextlib.contextmanager
def _frozen(transport: Any) -> Iterator[None]:
    """Every process of the sandbox stopped inside the block, resumed after (those the agent
    had stopped itself stay stopped). Scanned until a pass finds nothing new: a stopped
    process cannot fork, so the set closes."""
    remaining = getattr(transport, "remaining", None)
    if remaining is None:
        raise SandboxError("the sandbox's shell has no process list; cannot freeze it to fork")
    ours: list[int] = []
    seen: set[int] = set()
    try:
        for _ in range(100):
            fresh = [p for p in remaining() if p not in seen]
            if not fresh:
                break
            for pid in fresh:
                seen.add(pid)
                if _state(pid) in ("T", "t", None):
                    continue
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGSTOP)
                    ours.append(pid)
        deadline = time.monotonic() + _STOP_WAIT
        while time.monotonic() < deadline and any(_state(p) not in ("T", "t", None) for p in ours):
            time.sleep(0.002)
        yield
    finally:
        for pid in ours:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGCONT)


__all__ = ["fork_local"]
