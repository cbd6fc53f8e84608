"""Episodes to learner samples: rewards, loud failures, failure masking, advantages, filters."""

from __future__ import annotations

import dataclasses
import importlib
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from agents.trajectory import ENV_FAILURES, FAILURES, Trajectory
from algos import objectives
from algos.config import ConfigError
from algos.learner.samples import Sample
from algos.rollout.branching import credit_prefix, group_mean_advantages, shared_tokens

if TYPE_CHECKING:
    from algos.config.policy_gradient import PolicyGradientConfig
    from algos.rollout.hack_monitor import HackMonitor

log = logging.getLogger(__name__)


class EpisodesFailed(RuntimeError):
    """Every episode of an iteration (or more than ``max_error_share`` of them) failed in its
    rollout or its reward: a broken setup, not a signal to learn from (or to skip quietly)."""


@dataclass(frozen=True)
class ScoringSpec:
    """What scoring a round of groups reads (an RL config's reward, advantage and filter
    choices; see :meth:`from_config`)."""

    filter: str = "none"
    advantage_estimator: str = "grpo"
    normalize_std: bool = True
    length_penalty: bool = False
    length_threshold: int = 0
    max_turns: int = 0
    overlong_buffer: int = 0
    max_context_tokens: int = 0
    mask_failed_groups: bool = False
    max_error_share: float = 0.5
    mask_invalid: bool = False  # turns the env rejected masked out of the samples' loss
    overlong_filter: bool = False  # episodes cut by a limit dropped from the samples
    prefix_credit: str = "none"  # a branched group's shared trunk (algos.rollout.branching)
    hack_monitor: HackMonitor | None = None  # built by the trainer, which holds the tasks

    @classmethod
    def from_config(cls, cfg: PolicyGradientConfig) -> ScoringSpec:
        return cls(
            filter=cfg.filter,
            advantage_estimator=cfg.advantage_estimator,
            normalize_std=cfg.normalize_std,
            length_penalty=cfg.length_penalty,
            length_threshold=cfg.length_threshold,
            max_turns=cfg.max_turns,
            overlong_buffer=cfg.overlong_buffer,
            max_context_tokens=cfg.max_context_tokens,
            mask_failed_groups=cfg.mask_failed_groups,
            max_error_share=cfg.max_error_share,
            mask_invalid=cfg.mask_invalid,
            overlong_filter=cfg.overlong_filter,
            prefix_credit=getattr(cfg, "prefix_credit", "none"),
        )


@dataclass
class Scored:
    """One usable trajectory with its reward, group and (later) advantage."""

    traj: Trajectory
    group: int
    reward: float
    advantage: float = 0.0
    prefix_advantage: float = 0.0  # its group's mean advantage (a branched trunk's credit)


@dataclass
class Counters:
    """Per-iteration counts of what was dropped and why."""

    episodes: int = 0
    rollout_errors: int = 0
    env_failures: int = 0  # scored (reward 0) but the env's failure: a dead sandbox, no verdict
    not_token_exact: int = 0
    reward_errors: int = 0
    truncated: int = 0
    overlong_dropped: int = 0
    empty: int = 0
    filtered: int = 0
    failure_masked: int = 0
    segments: int = 0  # sequences trained (an episode whose history was rewritten has several)
    prefix_failures: int = 0  # gateway turns whose request did not extend the session's history
    rewarded: int = 0  # scored with reward > 0 (before the hack monitor)
    hack_attempts: int = 0  # episodes with a hack signal, rewarded or not
    hack_flagged: int = 0  # rewarded episodes with a hack signal
    hack_masked: int = 0
    hack_penalised: int = 0
    errors: list[str] = field(default_factory=list)

    def add(self, other: Counters) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def row(self) -> dict[str, int]:
        """The counts a metrics row reports."""
        return {
            k: getattr(self, k)
            for k in (
                "episodes",
                "rollout_errors",
                "env_failures",
                "reward_errors",
                "not_token_exact",
                "truncated",
                "overlong_dropped",
                "filtered",
                "failure_masked",
                "segments",
                "prefix_failures",
                "rewarded",
                "hack_attempts",
                "hack_flagged",
                "hack_masked",
                "hack_penalised",
            )
        }

    @property
    def hack_rate(self) -> float:
        """Flagged share of the rewarded episodes (0 when none was rewarded)."""
        return self.hack_flagged / self.rewarded if self.rewarded else 0.0


def load_reward_fn(spec: str | None) -> Callable[[Trajectory], float] | None:
    """``'module:function'`` -> the function (called with a Trajectory, returns a float)."""
    if not spec:
        return None
    module, _, name = spec.partition(":")
    if not name:
        raise ConfigError(f"reward_fn {spec!r} must be 'module:function'")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"reward_fn {spec!r} cannot be imported: {e}") from None


def is_overlong(traj: Trajectory) -> bool:
    """Cut by a limit rather than ended by the agent (docs/methods.md#overlong-shaping)."""
    if traj.finish_reason in ("max_turns", "context_overflow"):
        return True
    return bool(traj.turns) and traj.turns[-1].completion_finish_reason == "length"


def count_rollout_error(traj: Trajectory, counters: Counters) -> bool:
    """Whether the rollout crashed (ended in ``error`` or took no turn): nothing to score; counted
    in ``rollout_errors`` with its message."""
    if traj.finish_reason == "error" or not traj.turns:
        counters.rollout_errors += 1
        counters.errors.append(f"rollout {traj.task_id}: {(traj.error or 'no turns')[:300]}")
        return True
    return False


def count_env_failure(traj: Trajectory, counters: Counters) -> None:
    """Count an episode the env ended by its own failure (``ENV_FAILURES``: scored 0, not the
    policy's doing) in ``env_failures`` with its message."""
    if traj.finish_reason in ENV_FAILURES:
        counters.env_failures += 1
        counters.errors.append(
            f"env {traj.task_id}: {traj.finish_reason}: {(traj.error or '')[:300]}"
        )


def score_trajectories(
    trajs: Sequence[Trajectory],
    groups: Sequence[int],
    reward_fn: Callable[[Trajectory], float] | None,
    counters: Counters,
    *,
    length_penalty: bool = False,
    length_threshold: int = 0,
    max_turns: int = 0,
    overlong_buffer: int = 0,
    max_context_tokens: int = 0,
) -> list[Scored]:
    """Rewards (+ the turn length penalty when ``length_penalty``: ``length_threshold`` and
    ``max_turns`` as in ``objectives.turn_length_penalty``; + the soft overlong penalty over the
    episode's tokens when ``overlong_buffer``: ``objectives.overlong_penalty`` with ``L_max =
    max_context_tokens``, ``L_cache = overlong_buffer``); drops crashed / non-token-exact /
    unscorable episodes."""
    out = []
    for traj, group in zip(trajs, groups, strict=True):
        counters.episodes += 1
        counters.prefix_failures += int(
            (getattr(traj, "agent", None) or {}).get("prefix_failures", 0) or 0
        )
        if count_rollout_error(traj, counters):
            continue
        if not traj.token_exact:
            counters.not_token_exact += 1
            counters.errors.append(
                f"rollout {traj.task_id}: not token-exact (the model returned "
                "text without its token ids; use a token backend)"
            )
            continue
        try:
            reward = float(reward_fn(traj)) if reward_fn is not None else float(traj.reward)
            if not math.isfinite(reward):
                raise ValueError(f"reward is {reward}")
        except Exception as e:  # noqa: BLE001 - a broken reward drops the sample, not the run
            counters.reward_errors += 1
            counters.errors.append(f"reward {traj.task_id}: {type(e).__name__}: {e}")
            log.warning(
                "reward function failed on task %s: %s: %s", traj.task_id, type(e).__name__, e
            )
            continue
        count_env_failure(traj, counters)
        if length_penalty:
            reward += float(
                objectives.turn_length_penalty(
                    torch.tensor([traj.num_turns]), length_threshold, max_turns
                )[0]
            )
        if overlong_buffer:
            reward += float(
                objectives.overlong_penalty(
                    torch.tensor([traj.num_tokens]), max_context_tokens, overlong_buffer
                )[0]
            )
        out.append(Scored(traj, group, reward))
    return out


def mask_failed_groups(
    trajs: Sequence[Trajectory], groups: Sequence[int], scored: list[Scored], counters: Counters
) -> list[Scored]:
    """Drop every scored member of a group in which an episode failed: it ended in ``FAILURES``
    (agents.trajectory: a rollout error, a timeout, a dead sandbox, no grading verdict) or was
    not scored at all (e.g. its reward function raised); counted in ``failure_masked``."""
    ok = {id(s.traj) for s in scored}
    failed = torch.tensor([id(t) not in ok or t.finish_reason in FAILURES for t in trajs])
    keep = objectives.keep_groups_without_failures(failed, torch.tensor(list(groups)))
    bad_groups = {g for g, k in zip(groups, keep.tolist(), strict=True) if not k}
    out = [s for s in scored if s.group not in bad_groups]
    counters.failure_masked += len(scored) - len(out)
    return out


def check_episode_errors(counters: Counters, max_share: float, where: str) -> None:
    """Raise :class:`EpisodesFailed` (with the first error) when every episode failed or more
    than ``max_share`` of them did; only the filters drop episodes on purpose."""
    failed = (
        counters.rollout_errors
        + counters.env_failures
        + counters.not_token_exact
        + counters.reward_errors
    )
    if not failed or (failed < counters.episodes and failed <= max_share * counters.episodes):
        return
    first = counters.errors[0] if counters.errors else "(no message)"
    raise EpisodesFailed(
        f"{where}: {failed} of {counters.episodes} episodes failed ({counters.rollout_errors} "
        f"rollout errors, {counters.env_failures} sandbox/grading failures, "
        f"{counters.not_token_exact} not token-exact, {counters.reward_errors} "
        f"reward errors; max_error_share={max_share}); first error: {first}"
    )


def assign_advantages(
    scored: list[Scored], estimator: str = "grpo", normalize_std: bool = True
) -> None:
    """Group advantages (``estimator``: grpo, docs/methods.md#grpo, or rloo,
    docs/methods.md#rloo) written into each ``Scored``."""
    if not scored:
        return
    rewards = torch.tensor([s.reward for s in scored], dtype=torch.float64)
    index = torch.tensor([s.group for s in scored])
    adv = objectives.compute_advantages(estimator, rewards, index, normalize_std=normalize_std)
    for s, a in zip(scored, adv.tolist(), strict=True):
        s.advantage = a


def apply_filter(name: str, scored: list[Scored]) -> list[Scored]:
    """The samples the named filter (``algos.objectives.FILTERS``) keeps."""
    if not scored:
        return []
    keep = objectives.keep_mask(
        name,
        torch.tensor([s.reward for s in scored], dtype=torch.float64),
        torch.tensor([s.group for s in scored]),
        torch.tensor([s.advantage for s in scored], dtype=torch.float64),
    )
    return [s for s, k in zip(scored, keep.tolist(), strict=True) if k]


def score_groups(
    trajs: Sequence[Trajectory],
    groups: Sequence[int],
    spec: ScoringSpec,
    reward_fn: Callable[[Trajectory], float] | None,
    counters: Counters,
    where: str,
) -> tuple[list[Scored], list[Scored]]:
    """One round of rolled-out groups, scored: rewards, the loud-failure check (raises
    :class:`EpisodesFailed`), failure masking, advantages (each group against its own members
    only), then the filter. Returns ``(every scored episode, the filter's survivors)``."""
    scored = score_trajectories(
        trajs,
        groups,
        reward_fn,
        counters,
        length_penalty=spec.length_penalty,
        length_threshold=spec.length_threshold,
        max_turns=spec.max_turns,
        overlong_buffer=spec.overlong_buffer,
        max_context_tokens=spec.max_context_tokens,
    )
    check_episode_errors(counters, spec.max_error_share, where)
    if spec.hack_monitor is not None:
        scored = spec.hack_monitor.apply(scored, counters)
    if spec.mask_failed_groups:
        scored = mask_failed_groups(trajs, groups, scored, counters)
    assign_advantages(scored, spec.advantage_estimator, spec.normalize_std)
    if spec.prefix_credit == "mean":  # the only reader of a group's mean (branched groups)
        means = group_mean_advantages(scored)
        for s in scored:
            s.prefix_advantage = means[s.group]
    survivors = apply_filter(spec.filter, scored)
    counters.filtered += len(scored) - len(survivors)
    return scored, survivors


def to_sample(
    traj: Trajectory,
    advantage: float,
    max_tokens: int,
    mask_invalid: bool,
    counters: Counters,
    sample_id: str,
) -> Sample | None:
    """The learner's view of a trajectory; truncated to ``max_tokens`` (counted)."""
    ids, mask, lps = traj.to_sample_arrays(mask_invalid=mask_invalid)
    if len(ids) > max_tokens:
        counters.truncated += 1
        ids, mask, lps = ids[:max_tokens], mask[:max_tokens], lps[:max_tokens]
    if len(ids) < 2 or sum(mask) == 0:
        counters.empty += 1
        return None
    return Sample(
        input_ids=ids,
        loss_mask=mask,
        behaviour_logprobs=[lp * m for lp, m in zip(lps, mask, strict=True)],
        advantage=advantage,
        sample_id=sample_id,
    )


def segments(traj: Trajectory) -> list[Trajectory]:
    """The token-exact sequences of an episode: one, or one per segment of a gateway session
    whose history the agent program rewrote (``agent["segment_starts"]``)."""
    starts = (getattr(traj, "agent", None) or {}).get("segment_starts") or [0]
    if len(starts) <= 1:
        return [traj]
    from agents.gateway import split_segments

    return split_segments(traj)


def episode_samples(
    traj: Trajectory,
    advantage: float,
    max_tokens: int,
    mask_invalid: bool,
    counters: Counters,
    sample_id: str,
) -> list[Sample]:
    """Every segment of the episode as a sample with the episode's advantage (the rule of
    verl's agent loop and rLLM: the reward is the episode's, its credit shared by each
    sequence it was sampled in). Token-mean losses weigh each token once, as one sequence
    would; ids ``sample_id`` or ``sample_id.k``."""
    parts = segments(traj)
    counters.segments += len(parts)
    out = []
    for k, part in enumerate(parts):
        sid = sample_id if len(parts) == 1 else f"{sample_id}.{k}"
        sample = to_sample(part, advantage, max_tokens, mask_invalid, counters, sid)
        if sample is not None:
            out.append(sample)
    return out


def to_samples(
    kept: Sequence[Scored],
    counters: Counters,
    *,
    max_tokens: int,
    mask_invalid: bool,
    overlong_filter: bool,
    prefix_credit: str = "none",
) -> list[Sample]:
    """The learner's samples of the kept episodes (overlong ones dropped when
    ``overlong_filter``, counted), each segment of an episode its own sample; ids
    ``task/index``. A branch's trunk tokens are credited by ``prefix_credit``
    (``algos.rollout.branching.credit_prefix``: the group's first kept branch carries them)."""
    samples: list[Sample] = []
    carried: set[int] = set()
    for i, s in enumerate(kept):
        if overlong_filter and is_overlong(s.traj):
            counters.overlong_dropped += 1
            continue
        made = episode_samples(
            s.traj, s.advantage, max_tokens, mask_invalid, counters, f"{s.traj.task_id}/{i}"
        )
        # a branch (one segment: agent programs do not branch); plain episodes skip the call
        shared = shared_tokens(s.traj) if getattr(s.traj, "branch_turn", None) else 0
        if shared and made:
            credited = credit_prefix(
                made[0], shared, prefix_credit, s.group not in carried, s.prefix_advantage
            )
            carried.add(s.group)
            counters.empty += credited is None
            made = [] if credited is None else [credited]
        samples += made
    return samples
