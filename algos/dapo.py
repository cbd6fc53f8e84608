"""Modified DAPO for multi-turn SWE agents (docs/methods.md#modified-dapo).

``python -m algos.dapo --preset cpu`` (a few minutes on 2 CPU cores), ``--stage 1``, ``--stage 2``.

Each iteration samples ``problems_per_iteration`` tasks, rolls out ``group_size`` episodes per
task at temperature 1.0 (no top-k/top-p), rewards = resolved (0/1) + the turn-based length
penalty, group-normalised advantages, drops zero-advantage samples and refills with more
problems (bounded), then takes several optimiser steps (the batch split into mini-batches of
``batch_size`` trajectories) with the asymmetric clip and token-level averaging over policy
tokens only. The loop is :class:`algos.trainer.Trainer`.

How this departs from the papers:

- Nebius drops zero-advantage samples (the default ``filter=nonzero_advantage``); DAPO's rule
  (drop groups whose rewards are all equal) is ``filter=nonconstant_group``.
- When the filter leaves fewer than ``batch_size`` samples after ``max_refill_rounds`` refills
  the run stops with a clear error (``on_exhausted=error``, DAPO's "error when exhausted");
  ``on_exhausted=skip`` skips and counts the iteration instead.
- The number of optimiser steps per iteration is ``kept // batch_size`` capped at
  ``max_steps_per_iteration`` (Nebius: 2-8); the kept samples are split evenly over them.
- Overlong trajectories are kept (Nebius); ``overlong_filter=true`` drops them (DAPO).
- Stage 2's task pool is filtered from a stage-1 ``solve_rates.json`` (drop tasks solved
  >= 2/3 of the time and never solved); every run writes that file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from algos.config import ConfigError, RLConfig, parse_config, warn
from algos.cpu_bf16 import slow_bf16_warning
from algos.learner import LearnerConfig
from algos.rl_common import learner_config_from, validate_rl_config
from algos.trainer import run_cli


@dataclass
class DAPOConfig(RLConfig):
    """Modified DAPO (defaults: Nebius stage 1, docs/methods.md#stages)."""

    iterations: int = 100
    """Training iterations (rollouts + several optimiser steps each)."""
    problems_per_iteration: int = 300
    """Tasks sampled per iteration (before refills)."""
    group_size: int = 10
    """Episodes per task (G); advantages are normalised within a group."""
    batch_size: int = 128
    """Trajectories per optimiser step; also the fewest samples an iteration needs after
    filtering."""
    max_steps_per_iteration: int = 8
    """At most this many optimiser steps per iteration (Nebius: 2-8)."""
    filter: str = "nonzero_advantage"
    """Which samples are dropped: nonzero_advantage (Nebius), nonconstant_group (DAPO), none."""
    max_refill_rounds: int = 3
    """Extra rollout rounds (more problems) when too few samples survive the filter."""
    refill_problems: int | None = None
    """Tasks per refill round (default: problems_per_iteration)."""
    on_exhausted: str = "error"
    """After the last refill round with too few samples: error (stop with a clear message) or
    skip (count the iteration as skipped and go on)."""
    normalize_std: bool = True
    """Divide advantages by the group std (false: mean-centred only)."""
    length_penalty: bool = True
    """Add the turn-based length penalty to the reward
    (docs/methods.md#turn-based-length-penalty)."""
    length_threshold: int = 10
    """L_thr of the length penalty, in turns (T_max is max_turns)."""
    overlong_filter: bool = False
    """Drop episodes cut by a limit (max turns, context, completion length) from the loss."""
    mask_invalid: bool = False
    """Mask turns whose action the env rejected out of the loss (RFT does this)."""
    reward_fn: str | None = None
    """'module:function' computing the reward from a Trajectory (default: the env's reward)."""
    old_logprobs: str = "auto"
    """Log-probs of the importance ratio's denominator: sampler (the engine's), recompute (the
    learner's before the first step), auto (sampler when the engine shares the policy module)."""
    loss: str = "dapo"
    """Policy loss name in algos.core's registry."""
    eps_low: float = 0.2
    """Lower clip range: ratio >= 1 - eps_low."""
    eps_high: float = 0.3
    """Upper clip range (clip-higher): ratio <= 1 + eps_high."""
    agg_mode: str = "token-mean"
    """Loss aggregation: token-mean = sum over policy tokens / tokens in the whole batch."""
    kl_coef: float = 0.0
    """KL(pi || pi_ref) weight; the method uses none."""
    kl_estimator: str = "k3"
    """k1, k2 or k3 (docs/methods.md#kl-estimators)."""
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
    solve_rates: str | None = None
    """A solve_rates.json from an earlier run: keep only tasks with 0 < rate < 2/3 (stage 2)."""
    yarn_factor: float | None = None
    """Extend the rope with YaRN by this factor (stage 2: 4)."""
    warm_start: str | None = None
    """A warm-start recipe (algos/presets/warm_start_NAME.yaml, or a YAML path): the first run
    builds its synthetic tasks, the oracle's runs and an RFT model (cached), later runs reuse
    them; the run trains that model on those tasks (algos/warm_start.py)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        validate_rl_config(self)
        if not 0 <= self.eps_low < 1:
            raise ConfigError(f"eps_low must be in [0, 1); got {self.eps_low}")
        if self.eps_high < 0:
            raise ConfigError(f"eps_high must be >= 0; got {self.eps_high}")
        if self.eps_low > self.eps_high:
            raise ConfigError(
                f"eps_low={self.eps_low} > eps_high={self.eps_high}: clip-higher needs "
                "eps_high >= eps_low (Nebius: 0.2/0.3 stage 1, 0.2/0.26 stage 2)")
        if (slow_bf16 := slow_bf16_warning(self)) is not None:
            warn(slow_bf16)
        if self.kl_coef > 0:
            warn(f"kl_coef={self.kl_coef}: modified DAPO uses no KL term "
                 "(docs/methods.md#modified-dapo); the KL penalty will be applied anyway")

    def learner_config(self) -> LearnerConfig:
        kwargs = {} if self.loss in ("pg", "sft") else {"eps_low": self.eps_low,
                                                         "eps_high": self.eps_high}
        return learner_config_from(self, kwargs)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        cfg = parse_config(DAPOConfig, argv, prog="python -m algos.dapo",
                           description=__doc__.split("\n\n")[0], prefix="dapo", stages=True)
    except ValueError as e:
        raise SystemExit(f"config error: {e}") from None
    if cfg.warm_start:
        from algos.warm_start import apply

        try:
            cfg = apply(cfg)
        except ValueError as e:
            raise SystemExit(f"config error: {e}") from None
    return run_cli(cfg, "dapo")


if __name__ == "__main__":
    raise SystemExit(main())
