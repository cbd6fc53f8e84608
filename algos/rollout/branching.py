"""Branched groups in the trainers (docs/methods.md#branched-groups): rolling a round out as
branched groups (``agents.branching``), the shared prefix's credit in the samples, and the
metrics row's branch and per-group cost columns.

A branched group is one trunk played to the group's branch turn (``branch_at``, resolved per
group by ``algos.config.branching.BranchAt.turn_for``) and forked into ``group_size`` branches;
its advantages compare the branches (the trunk is not a sample of its own). Each branch's
sample holds the trunk's tokens; with ``prefix_credit=none`` their loss mask is 0 in every
branch, with ``mean`` the group's first kept branch trains them once, with the group's mean
advantage. The learner's shared-prefix packing finds the trunk from the token ids and computes
it once per tree (``algos.learner.tree``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from agents.trajectory import Trajectory
from algos.config import ConfigError
from algos.config.branching import parse_branch_at
from algos.learner.samples import Sample

if TYPE_CHECKING:
    from algos.rollout.collect import RolloutSpec


def run_branched_rollouts(
    spec: RolloutSpec,
    engine: Any,
    task_ids: Sequence[str],
    n_per_task: int,
    seed: int,
    progress: Callable[[Trajectory], None] | None = None,
) -> list[Trajectory]:
    """One branched group of ``n_per_task`` per task (task-major, like ``run_rollouts``), the
    built-in ReAct agent over ``engine`` (an ``agents`` model)."""
    import gymnasium

    import swe_gym  # noqa: F401 - registers the ids
    from agents.branching import branched_rollout
    from agents.react import ReActAgent

    max_turns = int(spec.agent_kwargs.get("max_turns") or 0)
    at = parse_branch_at(spec.branch_at, max_turns)
    turns = [at.turn_for(max_turns, seed, tid, i) for i, tid in enumerate(task_ids)]
    return branched_rollout(
        lambda: gymnasium.make(spec.env, **spec.env_kwargs),
        lambda: ReActAgent(engine, **spec.agent_kwargs),
        list(task_ids),
        n_per_task,
        turns,
        concurrency=spec.concurrency,
        episode_timeout_s=spec.episode_timeout_s,
        seed=seed,
        progress=progress,
    )


def refuse_episode_runner(spec: RolloutSpec) -> None:
    if spec.branch_at != "none":
        raise ConfigError(
            f"branch_at={spec.branch_at!r} runs the built-in agent on threads; this rollout "
            "engine runs whole episodes itself (rollout_backend=ray): use branch_at=none"
        )


# ------------------------------------------------------------------------------------------
# The shared prefix's credit
# ------------------------------------------------------------------------------------------


def shared_tokens(traj: Trajectory) -> int:
    """Tokens of a branch's trunk turns (its first ``branch_turn`` turns); 0 when not branched."""
    k = getattr(traj, "branch_turn", None)  # duck-typed episodes (tests) have none
    if not k:
        return 0
    return sum(len(t.prompt_delta_ids) + len(t.completion_ids) for t in traj.turns[:k])


def group_mean_advantages(scored: Sequence[Any]) -> dict[int, float]:
    """Each group's mean advantage over its scored members (``prefix_credit=mean``)."""
    sums: dict[int, list[float]] = {}
    for s in scored:
        sums.setdefault(s.group, []).append(s.advantage)
    return {g: sum(v) / len(v) for g, v in sums.items()}


def credit_prefix(
    sample: Sample, shared: int, mode: str, carry: bool, prefix_advantage: float
) -> Sample | None:
    """``sample`` (a branch's) with its first ``shared`` tokens credited by ``mode``: ``mean``
    and ``carry`` (the group's carrier) gives them ``prefix_advantage`` (a per-token advantage);
    otherwise their loss mask is 0. None when no loss token is left."""
    n = len(sample.input_ids)
    shared = min(shared, n)
    if not shared:
        return sample
    if mode == "mean" and carry:
        adv = sample.advantage  # scoring gives one per sample; a per-token one is kept as it is
        own = [float(adv)] * (n - shared) if isinstance(adv, int | float) else list(adv[shared:])
        return dataclasses.replace(sample, advantage=[prefix_advantage] * shared + own)
    mask = [0] * shared + list(sample.loss_mask[shared:])
    if not any(mask):
        return None
    lps = sample.behaviour_logprobs
    return dataclasses.replace(
        sample,
        loss_mask=mask,
        behaviour_logprobs=None
        if lps is None
        else [lp * m for lp, m in zip(lps, mask, strict=True)],
    )


# ------------------------------------------------------------------------------------------
# The metrics row
# ------------------------------------------------------------------------------------------


def _cost(turns: Sequence[Any]) -> tuple[int, int, float]:
    return (
        sum(len(t.completion_ids) for t in turns),
        sum(1 for t in turns if t.tool),
        sum(float(t.env_s) for t in turns),
    )


def group_costs(group: Sequence[Trajectory]) -> tuple[int, int, float]:
    """``(tokens sampled, tool calls, env seconds)`` of one group, a branched group's trunk
    counted once (and its fork's seconds added to the env's)."""
    k = group[0].branch_turn if group else None
    if not k:
        parts = [_cost(t.turns) for t in group]
        return sum(p[0] for p in parts), sum(p[1] for p in parts), sum(p[2] for p in parts)
    trunk = _cost(group[0].turns[:k])
    own = [_cost(t.turns[k:]) for t in group]
    fork_s = float((group[0].branch or {}).get("fork_s") or 0.0)
    return (
        trunk[0] + sum(p[0] for p in own),
        trunk[1] + sum(p[1] for p in own),
        trunk[2] + sum(p[2] for p in own) + fork_s,
    )


def branch_metrics(episodes: Sequence[Trajectory], group_size: int) -> dict[str, float]:
    """The row's branch columns over an iteration's episodes (whole groups of ``group_size`` in
    order, as the collectors return them): ``branched_groups``, ``branch_fallbacks`` (groups
    that fell back to plain episodes), and per group the means of ``group_tokens_sampled``
    (completion tokens), ``group_tool_calls`` (turns the env ran as a tool call) and
    ``group_env_s`` (the env's step seconds, grading included, plus the fork's; sandbox start-up
    is not measured per episode)."""
    groups = [episodes[i : i + group_size] for i in range(0, len(episodes), group_size)]
    costs = [group_costs(g) for g in groups]
    n = max(1, len(groups))
    return {
        "branched_groups": sum(1 for g in groups if g and g[0].branch_turn),
        "branch_fallbacks": sum(1 for g in groups if g and (g[0].branch or {}).get("fallback")),
        "group_tokens_sampled": sum(c[0] for c in costs) / n,
        "group_tool_calls": sum(c[1] for c in costs) / n,
        "group_env_s": sum(c[2] for c in costs) / n,
    }
