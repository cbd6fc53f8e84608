"""Sandboxes: one working copy of a task's repository plus a persistent bash session.

``make_sandbox(task, backend="local" | "docker", **options)`` builds one; see ``base.Sandbox``.
``fork_sandbox(sandbox, n)`` copies a running one into n (``fork``).
"""

from __future__ import annotations

import importlib
from typing import Any

from swe_gym.errors import unknown_choice
from swe_gym.sandbox.base import DEFAULT_COMMAND_TIMEOUT, CommandResult, Sandbox, cap_output
from swe_gym.sandbox.fork import ForkUnsupported, fork_sandbox
from swe_gym.tasks import Task

BACKENDS = {
    "local": "swe_gym.sandbox.local:LocalSandbox",
    "docker": "swe_gym.sandbox.docker:DockerSandbox",
}


def make_sandbox(task: Task, backend: str = "local", **options: Any) -> Sandbox:
    """Construct (not start) a sandbox for ``task`` on ``backend``."""
    if backend not in BACKENDS:
        raise unknown_choice("backend", backend, BACKENDS)
    module, _, cls = BACKENDS[backend].partition(":")
    return getattr(importlib.import_module(module), cls)(task, **options)


__all__ = [
    "BACKENDS",
    "DEFAULT_COMMAND_TIMEOUT",
    "CommandResult",
    "ForkUnsupported",
    "Sandbox",
    "cap_output",
    "fork_sandbox",
    "make_sandbox",
]
