"""A persistent bash session driven over a byte stream, shared by every sandbox backend.

The backend supplies a *transport* (``ShellTransport``): a running ``bash`` whose stdin we write
and whose merged stdout/stderr we read, plus a way to kill processes. ``ShellSession`` does the
rest, the same way for a local bubblewrap process and for a ``docker exec`` socket:

* Each command is sent as ONE line, ``eval $'<command, ANSI-C quoted>' </dev/null``, run in the
  main shell (not a subshell), so ``cd`` and ``export`` persist. Quoting it means an unbalanced
  quote or a heredoc in the command cannot eat the protocol; a syntax error is just exit code 2.
* The shell runs with job control (``set -m``), so every pipeline a command starts gets its own
  process group; the shell is the session leader. After the command, the shell prints a random
  per-command sentinel with the exit code and ``$PWD``, then ``jobs -p`` (the process groups of
  background jobs still known to the shell) and an end marker.
* On timeout the transport kills every process group in the shell's session except the shell's
  own and the background jobs that existed before the command (``select_victims``); the shell
  then reaps the job and prints the sentinel, so cwd and variables survive. If the command was
  running *inside* the shell (``while :; do :; done``, ``exec sleep 99``) no sentinel comes; the
  shell is replaced by a fresh one in the last known cwd (``restarted=True``).
* If the shell itself dies (``exit``, ``kill -9 $$``, ``set -e`` then a failure), a fresh shell
  is started in the workdir and the result says so (``restarted=True``).
* Output is read incrementally into a bounded buffer (head and tail kept, the cut said), so an
  endless ``yes`` never holds more than a few times ``output_limit`` bytes.
* Every command's stdin is ``/dev/null`` and the environment disables pagers and editors, so
  interactive programs exit instead of hanging; ``swe_gym.sandbox.interactive`` lets the env
  refuse known interactive programs with a useful message before running them.

A backend writes a transport (``swe_gym.sandbox.transport.ShellTransport``: ``read``/``write``/
``alive``/``kill_command``/``close``) and a ``spawn()`` callable that starts a fresh shell; see
``swe_gym.sandbox.local_transport.LocalTransport``.
"""

from __future__ import annotations

import re
import secrets
import shlex
import time
from collections.abc import Callable, Mapping

from swe_gym.errors import SandboxError
from swe_gym.sandbox.base import DEFAULT_COMMAND_TIMEOUT, DEFAULT_OUTPUT_LIMIT, CommandResult
from swe_gym.sandbox.transport import ShellTransport

# Environment that keeps programs from waiting for a human (pagers, editors, prompts).
NONINTERACTIVE_ENV: dict[str, str] = {
    "TERM": "dumb",
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "MANPAGER": "cat",
    "SYSTEMD_PAGER": "",
    "LESS": "-R",
    "EDITOR": "true",
    "VISUAL": "true",
    "GIT_EDITOR": "true",
    "GIT_TERMINAL_PROMPT": "0",
    "PIP_NO_INPUT": "1",
    "DEBIAN_FRONTEND": "noninteractive",
    "PYTHONUNBUFFERED": "1",  # partial output of a timed-out python command is not lost
}

# Descriptor the shell keeps a copy of its stdout on, to undo a command's `exec >file` (bash's
# `exec` makes redirections permanent). Stdin is not restored that way: replacing fd 0 under
# bash's buffered command input crashes bash 5.2; a command that does `exec <file` makes the
# shell read EOF and exit, which the session handles as a restart.
_SAVED_STDOUT_FD = 98

_READ_SLICE = 0.25  # seconds between liveness checks while waiting for output
_KILL_GRACE = 2.0  # seconds to wait for the sentinel after killing a timed-out command
_START_TIMEOUT = 15.0


# Byte (as a latin-1 character) -> its spelling inside $'...': NUL dropped, ' and \\ escaped,
# printable ASCII kept, the rest as \\xHH (at most two hex digits, so a following digit is safe).
_ANSI_C = {
    b: (None if b == 0 else "\\" + chr(b) if b in (0x27, 0x5C) else f"\\x{b:02x}")
    for b in range(256)
    if b in (0, 0x27, 0x5C) or not 0x20 <= b < 0x7F
}
_NON_PRINTABLE = re.compile(r"[^\x20-\x7e]+")


def ansi_c_quote(text: str) -> str:
    """``$'...'`` literal for bash holding ``text`` byte for byte (NUL bytes dropped).

    Lone surrogates from ``surrogateescape`` decoding become their original bytes; any other
    lone surrogate is encoded as is (``surrogatepass``), so no string makes this raise."""
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        data = text.encode("utf-8", "surrogatepass")
    # str.replace for the common specials, then the rare rest run by run (translate is slow
    # per character once a mapping is not one to one).
    body = data.decode("latin-1").replace("\\", "\\\\").replace("'", "\\'")
    body = body.replace("\n", "\\x0a").replace("\t", "\\x09")
    return "$'" + _NON_PRINTABLE.sub(lambda m: m.group().translate(_ANSI_C), body) + "'"


class _OutputBuffer:
    """Bytes of one command's output with bounded memory: the head is kept once, then only a
    sliding tail; ``dropped`` counts what fell out of the middle."""

    def __init__(self, limit_chars: int):
        # UTF-8 takes up to 4 bytes a character; the tail also holds the sentinel block.
        self.head_cap = 4 * max(limit_chars, 1)
        self.tail_cap = max(4 * limit_chars, 65536)
        self.head: bytearray | None = None
        self.buf = bytearray()
        self.dropped = 0

    def feed(self, chunk: bytes) -> None:
        self.buf += chunk

    def trim(self) -> None:
        if len(self.buf) <= self.head_cap + 2 * self.tail_cap:
            return
        if self.head is None:
            self.head = self.buf[: self.head_cap]
            cut_from = self.head_cap
        else:
            cut_from = 0
        cut_to = len(self.buf) - self.tail_cap
        self.dropped += cut_to - cut_from
        self.buf = self.buf[cut_to:]

    def text(self, end: int, limit: int) -> tuple[str, bool]:
        """Decode ``buf[:end]`` (plus the kept head) into at most about ``limit`` characters."""
        body = bytes(self.buf[:end])
        if self.head is None:
            text = body.decode("utf-8", errors="replace")
            if len(text) <= limit:
                return text, False
            head_text, tail_text, omitted = text, text, len(text) - 2 * (limit // 2)
            unit = "characters"
        else:
            # The tail may start inside a multi-byte character: skip continuation bytes.
            i = 0
            while i < min(len(body), 3) and 0x80 <= body[i] < 0xC0:
                i += 1
            head_text = bytes(self.head).decode("utf-8", errors="replace")
            tail_text = body[i:].decode("utf-8", errors="replace")
            omitted = self.dropped + i + max(0, len(head_text) - limit // 2)
            omitted += max(0, len(tail_text) - limit // 2)
            unit = "bytes or more"
        half = limit // 2
        return (
            f"{head_text[:half]}\n\n<output truncated: {omitted} {unit} omitted from the middle>"
            f"\n\n{tail_text[-half:] if half else ''}",
            True,
        )


class ShellSession:
    """A persistent bash session over a ``ShellTransport``.

    Args:
        spawn: starts a fresh shell and returns its transport (called again after a restart).
        workdir: directory the shell starts (and restarts) in, as the shell sees it.
        env: extra exported variables (on top of ``NONINTERACTIVE_ENV``).
        output_limit: characters of output kept per command (head and tail).
        command_timeout: default per-command timeout in seconds.
    """

    def __init__(
        self,
        spawn: Callable[[], ShellTransport],
        workdir: str,
        *,
        env: Mapping[str, str] | None = None,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        command_timeout: float = DEFAULT_COMMAND_TIMEOUT,
    ):
        if output_limit < 100:
            raise ValueError(f"output_limit must be at least 100 characters, got {output_limit}")
        if command_timeout <= 0:
            raise ValueError(f"command_timeout must be > 0 seconds, got {command_timeout}")
        self._spawn = spawn
        self.workdir = workdir
        self.env = {**NONINTERACTIVE_ENV, **(env or {})}
        self.output_limit = output_limit
        self.command_timeout = command_timeout
        self.transport: ShellTransport | None = None
        self.shell_pid: int | None = None  # $$ of the current shell
        self.cwd = workdir  # last $PWD the shell reported
        self._jobs: set[int] = set()  # background job pgids after the last command
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, cwd: str | None = None) -> None:
        """Start (or replace) the shell and initialise it in ``cwd`` (default: workdir)."""
        self._drop_transport()
        self.transport = self._spawn()
        self._jobs = set()
        cwd = cwd or self.workdir
        token = secrets.token_hex(8)
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        init = (
            f"exec 2>&1 {_SAVED_STDOUT_FD}>&1; set -m; set +o histexpand; "
            f"export {exports}; cd {shlex.quote(cwd)} 2>/dev/null || cd {shlex.quote(self.workdir)}; "
            f'printf \'%s %s %s\\n\' __SWE_READY_{token}__ "$$" "$PWD"\n'
        )
        try:
            self.transport.write(init.encode())
        except OSError as e:
            raise SandboxError(f"the shell died while starting: {e}") from e
        marker = f"__SWE_READY_{token}__ ".encode()
        buf = bytearray()
        deadline = time.monotonic() + _START_TIMEOUT
        while True:
            i = buf.find(marker)
            if i >= 0 and buf.find(b"\n", i) >= 0:
                line = buf[i + len(marker) : buf.find(b"\n", i)].decode("utf-8", "replace")
                pid, _, pwd = line.partition(" ")
                self.shell_pid, self.cwd = int(pid), pwd
                return
            if time.monotonic() > deadline:
                raise SandboxError(
                    f"the shell did not start within {_START_TIMEOUT:.0f} s; it printed: "
                    f"{bytes(buf[-2000:]).decode('utf-8', 'replace')!r}"
                )
            chunk = self.transport.read(_READ_SLICE)
            if chunk is None or (not chunk and not self.transport.alive()):
                raise SandboxError(
                    "the shell exited while starting; it printed: "
                    f"{bytes(buf[-2000:]).decode('utf-8', 'replace')!r}"
                )
            buf += chunk

    def close(self) -> None:
        """Kill the shell and what it started; idempotent."""
        self._closed = True
        self._drop_transport()

    def _drop_transport(self) -> None:
        if self.transport is not None:
            t, self.transport = self.transport, None
            t.close()

    # -- commands ---------------------------------------------------------------------------

    def run(self, command: str, timeout: float | None = None) -> CommandResult:
        """Run ``command`` in the persistent shell; never raises for a failing command."""
        if self._closed:
            raise SandboxError("the shell session is closed")
        if self.transport is None:
            self.start()
        timeout = self.command_timeout if timeout is None else float(timeout)
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        token = secrets.token_hex(8)
        status = f"__SWE_{token}__"
        end = f"__SWE_{token}_END__"
        line = (
            f"eval {ansi_c_quote(command)} </dev/null; __swe_rc=$?; "
            f"exec 1>&{_SAVED_STDOUT_FD} 2>&1; "
            f'printf \'\\n%s %s %s\\n\' {status} "$__swe_rc" "$PWD"; jobs -p; '
            f"printf '%s\\n' {end}\n"
        )
        start = time.monotonic()
        out = _OutputBuffer(self.output_limit)
        transport = self.transport
        assert transport is not None
        try:
            transport.write(line.encode())
        except OSError:
            return self._shell_died(out, start, None)
        end_b, status_b = f"{end}\n".encode(), f"\n{status} ".encode()
        deadline = start + timeout
        killed_at: float | None = None
        while True:
            now = time.monotonic()
            if killed_at is None and now >= deadline:
                transport.kill_command(self.shell_pid or -1, set(self._jobs))
                killed_at = now
            if killed_at is not None and now >= killed_at + _KILL_GRACE:
                return self._restart_after_timeout(out, start, timeout)
            limit = (killed_at + _KILL_GRACE if killed_at is not None else deadline) - now
            chunk = transport.read(max(0.0, min(_READ_SLICE, limit)))
            if chunk is None or (not chunk and not transport.alive()):
                while chunk:  # drain what the dead shell left
                    out.feed(chunk)
                    out.trim()
                    chunk = transport.read(0.05)
                return self._shell_died(out, start, timeout if killed_at is not None else None)
            if not chunk:
                continue
            scan_from = max(0, len(out.buf) - len(end_b))
            out.feed(chunk)
            j = out.buf.find(end_b, scan_from)
            if j < 0:
                out.trim()
                continue
            i = out.buf.rfind(status_b, 0, j)
            if i < 0:  # the end marker without the status line: cannot happen unless tampered
                out.trim()
                continue
            return self._finish(out, i, j, start, timeout if killed_at is not None else None)

    def _finish(
        self, out: _OutputBuffer, i: int, j: int, start: float, timed_out_after: float | None
    ) -> CommandResult:
        block = bytes(out.buf[i + 1 : j]).decode("utf-8", "replace").split("\n")
        _, rc_s, pwd = (block[0].split(" ", 2) + ["", ""])[:3]
        self.cwd = pwd or self.cwd
        self._jobs = {int(x) for x in block[1:] if x.strip().isdigit()}
        text, truncated = out.text(i, self.output_limit)
        if timed_out_after is not None:
            text += f"\n<command timed out after {timed_out_after:g} s and was killed>"
            return CommandResult(
                text, None, timed_out=True, duration=time.monotonic() - start, truncated=truncated
            )
        rc = int(rc_s) if rc_s.lstrip("-").isdigit() else None
        return CommandResult(text, rc, duration=time.monotonic() - start, truncated=truncated)

    def _shell_died(
        self, out: _OutputBuffer, start: float, timed_out_after: float | None
    ) -> CommandResult:
        text, truncated = out.text(len(out.buf), self.output_limit)
        self.start()
        note = (
            f"<the shell exited; a new shell was started in {self.workdir}; "
            "exported variables and cwd were reset>"
        )
        if timed_out_after is not None:
            note = f"<command timed out after {timed_out_after:g} s and was killed>\n" + note
        return CommandResult(
            f"{text}\n{note}" if text else note,
            None,
            timed_out=timed_out_after is not None,
            duration=time.monotonic() - start,
            truncated=truncated,
            restarted=True,
        )

    def _restart_after_timeout(
        self, out: _OutputBuffer, start: float, timeout: float
    ) -> CommandResult:
        # The command ran inside the shell process itself (a shell loop, `exec`), so killing
        # its children did not end it: replace the shell, keeping the directory.
        text, truncated = out.text(len(out.buf), self.output_limit)
        cwd = self.cwd
        self.start(cwd)
        note = (
            f"<command timed out after {timeout:g} s and was killed; it was running inside the "
            f"shell itself, so a new shell was started in {self.cwd}; exported variables were reset>"
        )
        return CommandResult(
            f"{text}\n{note}" if text else note,
            None,
            timed_out=True,
            duration=time.monotonic() - start,
            truncated=truncated,
            restarted=True,
        )
