"""An agent harness run as its own process inside an episode's sandbox (``--agent-cmd``).

The host prepares a per-episode folder (``write_run_files``) that the sandbox binds read-only at
``RUN_DIR``: the issue, a launcher (``run.sh``), the forwarder (``harness_forward.py``) and the
unix socket of the episode's model endpoint. The user's harness folder, if any, is bound
read-only at ``HARNESS_DIR`` (its ``bin/`` first on ``PATH``). Both backends take these as
``binds`` (``harness_binds``); the sandbox's network stays closed: the harness reaches the model
at ``127.0.0.1:PORT`` inside, which the forwarder passes to the socket.

``HarnessProcess`` drives the process through the sandbox's own shell, the same way on every
backend: the launcher starts under ``setsid`` (its pid is its process group, read from the
shell's ``$!``, never from a file the harness could write), runs the command in ``/testbed``
with stdout and stderr in the sandbox's capped ``/tmp`` and writes its exit code there. ``wait``
polls for that exit, a deadline or a stop request; ``kill`` kills the whole group and checks that
none of it is left; ``logs`` reads both streams back, head and tail, bounded. A process that
leaves the group (``setsid`` of its own) is killed when the sandbox closes.
"""

from __future__ import annotations

import os
import re
import shlex
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swe_gym.errors import SandboxError

RUN_DIR = "/run/swe-gym"  # the host's per-episode folder, read-only inside
HARNESS_DIR = "/opt/harness"  # the user's harness files, read-only inside
STATE_DIR = "/tmp/.swe-gym"  # exit code, port, stdout, stderr: the sandbox's capped /tmp
SOCKET_NAME = "gateway.sock"
ISSUE_FILE = f"{RUN_DIR}/issue.md"
MAX_ISSUE_ENV = 32 * 1024  # characters of the issue also passed as $SWE_GYM_ISSUE
LOG_BYTES = 16 * 1024  # of each stream kept: its head and tail, half each
_FORWARDER = Path(__file__).with_name("harness_forward.py")
_POLL_S = 1.0  # one long poll in the shell: exit seen within ~50 ms, one shell call a second


class HarnessError(SandboxError):
    """The harness could not be started or stopped (the reason says which)."""


def harness_binds(run_dir: str, harness_dir: str | None = None) -> list[tuple[str, str, bool]]:
    """The sandbox ``binds`` for one episode: its run folder, and the harness folder if any."""
    binds = [(str(run_dir), RUN_DIR, False)]
    if harness_dir is not None:
        binds.append((os.path.realpath(harness_dir), HARNESS_DIR, False))
    return binds


def write_run_files(
    run_dir: str | os.PathLike,
    command: str,
    issue: str,
    env: Mapping[str, str],
    with_harness_dir: bool = False,
) -> None:
    """The episode's run folder: ``issue.md``, ``forward.py`` and ``run.sh`` (readable by any
    sandbox uid; the socket beside them is the endpoint's own). ``env``: variables the harness
    gets besides ``OPENAI_BASE_URL`` (set inside, once the forwarder listens) and the issue's."""
    run = Path(run_dir)
    os.chmod(run, 0o755)
    (run / "issue.md").write_text(issue, encoding="utf-8")
    (run / "forward.py").write_bytes(_FORWARDER.read_bytes())
    exports = {
        **env,
        "SWE_GYM_ISSUE_FILE": ISSUE_FILE,
        **({"SWE_GYM_ISSUE": issue} if len(issue) <= MAX_ISSUE_ENV else {}),
    }
    lines = [
        "#!/bin/bash",
        "# Written by the trainer (swe_gym.sandbox.harness); started as `setsid bash run.sh`.",
        f"d={STATE_DIR}",
        'mkdir -p "$d" && cd /testbed || exit 111',
        *(f"export {k}={shlex.quote(v)}" for k, v in exports.items()),
    ]
    if with_harness_dir:
        lines.append(f'[ -d {HARNESS_DIR}/bin ] && export PATH="{HARNESS_DIR}/bin:$PATH"')
    lines += [
        "py=$(command -v python3 || command -v python) || "
        '{ echo "no python in the sandbox for the forwarder" > "$d/status"; exit 112; }',
        f'"$py" {RUN_DIR}/forward.py {RUN_DIR}/{SOCKET_NAME} "$d/port" 2>"$d/forward.log" &',
        'for _ in $(seq 200); do [ -s "$d/port" ] && break; sleep 0.025; done',
        '[ -s "$d/port" ] || { echo "the forwarder did not start: $(head -c 500 "$d/forward.log")"'
        ' > "$d/status"; exit 113; }',
        'export OPENAI_BASE_URL="http://127.0.0.1:$(cat "$d/port")/v1"',
        f'bash -c {shlex.quote(command)} </dev/null >"$d/stdout" 2>"$d/stderr"',
        'echo $? > "$d/exit.tmp" && mv "$d/exit.tmp" "$d/exit"',
    ]
    (run / "run.sh").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for name in ("issue.md", "forward.py", "run.sh"):
        os.chmod(run / name, 0o644)


@dataclass
class HarnessExit:
    """How the harness process ended and what it printed.

    ``end``: ``exited`` (its own exit, ``exit_code``), ``launch_failed`` (the launcher gave up
    before the command ran: ``status`` says why), ``timeout`` (the deadline), ``stopped`` (the
    caller asked: the turn limit), ``lost`` (the sandbox's shell was restarted under it).
    ``left``: whether any process of its group outlived the kill."""

    end: str
    exit_code: int | None = None
    status: str = ""
    left: bool = False
    stdout: str = ""
    stderr: str = ""
    wall_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "end": self.end,
            "exit_code": self.exit_code,
            "status": self.status,
            "left": self.left,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "wall_s": round(self.wall_s, 3),
        }


class HarnessProcess:
    """``run.sh`` of ``RUN_DIR`` as one process group in ``sandbox`` (see the module doc)."""

    def __init__(self, sandbox: Any, log_bytes: int = LOG_BYTES):
        self.sandbox = sandbox
        self.log_bytes = log_bytes
        self.pgid: int | None = None
        self._started = 0.0

    def _run(self, command: str, timeout: float = 30) -> Any:
        return self.sandbox.run(command, timeout=timeout)

    def start(self) -> int:
        """Launch it; returns its process group. ``HarnessError`` when the shell cannot."""
        # Job control off for this one job: a child that is not a group leader makes `setsid`
        # call setsid() itself, so $! is the new session's leader and its group's id.
        res = self._run(
            f"set +m; setsid bash {RUN_DIR}/run.sh </dev/null >/dev/null 2>&1 & p=$!; set -m; "
            'for _ in $(seq 200); do g=$(cut -d" " -f5 /proc/$p/stat 2>/dev/null); '
            '[ "$g" = "$p" ] && break; sleep 0.01; done; echo "pid=$p pgid=$g"'
        )
        m = re.search(r"pid=(\d+) pgid=(\d+)", res.output)
        if res.exit_code != 0 or m is None or m.group(1) != m.group(2):
            raise HarnessError(f"could not start the harness in the sandbox: {res.output[:500]!r}")
        self.pgid, self._started = int(m.group(1)), time.monotonic()
        return self.pgid

    def _poll(self) -> tuple[str | None, str, bool, bool]:
        """``(exit code text or None, launcher status, group alive, shell restarted)``."""
        g = self.pgid
        n = max(1, int(_POLL_S / 0.05))
        res = self._run(
            f"d={STATE_DIR}; for _ in $(seq {n}); do [ -e $d/exit ] && break; "
            f"kill -0 -- -{g} 2>/dev/null || break; sleep 0.05; done; "
            f'echo "exit=$(cat $d/exit 2>/dev/null)"; '
            f'echo "alive=$(kill -0 -- -{g} 2>/dev/null && echo 1 || echo 0)"; '
            f'echo "status=$(head -c 600 $d/status 2>/dev/null | tr "\\n" " ")"',
            timeout=_POLL_S + 30,
        )
        out = res.output
        code = _field(out, "exit")
        return code or None, _field(out, "status"), _field(out, "alive") == "1", res.restarted

    def wait(self, deadline: float | None, stop: Callable[[], bool] = lambda: False) -> HarnessExit:
        """Until the process exits, ``deadline`` (``time.monotonic()``) passes or ``stop()``."""
        while True:
            if stop():
                return HarnessExit("stopped")
            if deadline is not None and time.monotonic() >= deadline:
                return HarnessExit("timeout")
            code, status, alive, restarted = self._poll()
            if restarted:
                return HarnessExit("lost", status="the sandbox's shell was restarted")
            if code is not None and code.strip().lstrip("-").isdigit():
                exit_code = int(code)
                end = "launch_failed" if status and exit_code in (111, 112, 113) else "exited"
                return HarnessExit(end, exit_code, status)
            if not alive:  # the whole group died without the launcher's exit record (killed)
                return HarnessExit("exited", None, status or "killed before it wrote its exit")

    def kill(self) -> bool:
        """SIGKILL its process group; whether any of it is left after 2 s."""
        if self.pgid is None:
            return False
        g = self.pgid
        res = self._run(
            f"kill -KILL -- -{g} 2>/dev/null; for _ in $(seq 100); do "
            f"kill -0 -- -{g} 2>/dev/null || break; sleep 0.02; kill -KILL -- -{g} 2>/dev/null; "
            f'done; kill -0 -- -{g} 2>/dev/null && echo "left=1" || echo "left=0"'
        )
        return _field(res.output, "left") != "0"

    def logs(self) -> tuple[str, str]:
        """stdout and stderr of the command, each at most ``log_bytes`` (head and tail)."""
        return self._read_log("stdout"), self._read_log("stderr")

    def _read_log(self, name: str) -> str:
        half = self.log_bytes // 2
        f = f"{STATE_DIR}/{name}"
        res = self._run(
            f"n=$(stat -c %s {f} 2>/dev/null || echo 0); if [ $n -le {2 * half} ]; then "
            f"cat {f} 2>/dev/null; else head -c {half} {f}; "
            f'printf "\\n[... %d bytes cut ...]\\n" $((n - {2 * half})); tail -c {half} {f}; fi'
        )
        return res.output if res.exit_code == 0 else ""

    def run_to_end(
        self, deadline: float | None, stop: Callable[[], bool] = lambda: False
    ) -> HarnessExit:
        """Start, wait, kill the group whatever happened, read the logs."""
        self.start()
        try:
            result = self.wait(deadline, stop)
        finally:
            left = self.kill()
        result.left = left
        result.wall_s = time.monotonic() - self._started
        result.stdout, result.stderr = self.logs()
        return result


def _field(output: str, name: str) -> str:
    m = re.search(rf"^{name}=(.*)$", output, re.MULTILINE)
    return m.group(1).strip() if m else ""


__all__ = [
    "HARNESS_DIR",
    "ISSUE_FILE",
    "RUN_DIR",
    "SOCKET_NAME",
    "HarnessError",
    "HarnessExit",
    "HarnessProcess",
    "harness_binds",
    "write_run_files",
]
