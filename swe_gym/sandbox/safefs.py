"""Read and write files of a working copy from the host without leaving it.

The agent controls every name under the working copy and may swap a directory for a symlink
at any moment (``renameat2(RENAME_EXCHANGE)`` in a loop), so "resolve the path, then open it"
is a race the agent wins. Here each component is opened relative to the directory opened
before it with ``O_NOFOLLOW``: the kernel never follows a link. A symlink met on the way is
read and resolved by this code against the working copy's root (an absolute target must lie
under the sandbox's workdir, ``..`` never climbs above the root), like ``openat2`` with
``RESOLVE_IN_ROOT``. Files are opened non-blocking and must be regular (a FIFO cannot hang
the host). Created files and directories are handed to the sandbox's uid.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import stat

from swe_gym.errors import FileTooLarge

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_LINKS = 40  # as the kernel's limit on symlinks in one lookup


class _Walk:
    """An open chain of directory fds from the root to the current directory."""

    def __init__(self, root: str, workdir: str, shown: str, uid: int | None):
        self.workdir, self.shown, self.uid = workdir, shown, uid
        self.stack = [os.open(root, _DIR_FLAGS)]
        self.links = 0

    def close(self) -> None:
        for fd in self.stack:
            os.close(fd)
        self.stack = []

    def outside(self) -> ValueError:
        return ValueError(
            f"path {self.shown!r} resolves outside the workspace {self.workdir} (through '..' "
            "or a symlink); only files inside it can be read or written"
        )

    def follow(self, name: str, todo: list[str]) -> None:
        """Replace symlink ``name`` (in the current directory) by its target's components;
        when it is no longer a symlink (swapped meanwhile), put ``name`` back to retry."""
        self.links += 1
        if self.links > MAX_LINKS:
            raise OSError(errno.ELOOP, f"too many levels of symbolic links in {self.shown!r}")
        try:
            target = os.readlink(name, dir_fd=self.stack[-1])
        except OSError as e:
            if e.errno not in (errno.EINVAL, errno.ENOENT):
                raise
            todo.insert(0, name)
            return
        if target.startswith("/"):
            rel = posixpath.relpath(posixpath.normpath(target), self.workdir)
            if rel == ".." or rel.startswith("../"):
                raise self.outside()
            while len(self.stack) > 1:
                os.close(self.stack.pop())
            target = rel
        todo[:0] = [p for p in target.split("/") if p not in ("", ".")]

    def descend(self, todo: list[str], create: bool) -> str:
        """Walk all components but the last; return the last (a plain name)."""
        while todo:
            part = todo.pop(0)
            if part == "..":
                if len(self.stack) == 1:
                    raise self.outside()
                os.close(self.stack.pop())
                continue
            if not todo:
                return part
            try:
                fd = os.open(part, _DIR_FLAGS, dir_fd=self.stack[-1])
            except FileNotFoundError:
                if not create:
                    raise FileNotFoundError(
                        f"no such file in the sandbox: {self.shown!r}"
                    ) from None
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=self.stack[-1])
                    if self.uid is not None:
                        os.chown(
                            part, self.uid, self.uid, dir_fd=self.stack[-1], follow_symlinks=False
                        )
                todo.insert(0, part)
                continue
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                try:
                    st = os.stat(part, dir_fd=self.stack[-1], follow_symlinks=False)
                except FileNotFoundError:
                    st = None
                if st is None or stat.S_ISLNK(st.st_mode) or stat.S_ISDIR(st.st_mode):
                    self.follow(part, todo)  # a link, or swapped meanwhile: resolve or retry
                    continue
                raise NotADirectoryError(
                    f"{self.shown!r}: {part!r} on the way is a file, not a directory"
                ) from None
            self.stack.append(fd)
        return "."


def _split(path: str, workdir: str) -> list[str]:
    p = str(path)
    if p.startswith("/"):
        rel = posixpath.relpath(posixpath.normpath(p), workdir)
        if rel == ".." or rel.startswith("../"):
            raise ValueError(
                f"path {path!r} is outside the workspace {workdir}; pass a path relative to "
                "it or an absolute path inside it"
            )
        p = rel
    return [c for c in p.split("/") if c not in ("", ".")]


def _open_final(walk: _Walk, todo: list[str], flags: int, create: bool) -> tuple[int, bool]:
    """Open the last component (following in-tree symlinks); returns (fd, created)."""
    while True:
        name = walk.descend(todo, create)
        if name == ".":
            raise IsADirectoryError(f"{walk.shown!r} is a directory, not a file")
        base = flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            if create:
                try:
                    return os.open(
                        name, base | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=walk.stack[-1]
                    ), True
                except FileExistsError:
                    pass
            return os.open(name, base, dir_fd=walk.stack[-1]), False
        except FileNotFoundError:
            raise FileNotFoundError(f"no such file in the sandbox: {walk.shown!r}") from None
        except IsADirectoryError:
            raise IsADirectoryError(f"{walk.shown!r} is a directory, not a file") from None
        except OSError as e:
            if e.errno != errno.ELOOP:
                if e.errno == errno.ENXIO:  # a FIFO with no reader
                    raise IsADirectoryError(f"{walk.shown!r} is not a regular file") from None
                raise
            walk.follow(name, todo)


def _regular(fd: int, shown: str) -> os.stat_result:
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(f"{shown!r} is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise IsADirectoryError(f"{shown!r} is not a regular file")
    return st


def read_in_tree(root: str, workdir: str, path: str, max_bytes: int | None = None) -> bytes:
    """The bytes of ``path`` (relative to ``workdir`` or absolute inside it) under host dir
    ``root``. ValueError outside, FileNotFoundError, IsADirectoryError (also for non-files),
    FileTooLarge past ``max_bytes`` (the size of the fd we opened, not the agent's word)."""
    todo = _split(path, workdir)
    walk = _Walk(root, workdir, path, None)
    try:
        fd, _ = _open_final(walk, todo, os.O_RDONLY, create=False)
        with os.fdopen(fd, "rb") as f:
            st = _regular(f.fileno(), path)
            if max_bytes is None:
                return f.read()
            if st.st_size > max_bytes:
                raise FileTooLarge(st.st_size, max_bytes, path)
            # The agent may grow the file after the fstat: never read past the cap.
            data = f.read(max_bytes + 1)
            if len(data) > max_bytes:
                raise FileTooLarge(max(os.fstat(f.fileno()).st_size, len(data)), max_bytes, path)
            return data
    finally:
        walk.close()


def kind_in_tree(root: str, workdir: str, path: str) -> str | None:
    """What is at ``path``: ``"file"``, ``"dir"``, ``"other"`` (a FIFO, a socket, a device, a
    broken or looping symlink) or None (nothing). In-tree symlinks count as their target;
    ValueError for a path or link leaving the tree. Nothing is opened but directories (an open
    FIFO would block), and nothing runs in the agent's shell (whose answers it controls)."""
    todo = _split(path, workdir)
    walk = _Walk(root, workdir, path, None)
    via_link = False  # the last component was a symlink: a missing target makes it "broken"
    try:
        while True:
            try:
                name = walk.descend(todo, create=False)
                if name == ".":
                    return "dir"
                st = os.stat(name, dir_fd=walk.stack[-1], follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    via_link = True
                    walk.follow(name, todo)
                    continue
            except (FileNotFoundError, NotADirectoryError):
                return "other" if via_link else None
            except OSError as e:
                if e.errno != errno.ELOOP:
                    raise
                return "other"  # a symlink loop: there is no file to open
            if stat.S_ISDIR(st.st_mode):
                return "dir"
            return "file" if stat.S_ISREG(st.st_mode) else "other"
    finally:
        walk.close()


def write_in_tree(root: str, workdir: str, path: str, data: bytes, uid: int | None) -> None:
    """Write ``data`` to ``path`` under ``root`` (parents made), created entries owned by
    ``uid`` when given. An existing file keeps its mode."""
    todo = _split(path, workdir)
    walk = _Walk(root, workdir, path, uid)
    try:
        fd, created = _open_final(walk, todo, os.O_WRONLY, create=True)
        with os.fdopen(fd, "wb") as f:
            _regular(f.fileno(), path)
            if created and uid is not None:
                os.fchown(f.fileno(), uid, uid)
            os.ftruncate(f.fileno(), 0)
            f.write(data)
    finally:
        walk.close()


def force_rmtree(root: os.PathLike | str) -> None:
    """Remove a sandbox's tree, making directories writable again where a command chmod-ed
    them (``shutil.rmtree`` follows no link)."""
    import shutil

    def retry(func, path, exc_info) -> None:  # noqa: ANN001 - shutil.rmtree's onerror
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(path), 0o700)
            os.chmod(path, 0o700)
        with contextlib.suppress(OSError):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)

    shutil.rmtree(root, onerror=retry)


__all__ = ["force_rmtree", "kind_in_tree", "read_in_tree", "write_in_tree"]
