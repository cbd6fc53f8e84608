"""Typed errors. Each names the bad value and what is accepted."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class SWEGymError(Exception):
    """Base class of every error this toolkit raises on purpose."""


class TaskError(SWEGymError, ValueError):
    """A task row is malformed: names the row's id and the field."""

    def __init__(self, instance_id: str | None, field: str, problem: str):
        self.instance_id = instance_id
        self.field = field
        super().__init__(f"task {instance_id or '<no instance_id>'}: field {field!r}: {problem}")


class SandboxError(SWEGymError, RuntimeError):
    """A sandbox could not be started or used (not a failing command: those are results)."""


class SandboxUnavailable(SandboxError):
    """A backend's prerequisite is missing (bubblewrap, a Docker daemon, an image)."""


class FileTooLarge(SWEGymError, OSError):
    """A sandbox file is over the byte limit its reader asked for (``read_file(max_bytes=)``).
    The size comes from the trusted side (an fstat, the daemon's stat), never from the agent."""

    def __init__(self, size: int, limit: int, path: str = ""):
        self.size, self.limit, self.path = size, limit, path
        where = f"{path} is" if path else "the file is"
        super().__init__(
            f"{where} {size} bytes, more than the limit of {limit} bytes; read parts of it with "
            "head, tail or sed -n '10,40p' FILE"
        )

    def __reduce__(self):  # pickles (a worker process's error) with its own arguments
        return type(self), (self.size, self.limit, self.path)


class DiffError(SandboxError):
    """The working copy's diff could not be taken within its bounds. ``end_reason`` names the
    bound for the env: ``patch_too_large``, ``workspace_too_large`` or ``diff_timed_out``."""

    def __init__(self, end_reason: str, message: str):
        self.end_reason = end_reason
        super().__init__(message)

    def __reduce__(self):
        return type(self), (self.end_reason, str(self))


class GradingError(SWEGymError, RuntimeError):
    """Grading could not run at all (as opposed to a task that is simply not resolved)."""


def unknown_choice(kind: str, value: object, accepted: Iterable[str]) -> ValueError:
    """``unknown backend 'dokcer'; choose one of: docker, local. Did you mean 'docker'?``"""
    accepted = sorted(accepted)
    msg = f"unknown {kind} {value!r}; choose one of: {', '.join(accepted)}"
    close = difflib.get_close_matches(str(value), accepted, n=1)
    if close:
        msg += f". Did you mean {close[0]!r}?"
    return ValueError(msg)
