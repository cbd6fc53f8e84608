"""Modified DAPO for multi-turn SWE agents (docs/methods.md#modified-dapo).

``python -m algos.dapo --preset cpu`` (a few minutes on 2 CPU cores), ``--stage 1``, ``--stage 2``.

Each iteration samples ``problems_per_iteration`` tasks, rolls out ``group_size`` episodes per
task at temperature 1.0 (no top-k/top-p), rewards = resolved (0/1) + the turn-based length
penalty, group-normalised advantages, drops zero-advantage samples and refills with more
problems (bounded), then takes several optimiser steps (the batch split into mini-batches of
``batch_size`` trajectories) with the asymmetric clip and token-level averaging over policy
tokens only. The loop is :class:`algos.loop.trainer.Trainer`.

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
from typing import ClassVar

from algos.config import parse_config, warn
from algos.learner.cpu_bf16 import slow_bf16_warning
from algos.loop.trainer import run_cli
from algos.rl_common import PolicyGradientConfig


@dataclass
class DAPOConfig(PolicyGradientConfig):
    """Modified DAPO (defaults: Nebius stage 1, docs/methods.md#stages)."""

    # Nebius stage 1 where it differs from PolicyGradientConfig's (plain GRPO's) defaults
    iterations: int = 100
    problems_per_iteration: int = 300
    group_size: int = 10
    batch_size: int = 128
    max_steps_per_iteration: int = 8  # Nebius: 2-8
    filter: str = "nonzero_advantage"
    max_refill_rounds: int = 3
    length_penalty: bool = True
    loss: str = "dapo"
    agg_mode: str = "token-mean"
    kl_coef: float = 0.0  # modified DAPO has no KL term
    CLIP_DEFAULT: ClassVar[tuple[float, float]] = (0.2, 0.3)  # Nebius stage 1 (eps_low/eps_high)

    warm_start: str | None = None
    """A warm-start recipe (algos/presets/warm_start_NAME.yaml, or a YAML path): the first run
    builds its synthetic tasks, the oracle's runs and an RFT model (cached), later runs reuse
    them; the run trains that model on those tasks (algos/loop/warm_start.py)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if (slow_bf16 := slow_bf16_warning(self)) is not None:
            warn(slow_bf16)
        if self.kl_coef > 0:
            warn(
                f"kl_coef={self.kl_coef}: modified DAPO uses no KL term "
                "(docs/methods.md#modified-dapo); the KL penalty will be applied anyway"
            )


def main(argv: Sequence[str] | None = None) -> int:
    try:
        cfg = parse_config(
            DAPOConfig,
            argv,
            prog="python -m algos.dapo",
            description=__doc__.split("\n\n")[0],
            prefix="dapo",
            stages=True,
        )
    except ValueError as e:
        raise SystemExit(f"config error: {e}") from None
    if cfg.warm_start:
        from algos.loop.warm_start import apply

        try:
            cfg = apply(cfg)
        except ValueError as e:
            raise SystemExit(f"config error: {e}") from None
    return run_cli(cfg, "dapo")


if __name__ == "__main__":
    raise SystemExit(main())
