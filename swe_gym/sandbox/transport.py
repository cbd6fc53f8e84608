"""What a backend gives the shell session: a running bash (``ShellTransport``), and the processes
it kills when a command times out (``select_victims`` over ``/proc/<pid>/stat``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ProcInfo:
    """One process as ``/proc/<pid>/stat`` shows it (all numbers in one pid namespace)."""

    pid: int
    pgid: int
    sid: int


class ShellTransport(Protocol):
    """A running ``bash`` reading commands on stdin, stdout and stderr merged on one stream."""

    def write(self, data: bytes) -> None:
        """Write all of ``data`` to the shell's stdin; raise ``OSError`` if the shell is gone."""
        ...

    def read(self, timeout: float) -> bytes | None:
        """Bytes available within ``timeout`` s: ``b""`` if none yet, ``None`` at end of stream."""
        ...

    def alive(self) -> bool:
        """Whether the shell process is still running."""
        ...

    def kill_command(self, shell_pid: int, keep_pgids: set[int]) -> int:
        """SIGKILL every process in the shell's session (``sid == shell_pid``) except the shell
        and the process groups in ``keep_pgids`` (pids as the shell sees them, ``$$``); return
        how many targets were signalled. ``select_victims`` does the selection."""
        ...

    def close(self) -> None:
        """Kill the shell and everything it started; idempotent."""
        ...


def parse_proc_stat(text: str) -> list[ProcInfo]:
    """Parse concatenated ``/proc/<pid>/stat`` lines (e.g. ``cat /proc/[0-9]*/stat`` in a
    container). The command name may hold spaces and parentheses: fields follow the last ')'."""
    out = []
    for line in text.splitlines():
        head, sep, rest = line.rpartition(")")
        if not sep:
            continue
        pid_s = head.split("(", 1)[0].strip()
        fields = rest.split()
        # rest: state ppid pgrp session ...
        if len(fields) < 4 or not pid_s.isdigit():
            continue
        out.append(ProcInfo(int(pid_s), int(fields[2]), int(fields[3])))
    return out


def select_victims(
    procs: Iterable[ProcInfo], shell_pid: int, keep_pgids: set[int]
) -> tuple[list[int], list[int]]:
    """What to SIGKILL after a timeout: ``(process groups, single pids)``.

    Every process of the shell's session except the shell, minus the kept (pre-existing
    background) groups. Processes sharing the shell's own group (job control switched off by
    the command) are killed one by one, since killing the group would kill the shell."""
    groups: set[int] = set()
    pids: list[int] = []
    for p in procs:
        if p.sid != shell_pid or p.pid == shell_pid or p.pgid in keep_pgids:
            continue
        if p.pgid == shell_pid:
            pids.append(p.pid)
        else:
            groups.add(p.pgid)
    return sorted(groups), sorted(pids)
