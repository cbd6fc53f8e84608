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
