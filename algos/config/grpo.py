"""``GRPOConfig``: GRPO's settings (defaults: SWE-RL where published, docs/methods.md#grpo)."""

from __future__ import annotations

from dataclasses import dataclass

from algos.config import ConfigError
from algos.config.policy_gradient import PolicyGradientConfig


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
