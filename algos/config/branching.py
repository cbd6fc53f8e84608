"""Branched groups' settings (docs/methods.md#branched-groups): where a group's trunk forks
(``branch_at``), the credit of the shared prefix (``prefix_credit``), and what a run must be to
branch. Checked at construction, before any model loads or episode runs."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from algos.config import ConfigError
from swe_gym.errors import unknown_choice

BRANCH_KINDS = ("none", "turn", "fraction", "sample")
PREFIX_CREDITS = ("none", "mean")


@dataclass(frozen=True)
class BranchAt:
    """A parsed ``branch_at``: ``none``, ``turn:K``, ``fraction:F`` or ``sample``."""

    kind: str
    value: float = 0.0

    @property
    def enabled(self) -> bool:
        return self.kind != "none"

    def turn_for(self, max_turns: int, seed: int, task_id: str | None, index: int) -> int:
        """The branch turn of one group, in ``[1, max_turns - 1]``: K itself; ``round(F *
        max_turns)`` clamped into the range; or (``sample``) uniform over the range, drawn from
        the round's seed, the task id and the group's index in its round (reproducible, and
        independent of thread order)."""
        hi = max(1, max_turns - 1)
        if self.kind == "turn":
            return int(self.value)
        if self.kind == "fraction":
            return min(hi, max(1, round(self.value * max_turns)))
        if self.kind == "sample":
            return random.Random(f"{seed}\0{task_id}\0{index}").randint(1, hi)
        raise ValueError("branch_at=none has no branch turn")


def parse_branch_at(text: str, max_turns: int) -> BranchAt:
    """``branch_at`` checked against ``max_turns``: a branch turn must leave the trunk at least
    one turn before it and each branch at least one after it."""
    kind, _, arg = str(text).partition(":")
    if kind not in BRANCH_KINDS:
        choices = ("none", "turn:K", "fraction:F", "sample")
        raise ConfigError(str(unknown_choice("branch_at", text, choices)))
    if kind in ("none", "sample"):
        if arg:
            raise ConfigError(f"branch_at={text!r}: {kind} takes no value")
        return BranchAt(kind)
    try:
        value = float(arg)
    except ValueError:
        raise ConfigError(f"branch_at={text!r}: {kind} needs a number ({kind}:...)") from None
    if kind == "turn" and (value != int(value) or not 1 <= value <= max_turns - 1):
        raise ConfigError(
            f"branch_at={text!r}: K must be a whole number in [1, max_turns - 1 = "
            f"{max_turns - 1}] (the trunk plays K turns, each branch at least one more)"
        )
    if kind == "fraction" and not 0 < value < 1:
        raise ConfigError(f"branch_at={text!r}: F must be in (0, 1) (a share of max_turns)")
    return BranchAt(kind, value)


def check_branching(cfg: Any) -> BranchAt:
    """``branch_at`` and ``prefix_credit`` of an RL config, and what branching needs: the
    built-in agent on threads, groups of at least two, an env that can fork."""
    if cfg.prefix_credit not in PREFIX_CREDITS:
        raise ConfigError(str(unknown_choice("prefix_credit", cfg.prefix_credit, PREFIX_CREDITS)))
    at = parse_branch_at(cfg.branch_at, cfg.max_turns)
    if not at.enabled:
        return at
    why = None
    if cfg.agent is not None:
        why = f"agent={cfg.agent!r}: an agent program's state lives in its own process"
    elif cfg.agent_cmd is not None:
        why = "agent_cmd: a harness process in the sandbox cannot be copied"
    elif cfg.rollout_backend != "threads":
        why = f"rollout_backend={cfg.rollout_backend!r}: the Ray workers run plain episodes"
    if why is not None:
        raise ConfigError(
            f"branch_at={cfg.branch_at!r} forks the built-in ReAct agent's episodes; {why}, so it "
            "cannot be forked at a turn; use branch_at=none with it"
        )
    if cfg.group_size < 2:
        raise ConfigError(
            f"branch_at={cfg.branch_at!r} with group_size={cfg.group_size}: a group needs at "
            "least two branches to compare"
        )
    check_env_forks(cfg.env, cfg.env_kwargs, cfg.branch_at)
    return at


def check_env_forks(env_id: str, env_kwargs: dict[str, Any], branch_at: str) -> None:
    """A ``ConfigError`` unless ``env_id`` can fork (``agents.branching.can_fork``); builds the
    env without starting an episode."""
    import gymnasium

    import swe_gym  # noqa: F401 - registers the ids
    from agents.branching import can_fork

    try:
        env = gymnasium.make(env_id, **env_kwargs)
    except gymnasium.error.Error as e:
        raise ConfigError(f"env {env_id!r}: {e}") from None
    try:
        if not can_fork(env):
            raise ConfigError(
                f"branch_at={branch_at!r} needs an env that can fork a running episode; env "
                f"{env_id!r} ({type(env.unwrapped).__name__}) has no fork(n). Use a multi-turn "
                "SWE env (SWEStarter-v0, SWEBench-v0, ...) or branch_at=none"
            )
    finally:
        env.close()
