"""``DAPOConfig``: modified DAPO's settings (defaults: Nebius stage 1, docs/methods.md#stages)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from algos.config import warn
from algos.config.policy_gradient import PolicyGradientConfig
from algos.learner.cpu_bf16 import slow_bf16_warning


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
