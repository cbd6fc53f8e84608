"""GRPO as in SWE-RL (docs/methods.md#grpo): group-normalised advantages, clipped ratio, KL to the
reference policy.

``python -m algos.grpo --env SWERL-v0`` (single-turn patch generation with the similarity
reward) or on a multi-turn env (``--env SWEStarter-v0``, the default). The loop is
:class:`algos.loop.trainer.Trainer`, the same as DAPO's; the named choices differ: symmetric clip
``clip_eps`` (or ``eps_low``/``eps_high``), ``kl_coef > 0`` with the k3 estimator against a frozen copy of the initial policy,
no filter, no length penalty, sequence-mean aggregation (the GRPO paper's form).

How this departs from the paper: SWE-RL does not publish clip eps, beta, lr or temperature; the
defaults here (0.2, 0.04, 1e-6, 1.0) are DeepSeekMath's GRPO values. One iteration = one
optimiser step on ``problems_per_iteration x group_size`` trajectories by default
(``batch_size`` smaller than that splits the iteration into several steps).
"""

from __future__ import annotations

from collections.abc import Sequence

from algos.config import parse_config
from algos.config.grpo import GRPOConfig
from algos.loop.trainer import run_cli

__all__ = ["GRPOConfig", "main"]  # GRPOConfig lives in algos.config.grpo; imported from here too


def main(argv: Sequence[str] | None = None) -> int:
    try:
        cfg = parse_config(
            GRPOConfig,
            argv,
            prog="python -m algos.grpo",
            description=__doc__.split("\n\n")[0],
            prefix="grpo",
        )
    except ValueError as e:
        raise SystemExit(f"config error: {e}") from None
    return run_cli(cfg, "grpo")


if __name__ == "__main__":
    raise SystemExit(main())
