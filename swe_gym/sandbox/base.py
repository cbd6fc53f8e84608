"""The sandbox protocol every backend implements, and its result type.

A sandbox holds one working copy of a task's repository at ``base_commit`` and a *persistent*
bash session in it (cwd and exported variables survive between commands). ``run`` never raises
on a failing, hanging or killed command: it returns a ``CommandResult``. It raises
``SandboxError`` only when the sandbox itself is unusable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

# Output cap per command, in characters (head and tail are kept, the cut is said).
DEFAULT_OUTPUT_LIMIT = 16_000
DEFAULT_COMMAND_TIMEOUT = 60.0


@dataclass
class CommandResult:
    output: str  # stdout and stderr merged, invalid UTF-8 replaced, capped
    exit_code: int | None  # None when the command timed out or the shell died
    timed_out: bool = False
    duration: float = 0.0
    truncated: bool = False  # the output was cut to the cap
    restarted: bool = False  # the shell died (exit, kill -9 $$, OOM) and a fresh one was started
    oom_killed: bool = False  # the kernel's OOM killer ended it (when the backend can tell)


@runtime_checkable
class Sandbox(Protocol):
    """What envs, grading and curation need from a backend."""

    workdir: str  # absolute path of the repository inside the sandbox

    def start(self) -> None: ...

    def run(self, command: str, timeout: float | None = None) -> CommandResult: ...

    def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        """ValueError for a path leaving ``workdir`` (``..``, elsewhere, a symlink out),
        FileNotFoundError, IsADirectoryError (also a FIFO or other non-file), OSError.
        ``FileTooLarge`` (an OSError) past ``max_bytes``, sized by the backend itself (never by
        a command in the agent's shell), reading at most about ``max_bytes`` into memory."""
        ...

    def path_kind(self, path: str) -> str | None:
        """``"file"``, ``"dir"``, ``"other"`` (FIFO, socket, device, broken symlink) or None
        (nothing there), told by the backend without running anything in the agent's shell;
        an in-tree symlink counts as its target. ValueError like ``read_file``."""
        ...

    def write_file(self, path: str, data: bytes | str) -> None:
        """Parents are created; the same errors as ``read_file``."""
        ...

    def diff(self) -> str:
        """``git diff`` of the working copy against ``base_commit``, new files included."""
        ...

    def close(self) -> None:
        """Idempotent; removes every process and file the sandbox made."""
        ...


def cap_output(text: str, limit: int = DEFAULT_OUTPUT_LIMIT) -> tuple[str, bool]:
    """Keep the head and the tail of ``text`` within ``limit`` characters and say what was cut."""
    if len(text) <= limit:
        return text, False
    half = limit // 2
    cut = len(text) - 2 * half
    return (
        f"{text[:half]}\n\n<output truncated: {cut} characters omitted from the middle>\n\n{text[-half:]}",
        True,
    )
