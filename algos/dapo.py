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

from algos.config import parse_config
from algos.config.dapo import DAPOConfig
from algos.loop.trainer import run_cli

__all__ = ["DAPOConfig", "main"]  # DAPOConfig lives in algos.config.dapo; imported from here too


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
