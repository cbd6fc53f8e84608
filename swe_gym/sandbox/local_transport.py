"""The local sandbox's shell as a host subprocess (bwrap, or a bare bash when unsandboxed), and
how its processes are found and killed (by pid namespace, through the host's ``/proc``)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import time

from swe_gym.errors import SandboxError, SandboxUnavailable
from swe_gym.sandbox.transport import ProcInfo, select_victims


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


__all__ = ["LocalTransport"]
