"""The docker backend's shell transport: a ``docker exec`` socket with stdin open and no TTY."""

from __future__ import annotations

import select
import socket
import struct
import time
from typing import Any


class DockerExecTransport:
    """``swe_gym.sandbox.transport.ShellTransport`` over a ``docker exec`` socket (stdin open, no TTY).

    ``read`` merges the stdout and stderr frames (8-byte header: stream id, 3 zero bytes,
    big-endian payload length). The exec'd bash is a session leader in the container's pid
    namespace; its pid is read from the first line it prints, so ``close`` can kill what it
    started. Killing uses a second exec (``/proc/*/stat`` -> ``select_victims`` -> ``kill``).
    """

    def __init__(self, api: Any, container_id: str, workdir: str, closing: Any = None):
        self.api = api
        self.container_id = container_id
        self._closing = closing or (lambda: False)  # the sandbox is removing the container
        self.exec_id = api.exec_create(
            container_id,
            ["bash", "-c", "echo $$; exec bash --noprofile --norc"],
            stdin=True,
            stdout=True,
            stderr=True,
            tty=False,
            workdir=workdir,
        )["Id"]
        sock = api.exec_start(self.exec_id, socket=True)
        # docker-py wraps the socket in SocketIO for unix sockets (``_sock``), or returns it raw.
        self._sock: socket.socket = getattr(sock, "_sock", sock)
        self._keep = sock  # the wrapper owns the fd's lifetime
        self._buf = b""
        self._out = b""
        self._eof = False
        self._closed = False
        self.pid = self._read_pid()

    def _read_pid(self) -> int | None:
        deadline = time.monotonic() + 15
        while b"\n" not in self._out and time.monotonic() < deadline:
            chunk = self._read_frames(0.25)
            if chunk is None:
                break
            self._out += chunk
        line, sep, rest = self._out.partition(b"\n")
        if not sep or not line.strip().isdigit():
            return None
        self._out = rest
        return int(line)

    def write(self, data: bytes) -> None:
        self._sock.sendall(data)  # OSError when the exec is gone, as the protocol wants

    def read(self, timeout: float) -> bytes | None:
        if self._out:
            out, self._out = self._out, b""
            return out
        return self._read_frames(timeout)

    def _read_frames(self, timeout: float) -> bytes | None:
        out = self._drain()
        if out:
            return out
        if self._eof:
            return None
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            try:
                ready, _, _ = select.select(
                    [self._sock], [], [], max(0.0, deadline - time.monotonic())
                )
            except (OSError, ValueError):  # closed under us
                self._eof = True
                return None
            if not ready:
                return b""
            try:
                chunk = self._sock.recv(1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                self._eof = True
                return self._drain() or None
            self._buf += chunk
            out = self._drain()
            if out:
                return out
            if time.monotonic() >= deadline:
                return b""

    def _drain(self) -> bytes:
        parts = []
        buf = self._buf
        while len(buf) >= 8:
            (size,) = struct.unpack(">L", buf[4:8])
            if len(buf) < 8 + size:
                break
            parts.append(buf[8 : 8 + size])
            buf = buf[8 + size :]
        self._buf = buf
        return b"".join(parts)

    def alive(self) -> bool:
        return not self._eof and not self._closed

    def _exec(self, cmd: list[str]) -> tuple[int | None, bytes]:
        try:
            ex = self.api.exec_create(self.container_id, cmd, stdout=True, stderr=True)
            out = self.api.exec_start(ex["Id"])
            return self.api.exec_inspect(ex["Id"]).get("ExitCode"), out
        except Exception:
            return None, b""  # the container is gone or at its pids limit

    def kill_command(self, shell_pid: int, keep_pgids: set[int]) -> int:
        from swe_gym.sandbox.transport import parse_proc_stat, select_victims

        rc, out = self._exec(["sh", "-c", "cat /proc/[0-9]*/stat 2>/dev/null"])
        if rc is None:
            return 0
        groups, pids = select_victims(
            parse_proc_stat(out.decode(errors="replace")), shell_pid, keep_pgids
        )
        targets = [f"-{g}" for g in groups] + [str(p) for p in pids]
        if targets:
            self._exec(["kill", "-KILL", "--", *targets])
        return len(targets)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.pid and not self._eof and not self._closing():
            # The shell may be spinning (a timed-out `while :; do :; done`): end it and its
            # session, or it would keep burning the container's CPU after a restart.
            self.kill_command(self.pid, set())
            self._exec(["kill", "-KILL", str(self.pid)])
        for f in (
            lambda: self._sock.shutdown(socket.SHUT_RDWR),
            self._sock.close,
            self._keep.close,
        ):
            try:
                f()
            except OSError:
                pass


__all__ = ["DockerExecTransport"]
