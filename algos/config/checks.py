"""Checks of config values that read another part's registry or code: the hack policy against
the audit's signals, an agent program's factory by importing it. Here, so that a config is
checked in one place, before any work, and the parts that use these values import them from
below."""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Callable, Mapping
from typing import Any

from algos.config import ConfigError
from swe_gym.audit.signals import SIGNALS
from swe_gym.errors import unknown_choice

HACK_ACTIONS = ("mask", "penalise", "log")
# LearnerConfig fields a run sets through its ``learner`` mapping (its other fields come from the
# run's own fields or are fixed by the algorithm)
LEARNER_SETTINGS = (
    "betas",
    "eps",
    "packing",
    "packed_attention",
    "tree_min_prefix",
    "bf16_compute_copy",
    "liger",
    "logprob_chunk_size",
    "min_lr_ratio",
)

AgentFactory = Callable[..., Callable[[Any], Any]]


def check_policy(policy: Mapping[str, str], default: str) -> dict[str, str]:
    """``signal -> action`` for every signal, ``default`` where ``policy`` is silent."""
    if default not in HACK_ACTIONS:
        raise unknown_choice("hack_action", default, HACK_ACTIONS)
    for name, action in policy.items():
        if name not in SIGNALS:
            raise unknown_choice("hack_policy signal", name, SIGNALS)
        if action not in HACK_ACTIONS:
            raise unknown_choice(f"hack_policy[{name!r}]", action, HACK_ACTIONS)
    return {s: policy.get(s, default) for s in SIGNALS}


def load_agent_factory(spec: str) -> AgentFactory:
    """The callable named by ``module:factory``, or a ``ConfigError`` saying what is wrong."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"agent must be module:factory; got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"agent {spec!r}: cannot import module {module_name!r}: {e}") from None
    factory: Any = module
    for part in attr.split("."):
        if not hasattr(factory, part):
            raise ConfigError(f"agent {spec!r}: module {module_name!r} has no attribute {attr!r}")
        factory = getattr(factory, part)
    if not callable(factory):
        raise ConfigError(f"agent {spec!r}: {attr!r} is not callable")
    return factory


def check_learner_settings(settings: Mapping[str, Any]) -> None:
    """Names and values of a run's ``learner`` mapping, checked by LearnerConfig itself."""
    from algos.learner.learner_config import LearnerConfig

    for name in settings:
        if name not in LEARNER_SETTINGS:
            raise ConfigError(str(unknown_choice("learner setting", name, LEARNER_SETTINGS)))
    try:
        LearnerConfig(**settings)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"learner {dict(settings)}: {e}") from None


def env_accepts(env_id: str, name: str) -> bool:
    """Whether the env's constructor takes keyword ``name`` (e.g. max_turns)."""
    import gymnasium

    entry = gymnasium.spec(env_id).entry_point
    if entry is None:
        return False
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        entry = getattr(importlib.import_module(module), attr)
    try:
        params = inspect.signature(entry).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def check_agent_cmd(cfg: Any) -> None:
    """``ConfigError`` for an ``agent_cmd`` / ``agent_mount`` the run cannot use."""
    if cfg.agent_mount is not None and cfg.agent_cmd is None:
        raise ConfigError("agent_mount names the files of --agent-cmd's harness; set agent_cmd")
    if cfg.agent_cmd is None:
        return
    if not cfg.agent_cmd.strip():
        raise ConfigError("agent_cmd is empty; give the harness's command line")
    if cfg.agent is not None:
        raise ConfigError(
            f"agent={cfg.agent!r} and agent_cmd={cfg.agent_cmd!r} both name the agent; keep one"
        )
    if cfg.rollout_backend != "threads":
        raise ConfigError(
            f"agent_cmd runs with rollout_backend=threads only; got {cfg.rollout_backend!r}"
        )
    if cfg.agent_mount is not None and not os.path.isdir(cfg.agent_mount):
        raise ConfigError(f"agent_mount {cfg.agent_mount!r} is not a folder")
    if not env_accepts(cfg.env, "sandbox_options"):
        raise ConfigError(
            f"agent_cmd runs its harness in the env's sandbox; env {cfg.env!r} has none "
            "(use a multi-turn SWE env such as SWEStarter-v0)"
        )
