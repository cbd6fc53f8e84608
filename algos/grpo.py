"""GRPO as in SWE-RL (docs/methods.md#grpo): group-normalised advantages, clipped ratio, KL to the
reference policy.

``python -m algos.grpo --env SWERL-v0`` (single-turn patch generation with the similarity
reward) or on a multi-turn env (``--env SWEStarter-v0``, the default). The loop is
:class:`algos.trainer.Trainer`, the same as DAPO's; the named choices differ: symmetric clip
``clip_eps``, ``kl_coef > 0`` with the k3 estimator against a frozen copy of the initial policy,
no filter, no length penalty, sequence-mean aggregation (the GRPO paper's form).

How this departs from the paper: SWE-RL does not publish clip eps, beta, lr or temperature; the
defaults here (0.2, 0.04, 1e-6, 1.0) are DeepSeekMath's GRPO values. One iteration = one
optimiser step on ``problems_per_iteration x group_size`` trajectories by default
(``batch_size`` smaller than that splits the iteration into several steps).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from algos.config import ConfigError, RLConfig, parse_config
from algos.learner import LearnerConfig
from algos.rl_common import learner_config_from, validate_rl_config
from algos.trainer import run_cli


@dataclass
class GRPOConfig(RLConfig):
    """GRPO (defaults: SWE-RL where published, docs/methods.md#grpo)."""

    iterations: int = 1600
    """Training iterations (SWE-RL: 1,600 steps)."""
    problems_per_iteration: int = 32
    """Tasks sampled per iteration (SWE-RL: 32)."""
    group_size: int = 16
    """Episodes per task (SWE-RL: 16 rollouts)."""
    batch_size: int = 512
    """Trajectories per optimiser step; a multiple of group_size (whole groups per step)."""
    max_steps_per_iteration: int = 1
    """At most this many optimiser steps per iteration."""
    clip_eps: float = 0.2
    """Symmetric clip range of the ratio."""
    kl_coef: float = 0.04
    """beta of the KL(pi || pi_ref) penalty (must be > 0 for GRPO)."""
    kl_estimator: str = "k3"
    """k1, k2 or k3 (docs/methods.md#kl-estimators)."""
    loss: str = "grpo"
    """Policy loss name in algos.core's registry."""
    agg_mode: str = "seq-mean-token-mean"
    """Loss aggregation (GRPO paper: mean over tokens, then over sequences)."""
    normalize_std: bool = True
    """Divide advantages by the group std."""
    filter: str = "none"
    """Which samples are dropped before the update: none, nonzero_advantage, nonconstant_group."""
    max_refill_rounds: int = 0
    """Extra rollout rounds when a filter leaves fewer than batch_size samples."""
    refill_problems: int | None = None
    """Tasks per refill round (default: problems_per_iteration)."""
    on_exhausted: str = "error"
    """After the last refill round with too few samples: error or skip."""
    length_penalty: bool = False
    """Add the turn-based length penalty to the reward (multi-turn envs)."""
    length_threshold: int = 10
    """L_thr of the length penalty, in turns."""
    overlong_filter: bool = False
    """Drop episodes cut by a limit (turns, context, completion length) from the loss."""
    mask_invalid: bool = False
    """Mask turns whose action the env rejected out of the loss."""
    reward_fn: str | None = None
    """'module:function' computing the reward from a Trajectory (default: the env's reward)."""
    old_logprobs: str = "auto"
    """sampler, recompute or auto (sampler when the engine shares the policy module)."""
    entropy_coef: float = 0.0
    """Entropy bonus weight (entropy is always logged)."""
    lr: float = 1e-6
    """AdamW learning rate (constant after warm-up)."""
    weight_decay: float = 0.1
    """AdamW weight decay."""
    warmup_steps: int = 0
    """Linear warm-up steps."""
    grad_clip: float = 1.0
    """Max gradient norm."""
    max_context_tokens: int = 16384
    """Prompt + completion budget (SWE-RL: 16k)."""
    solve_rates: str | None = None
    """A solve_rates.json: keep only tasks with 0 < rate < 2/3."""
    yarn_factor: float | None = None
    """Extend the rope with YaRN by this factor."""

    def __post_init__(self) -> None:
        super().__post_init__()
        validate_rl_config(self)
        if self.batch_size % self.group_size:
            raise ConfigError(
                f"batch_size={self.batch_size} is not divisible by group_size="
                f"{self.group_size}; set batch_size to a multiple of it (e.g. "
                f"{self.problems_per_iteration * self.group_size})")
        if self.kl_coef <= 0:
            raise ConfigError(
                f"GRPO needs kl_coef > 0 (got {self.kl_coef}); for no KL term use algos.dapo")
        if not 0 < self.clip_eps < 1:
            raise ConfigError(f"clip_eps must be in (0, 1); got {self.clip_eps}")

    def learner_config(self) -> LearnerConfig:
        kwargs = {} if self.loss in ("pg", "sft") else {"eps_low": self.clip_eps,
                                                         "eps_high": self.clip_eps}
        return learner_config_from(self, kwargs)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        cfg = parse_config(GRPOConfig, argv, prog="python -m algos.grpo",
                           description=__doc__.split("\n\n")[0], prefix="grpo")
    except ValueError as e:
        raise SystemExit(f"config error: {e}") from None
    return run_cli(cfg, "grpo")


if __name__ == "__main__":
    raise SystemExit(main())
