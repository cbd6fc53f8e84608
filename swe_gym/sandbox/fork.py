"""Forking a running sandbox into n independent ones: what both backends share.

``fork_sandbox(sandbox, n)`` returns n started sandboxes of the same task, each holding a copy
of the parent's working tree and of its persistent shell's state; the parent is left as it was.
Each backend copies the tree its own way (``local_fork``: a reflink-or-copy of the frozen
working copy; ``docker_fork``: ``docker commit`` or the archive stream); this module holds the
checks and the shell state, which both replay the same way:

* captured in the parent's shell: the working directory, exported variables (and which are
  exported, so a child unsets what the parent unset), functions, aliases, ``umask``, ``set -o``
  and ``shopt`` options;
* replayed in the child's fresh shell as one command, after which the session's own settings
  (job control on, history expansion off) are restored, since the session needs them.

Not carried: background processes (a child starts with none), non-exported shell variables,
``/tmp`` (each child gets its own empty one), the shell's history and job table.
"""

from __future__ import annotations

import base64
import binascii
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from swe_gym.errors import SandboxError
from swe_gym.sandbox.base import Sandbox

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Printed by the parent's shell, then read back in slices that fit any output limit. The state is
# taken in a subshell (same exports, functions and cwd) except ``$SHELLOPTS``, read in the main
# shell first: a command substitution drops ``errexit`` and job control.
_CAPTURE = (
    "__swe_o=$SHELLOPTS; __swe_fork=$( { printf '%s\\n' \"$__swe_o\"; compgen -e | tr '\\n' ' ';"
    " printf '\\n%s\\0' \"$PWD\"; umask -p; shopt -p; alias -p; declare -f; export -p; }"
    " 2>/dev/null | base64 -w0 ); unset __swe_o; printf '%s' \"${#__swe_fork}\""
)
_SLICE = "printf '%s' \"${{__swe_fork:{start}:{size}}}\""
_FORGET = "unset __swe_fork"


class ForkUnsupported(SandboxError):
    """The sandbox's backend cannot fork (the message says why)."""


@runtime_checkable
class ForkableSandbox(Sandbox, Protocol):
    """A ``Sandbox`` that can copy itself into ``n`` started children (see ``fork_sandbox``)."""

    def fork(self, n: int) -> list[Any]: ...


@dataclass(frozen=True)
class ShellState:
    """What a child's shell takes from its parent's (see the module docstring)."""

    cwd: bytes
    exported: tuple[str, ...]  # names the parent exports (a child unsets the others)
    options: tuple[str, ...]  # ``set -o`` options that are on
    script: bytes  # umask, shopt, aliases, functions, exports: bash that recreates them


def check_fork_count(n: object) -> int:
    """``n`` as the number of children, or ValueError naming it and what is accepted."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"fork(n) needs n as an integer >= 1 (how many children), got {n!r}")
    return n


def fork_sandbox(sandbox: Sandbox, n: int) -> list[Sandbox]:
    """``sandbox.fork(n)``, or ``ForkUnsupported`` naming the backend that cannot fork."""
    check_fork_count(n)
    if not isinstance(sandbox, ForkableSandbox):
        raise ForkUnsupported(
            f"{type(sandbox).__name__} cannot fork: it has no fork(n) method; the local and "
            "docker backends can (swe_gym.sandbox.BACKENDS)"
        )
    return list(sandbox.fork(n))


def capture_shell_state(run: Callable[[str], Any], output_limit: int) -> ShellState:
    """Read the shell state through ``run`` (a sandbox's ``run``: a command -> CommandResult),
    in slices that fit the sandbox's ``output_limit`` (characters kept per command)."""
    size = max(32, min(1 << 16, output_limit - 64))
    res = run(_CAPTURE)
    if res.exit_code != 0 or not res.output.strip().isdigit():
        raise SandboxError(f"could not read the parent's shell state to fork: {res.output!r}")
    total, parts, start = int(res.output.strip()), [], 0
    try:
        while start < total:
            got = run(_SLICE.format(start=start, size=size))
            piece = got.output
            if not piece or got.truncated:
                break
            parts.append(piece)
            start += len(piece)
    finally:
        run(_FORGET)
    if start != total:
        raise SandboxError(f"the parent's shell state read back {start} of {total} characters")
    try:
        raw = base64.b64decode("".join(parts), validate=True)
    except (binascii.Error, ValueError) as e:
        raise SandboxError(f"the parent's shell state did not read back whole: {e}") from None
    return parse_shell_state(raw)


def parse_shell_state(raw: bytes) -> ShellState:
    """Split what ``_CAPTURE`` printed: options line, names line, cwd up to NUL, the script."""
    opts, _, rest = raw.partition(b"\n")
    names, _, rest = rest.partition(b"\n")
    cwd, sep, script = rest.partition(b"\0")
    if not sep:
        raise SandboxError("the parent's shell state has no working directory; cannot fork")
    options = tuple(
        o for o in opts.decode("ascii", "replace").split(":") if _NAME.match(o.replace("-", "_"))
    )
    exported = tuple(x for x in names.decode("ascii", "replace").split() if _NAME.match(x))
    return ShellState(cwd, exported, options, script)


def replay_command(state: ShellState, workdir_map: tuple[str, str] | None = None) -> str:
    """The one command that gives a fresh shell ``state``. ``workdir_map`` (old, new) rewrites
    the parent's host paths for an unsandboxed local child (its tree lives elsewhere)."""
    script, cwd = state.script, state.cwd
    if workdir_map is not None:
        old, new = (p.encode() for p in workdir_map)
        script, cwd = script.replace(old, new), cwd.replace(old, new)
    blob = base64.b64encode(script).decode()
    keep = " ".join(state.exported)
    opts = " ".join(f"-o {o}" for o in state.options)
    return (
        f"__swe_st=$(printf %s {blob} | base64 -d); "
        f'for __n in $(compgen -e); do case " {keep} " in *" $__n "*) ;; *) unset -v "$__n";; esac;'
        ' done; eval "$__swe_st"; unset __swe_st __n; '
        f"cd -- {_bash_bytes(cwd)}; "
        'for __n in ${SHELLOPTS//:/ }; do set +o "$__n"; done; unset __n; '
        + (f"set {opts}; " if opts else "")
        + "set -m; set +o histexpand"
    )


def _bash_bytes(data: bytes) -> str:
    """A bash word for ``data`` (any bytes but NUL)."""
    text = data.decode("utf-8", "surrogateescape")
    if text.isprintable() and text.isascii():
        return shlex.quote(text)
    from swe_gym.sandbox.shell import ansi_c_quote

    return ansi_c_quote(text)


S = TypeVar("S")


def close_all(children: Sequence[Any]) -> None:
    """Close every child of a failed fork, each close's own error ignored: the cleanup must
    reach them all, and the error that failed the fork is the one the caller raises."""
    for child in children:
        try:
            child.close()
        except Exception:  # noqa: BLE001 - keep closing the rest
            pass


def each(fn: Callable[[S], object], items: Sequence[S], workers: int = 4) -> None:
    """``fn`` on every item, on up to ``workers`` threads (children start independently; a
    start mostly waits on a process or the daemon). Every call finishes before the first
    error is raised, so the caller's cleanup sees no child still starting."""
    if len(items) <= 1:
        for item in items:
            fn(item)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(workers, len(items))) as pool:
        futures = [pool.submit(fn, item) for item in items]
    for f in futures:
        f.result()


def replay_into(
    children: Sequence[Any], state: ShellState, workdir_map: tuple[str, str] | None = None
) -> None:
    """Replay ``state`` in each started child; SandboxError when a child's shell refuses."""
    for child in children:
        res = child.run(replay_command(state, workdir_map))
        if res.restarted or res.timed_out:
            raise SandboxError(f"a forked child's shell failed to take the state: {res.output!r}")


__all__ = [
    "ForkUnsupported",
    "ForkableSandbox",
    "ShellState",
    "capture_shell_state",
    "check_fork_count",
    "close_all",
    "each",
    "fork_sandbox",
    "parse_shell_state",
    "replay_command",
    "replay_into",
]
