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
from collections.abc import Iterator
from typing import Any

from swe_gym.docker_daemon import is_connection_error
from swe_gym.errors import SandboxError


class DockerFiles:
    """``read_file``/``write_file`` for ``DockerSandbox`` (a mixin: it uses the sandbox's
    ``client``, ``container``, ``workdir``, ``_require`` and ``_container_gone``)."""

    client: Any
    container: Any
    workdir: str

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
            if st.get("mode", 0) & (1 << 27):  # Go's os.ModeSymlink
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
        except (ValueError, FileNotFoundError, IsADirectoryError, NotADirectoryError):
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

    def read_file(self, path: str) -> bytes:
        """The bytes of ``path`` (relative to ``workdir`` unless absolute); ValueError outside
        it, FileNotFoundError, IsADirectoryError (also for non-files), OSError otherwise."""
        p = self._resolve(path)
        with self._file_errors(path, "read"):
            st = self._stat(p)
            if st and st.get("mode", 0) & (1 << 31):  # Go's os.ModeDir: never tar a whole tree
                raise IsADirectoryError(f"{p} is a directory")
            stream, _ = self.client.api.get_archive(self.container.id, p)
            data = b"".join(stream)
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                member = tar.next()
                if member is None or not member.isfile():
                    kind = "a directory" if member and member.isdir() else "not a regular file"
                    raise IsADirectoryError(f"{p} is {kind}")
                f = tar.extractfile(member)
                return f.read() if f else b""

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
