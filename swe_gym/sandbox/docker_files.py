"""The docker backend's file operations: the archive API, confined to ``workdir``.

The daemon resolves archive paths inside the container's root file system (never the host's),
so a symlink swapped in by a racing command can at worst point at another file *of the
container*, which the agent (root there) can reach anyway. What this module adds: paths that
leave ``workdir`` (``..``, absolute paths, symlinks) are refused with ValueError, and every
refusal of the daemon becomes one of the editor's error types (FileNotFoundError,
IsADirectoryError, OSError) without the daemon's message, which names host paths.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import posixpath
import tarfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from swe_gym.docker_daemon import is_connection_error
from swe_gym.errors import FileTooLarge, SandboxError

# Go's os.FileMode type bits, as the daemon's stat header reports ``mode``.
_MODE_DIR = 1 << 31
_MODE_SYMLINK = 1 << 27
# symlink, device, named pipe, socket, char device, irregular: anything but a plain file or dir
_MODE_TYPE = _MODE_SYMLINK | 1 << 26 | 1 << 25 | 1 << 24 | 1 << 21 | 1 << 19
_CHUNK = 1 << 16
# Tar framing around one file: its 512-byte header, a PAX header for a long name or big size
# (names are at most 4096 bytes), the padding and the two closing blocks.
_TAR_SLACK = 64 * 1024


def _check_size(st: dict[str, Any] | None, max_bytes: int | None, p: str) -> None:
    if max_bytes is not None and st and int(st.get("size") or 0) > max_bytes:
        if not st.get("mode", 0) & _MODE_TYPE:  # a link's size is its target's name length
            raise FileTooLarge(int(st["size"]), max_bytes, p)


class _Capped(io.RawIOBase):
    """The archive stream as a file for ``tarfile``'s "r|" mode, refusing to read on past
    ``cap`` bytes (so a lie anywhere cannot make us buffer more than that)."""

    def __init__(self, chunks: Iterator[bytes], cap: int | None, on_over: Callable[[int], None]):
        self._chunks, self._cap, self._on_over = chunks, cap, on_over
        self._buf = memoryview(b"")  # a view: handing out a chunk in pieces copies nothing
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._buf:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self.count += len(chunk)
            if self._cap is not None and self.count > self._cap:
                self._on_over(self.count)
            self._buf = memoryview(chunk)
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


def _first_file(chunks: Iterator[bytes], max_bytes: int | None, p: str) -> bytes:
    """The content of the archive's first member, which must be a regular file."""

    def over(seen: int) -> None:
        raise FileTooLarge(max(seen - _TAR_SLACK, (max_bytes or 0) + 1), max_bytes or 0, p)

    raw = _Capped(chunks, None if max_bytes is None else max_bytes + _TAR_SLACK, over)
    with tarfile.open(fileobj=raw, mode="r|") as tar:
        member = tar.next()
        if member is None or not member.isfile():
            kind = "a directory" if member and member.isdir() else "not a regular file"
            raise IsADirectoryError(f"{p} is {kind}")
        if max_bytes is not None and member.size > max_bytes:
            raise FileTooLarge(member.size, max_bytes, p)
        f = tar.extractfile(member)
        return f.read(member.size) if f else b""


class DockerFiles:
    """``read_file``/``write_file`` for ``DockerSandbox`` (a mixin: it uses the sandbox's
    ``client``, ``container``, ``workdir``, ``_require`` and ``_container_gone``)."""

    client: Any
    container: Any
    workdir: str

    # the sandbox's own (DockerSandbox): declared here for the methods below
    def _require(self) -> None:
        raise NotImplementedError

    def _container_gone(self, cause: object) -> SandboxError:
        raise NotImplementedError

    def _abs(self, path: str) -> str:
        """``path`` inside the workspace as an absolute path; ValueError if it leaves it
        (``..``, an absolute path elsewhere, or a symlink pointing out)."""
        p = posixpath.normpath(path if path.startswith("/") else posixpath.join(self.workdir, path))
        if not self._inside(p):
            raise ValueError(f"path {path!r} is outside the workspace {self.workdir}")
        # A symlinked component could point out: resolve it in the container when there is one.
        rel = posixpath.relpath(p, self.workdir)
        cur = self.workdir
        for part in [] if rel == "." else rel.split("/"):
            cur = posixpath.join(cur, part)
            st = self._stat(cur)
            if st is None:
                break  # does not exist (yet): nothing further can be a symlink
            if st.get("mode", 0) & _MODE_SYMLINK:
                r = self.container.exec_run(["realpath", "-m", "--", p])
                real = r.output.decode(errors="replace").strip()
                if r.exit_code != 0 or not self._inside(real):
                    raise ValueError(f"path {path!r} is outside the workspace {self.workdir}")
                return real
        return p

    def _inside(self, p: str) -> bool:
        return p == self.workdir or p.startswith(self.workdir.rstrip("/") + "/")

    def _resolve(self, path: str) -> str:
        """The absolute in-container path; ValueError outside ``workdir``, SandboxError if gone."""
        self._require()
        try:
            return self._abs(path)
        except ValueError:
            raise
        except Exception as e:
            raise self._container_gone(e) from None

    @contextlib.contextmanager
    def _file_errors(self, path: str, verb: str) -> Iterator[None]:
        """The editor's error types for what the daemon says about a path. The archive API
        resolves paths in the container's root (never the host's), but a command racing the
        call (a symlink swapped in a loop) makes it fail in many ways; none may pass as the
        container being gone, and the daemon's messages (which name host paths) stay out."""
        try:
            yield
        except (
            ValueError,
            FileNotFoundError,
            IsADirectoryError,
            NotADirectoryError,
            FileTooLarge,
        ):
            raise
        except SandboxError:
            raise
        except Exception as e:
            import docker.errors

            if isinstance(e, docker.errors.NotFound) and "no such container" not in str(e).lower():
                raise FileNotFoundError(f"{path} does not exist in the sandbox") from None
            if not is_connection_error(e) and self._running():
                raise OSError(
                    f"cannot {verb} {path!r} in the sandbox: a file, a dangling symlink or a "
                    "special file is on the way, or it changed meanwhile"
                ) from None
            raise self._container_gone(e) from None

    def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        """The bytes of ``path`` (relative to ``workdir`` unless absolute); ValueError outside
        it, FileNotFoundError, IsADirectoryError (also for non-files), FileTooLarge past
        ``max_bytes`` (sized by the daemon, never by the agent's shell), OSError otherwise."""
        p = self._resolve(path)
        with self._file_errors(path, "read"):
            st = self._stat(p)
            if st and st.get("mode", 0) & _MODE_DIR:  # never tar a whole tree
                raise IsADirectoryError(f"{p} is a directory")
            _check_size(st, max_bytes, p)
            api = self.client.api
            res = api._get(
                api._url("/containers/{0}/archive", self.container.id),
                params={"path": p},
                stream=True,
                headers={"Accept-Encoding": "identity"},
            )
            try:  # closed on every way out: a refused read also stops the daemon's stream
                api._raise_for_status(res)
                header = res.headers.get("X-Docker-Container-Path-Stat")
                # The archive's own stat: the file may have been swapped since _stat.
                _check_size(json.loads(base64.b64decode(header)) if header else None, max_bytes, p)
                return _first_file(res.iter_content(_CHUNK), max_bytes, p)
            finally:
                res.close()

    def path_kind(self, path: str) -> str | None:
        """``"file"``, ``"dir"``, ``"other"`` (a FIFO, socket, device, broken symlink) or None
        (nothing there), from the daemon's stat: no command runs in the agent's shell, whose
        ``stat``/``[`` it may have redefined. An in-tree symlink counts as its target (``_abs``);
        ValueError for a path or link leaving ``workdir``. A symlink loop is None: the daemon
        resolves links for its stat and fails on a loop."""
        p = self._resolve(path)
        with self._file_errors(path, "inspect"):
            st = self._stat(p)
            if st is None:
                # Missing; or ``_abs`` followed a symlink whose target is missing (a broken link).
                plain = posixpath.normpath(posixpath.join(self.workdir, path))
                return "other" if plain != p and self._stat(plain) is not None else None
            mode = st.get("mode", 0)
            if mode & _MODE_DIR:
                return "dir"
            return "other" if mode & _MODE_TYPE else "file"

    def _stat(self, p: str) -> dict[str, Any] | None:
        res = self.client.api.head(
            self.client.api._url("/containers/{0}/archive", self.container.id), params={"path": p}
        )
        if res.status_code != 200:
            return None
        header = res.headers.get("X-Docker-Container-Path-Stat")
        return json.loads(base64.b64decode(header)) if header else None

    def write_file(self, path: str, data: bytes | str) -> None:
        """Write ``path`` (parents created; an existing file keeps its mode)."""
        import docker.errors

        p = self._resolve(path)
        raw = data.encode() if isinstance(data, str) else bytes(data)
        parent, name = posixpath.split(p)
        with self._file_errors(path, "write"):
            st = self._stat(p)
            mode = (st["mode"] & 0o7777) if st and st.get("mode") is not None else 0o644
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tar:
                info = tarfile.TarInfo(name)
                info.size = len(raw)
                info.mode = mode
                info.mtime = int(time.time())
                tar.addfile(info, io.BytesIO(raw))
            try:
                ok = self.client.api.put_archive(self.container.id, parent, buf.getvalue())
            except docker.errors.NotFound as e:
                if "no such container" in str(e).lower() or not self._mkdir(parent):
                    raise
                ok = self.client.api.put_archive(self.container.id, parent, buf.getvalue())
            if not ok:
                raise OSError(f"writing {p} failed")

    def _running(self) -> bool:
        try:
            self.container.reload()
            return bool(self.container.attrs.get("State", {}).get("Running"))
        except Exception:
            return False

    def _mkdir(self, path: str) -> bool:
        try:
            return self.container.exec_run(["mkdir", "-p", "--", path]).exit_code == 0
        except Exception:
            return False


__all__ = ["DockerFiles"]
