"""The trusted side of the diff: the agent's working copy as inert bytes, git run by the host.

Docker: the agent is root in its container and owns every binary there (``/usr/bin/git``
included), so nothing runs in it to take the diff. The daemon streams ``/testbed`` as a tar
archive (``extract_archive``): members are written into a private host folder as data, each
path created from directory fds without following links (``..``, absolute names and members
under a symlink are skipped, as are devices and FIFOs; ``.git`` at the top is left out), with
the total size capped (``workspace_too_large``) and a deadline, in one pass (memory does not
grow with the archive). Host git then diffs that folder (``gitdiff.DIFF_SCRIPT``) against the
base commit's objects. Local: the diff process reads the working copy through a read-only
bind in a fresh bubblewrap process.

``run_bounded`` runs the diff process with the caller's deadline (``diff_timed_out``) and
reads at most ``max_bytes`` of its output (``patch_too_large``): both become ``DiffError``.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import signal
import subprocess
import tarfile
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from swe_gym.errors import DiffError, SandboxError

MAX_PATCH_BYTES = 64 * 2**20  # a diff past this is no reviewable patch (SWE-bench's are KB)
MAX_TREE_BYTES = 8 * 2**30  # bytes of regular files copied out of a container
DIFF_TIMEOUT = 300.0
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def run_bounded(argv: list[str], env: dict[str, str], *, timeout: float, max_bytes: int) -> bytes:
    """stdout of ``argv`` (cwd ``/``); DiffError past ``timeout`` or ``max_bytes``,
    SandboxError on a non-zero exit (with the end of stderr)."""
    p = subprocess.Popen(
        argv, env=env, cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    out: list[bytes] = []
    err = bytearray()
    over = threading.Event()

    def pump_out() -> None:
        n = 0
        while chunk := p.stdout.read1(1 << 20):  # type: ignore[union-attr]
            n += len(chunk)
            if n > max_bytes:
                over.set()
                _kill(p)
                break
            out.append(chunk)

    def pump_err() -> None:
        while chunk := p.stderr.read1(1 << 16):  # type: ignore[union-attr]
            err.extend(chunk)
            del err[: max(0, len(err) - 8192)]

    threads = [threading.Thread(target=f, daemon=True) for f in (pump_out, pump_err)]
    for t in threads:
        t.start()
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(p)
        p.wait()
        raise DiffError("diff_timed_out", f"taking the diff took over {timeout:g} s") from None
    finally:
        for t in threads:
            t.join(timeout=10)
        p.stdout.close()  # type: ignore[union-attr]
        p.stderr.close()  # type: ignore[union-attr]
    if over.is_set():
        raise DiffError(
            "patch_too_large",
            f"the diff is over {max_bytes} bytes (large or generated files in the working copy?); "
            "remove them before submitting",
        )
    if p.returncode != 0:
        msg = err.decode("utf-8", "replace").strip()[-2000:]
        raise SandboxError(f"git diff failed (exit {p.returncode}): {msg}")
    return b"".join(out)


def _kill(p: subprocess.Popen) -> None:
    with contextlib.suppress(OSError):
        os.killpg(p.pid, signal.SIGKILL)


class _Stream(io.RawIOBase):
    """The archive's chunks as a file, with the deadline checked on every read."""

    def __init__(self, chunks: Iterable[bytes], deadline: float):
        self._it: Iterator[bytes] = iter(chunks)
        self._buf = b""
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # noqa: ANN001 - io's buffer protocol
        if time.monotonic() > self._deadline:
            raise DiffError("diff_timed_out", "copying the working copy out took too long")
        if not self._buf:
            self._buf = next(self._it, b"")
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


def extract_archive(
    chunks: Iterable[bytes], dest: str, *, max_bytes: int = MAX_TREE_BYTES, deadline: float
) -> int:
    """Write the members of a ``get_archive`` stream of one folder into ``dest`` (which must
    exist, empty), its top folder stripped. Returns the bytes of file data written."""
    total = 0
    root = os.open(dest, _DIR)
    stream = io.BufferedReader(_Stream(chunks, deadline), 1 << 20)
    try:
        with tarfile.open(fileobj=stream, mode="r|", errorlevel=0) as tar:
            for m in tar:
                parts = _member_parts(m.name)
                if parts is None:
                    continue
                if m.isfile():
                    total += m.size
                    if total > max_bytes:
                        raise DiffError(
                            "workspace_too_large",
                            f"the working copy holds over {max_bytes} bytes of files",
                        )
                _extract(tar, m, root, parts)
    except tarfile.ReadError as e:
        raise SandboxError(f"the working copy's archive is unreadable: {e}") from None
    finally:
        os.close(root)
    return total


def _member_parts(name: str) -> list[str] | None:
    """A member's path below the archive's top folder, or None to skip it: empty, absolute,
    climbing with ``..``, or inside the agent's ``.git`` (repository metadata is never read)."""
    parts = [p for p in name.split("/")[1:] if p not in ("", ".")]
    if not parts or ".." in parts or name.startswith("/") or parts[0] == ".git":
        return None
    return parts


@contextlib.contextmanager
def _parent(root: int, dirs: list[str], create: bool) -> Iterator[int | None]:
    """The fd of ``root/dirs...``, each folder opened from the one before without following a
    link (made when ``create``); None when a link or a file is on the way (or, not creating,
    anything is missing). The fds opened are closed after."""
    fds: list[int] = []
    cur: int | None = root
    try:
        for name in dirs:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=cur)
            try:
                cur = os.open(name, _DIR, dir_fd=cur)
            except OSError as e:
                if create and e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                cur = None
                break
            fds.append(cur)
        yield cur
    finally:
        for fd in fds:
            os.close(fd)


def _extract(tar: tarfile.TarFile, m: tarfile.TarInfo, root: int, parts: list[str]) -> None:
    """One member, its parents opened from ``root`` without following links (a member
    under a symlink is skipped)."""
    with _parent(root, parts[:-1], create=True) as cur:
        name = parts[-1]
        if cur is None:
            return
        if m.isdir():
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=cur)
        elif m.issym():
            _unlink(name, cur)
            os.symlink(m.linkname, name, dir_fd=cur)
        elif m.isfile():
            _write_new(name, cur, 0o755 if m.mode & 0o111 else 0o644, tar.extractfile(m))
        elif m.islnk():  # a hard link: its target was written before; copy it
            link = _member_parts(m.linkname)
            if link is None:
                return
            with _parent(root, link[:-1], create=False) as src_dir:
                try:
                    src = (
                        None
                        if src_dir is None
                        else os.open(link[-1], os.O_RDONLY | os.O_NOFOLLOW, dir_fd=src_dir)
                    )
                except OSError:
                    src = None
            if src is not None:
                with os.fdopen(src, "rb") as f:
                    _write_new(name, cur, 0o644, f)
        # devices, FIFOs: no content a patch can hold


def _unlink(name: str, dir_fd: int) -> None:
    with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
        os.unlink(name, dir_fd=dir_fd)


def _write_new(name: str, dir_fd: int, mode: int, src: Any) -> None:
    """``name`` in ``dir_fd`` as a new regular file (never through a link) with ``src``'s bytes."""
    _unlink(name, dir_fd)
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=dir_fd)
    with os.fdopen(fd, "wb") as f:
        while src is not None and (chunk := src.read(1 << 20)):
            f.write(chunk)
