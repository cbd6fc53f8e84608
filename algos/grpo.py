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
from dataclasses import dataclass

from algos.config import ConfigError, parse_config
from algos.loop.trainer import run_cli
from algos.rl_common import PolicyGradientConfig


@dataclass
class GRPOConfig(PolicyGradientConfig):
    """GRPO (defaults: SWE-RL where published, docs/methods.md#grpo)."""

    clip_eps: float | None = None
    """Symmetric clip range of the ratio: sets eps_low and eps_high both (set those instead for
    an asymmetric clip). None: 0.2 (DeepSeekMath), or the loss's own range (gspo: 3e-4/4e-4)."""
    max_context_tokens: int = 16384  # SWE-RL: 16k

    def __post_init__(self) -> None:
        if self.clip_eps is not None:  # before the shared clip checks, which see its values
            if not 0 < self.clip_eps < 1:
                raise ConfigError(f"clip_eps must be in (0, 1); got {self.clip_eps}")
            for side in ("eps_low", "eps_high"):
                if getattr(self, side) not in (None, self.clip_eps):
                    raise ConfigError(
                        f"clip_eps={self.clip_eps} and {side}={getattr(self, side)} disagree: "
                        "set clip_eps alone (symmetric) or eps_low and eps_high (asymmetric)"
                    )
                setattr(self, side, self.clip_eps)
        super().__post_init__()
        if self.batch_size % self.group_size:
            raise ConfigError(
                f"batch_size={self.batch_size} is not divisible by group_size="
                f"{self.group_size}; set batch_size to a multiple of it (e.g. "
                f"{self.problems_per_iteration * self.group_size})"
            )
        if self.kl_coef <= 0:
            raise ConfigError(
                f"GRPO needs kl_coef > 0 (got {self.kl_coef}); for no KL term use algos.dapo"
            )


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
