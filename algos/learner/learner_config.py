"""A learner's config (``LearnerConfig``, its LR schedule) and what the loops use of a learner."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn

from algos import objectives
from algos.learner.samples import Sample
from algos.learner.tree import DEFAULT_MIN_PREFIX
from swe_gym.errors import unknown_choice

SCHEDULES = ("constant", "cosine")


@dataclass
class LearnerConfig:
    """Everything the learner reads. Defaults: the Nebius DAPO stage 1 (docs/methods.md#stages)."""

    lr: float = 1e-6
    """Peak learning rate (AdamW)."""
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.1
    """Applied to matrices only (ndim >= 2); biases and norm weights are not decayed."""
    grad_clip: float | None = 1.0
    """Max global gradient norm; None disables clipping (the norm is still reported)."""
    warmup_steps: int = 0
    """Linear warm-up: step k (0-based) uses lr * (k + 1) / warmup_steps."""
    schedule: str = "constant"
    """After warm-up: "constant" or "cosine" (to min_lr_ratio * lr at total_steps)."""
    total_steps: int | None = None
    """Needed by the cosine schedule."""
    min_lr_ratio: float = 0.0
    micro_batch_tokens: int = 8192
    """Token budget of one micro-batch (one forward/backward)."""
    packing: bool = True
    """Pack sequences into rows without padding; False pads one sequence per row (baseline)."""
    packed_attention: bool = True
    """With packing, switch an sdpa model to ``packed_sdpa`` (algos.learner.attention): SDPA on each
    sequence of a packed row (cost sum n_i^2, no [L, L] mask) instead of a 4D block mask."""
    tree_packing: bool = True
    """With packed attention, samples sharing a token prefix (a GRPO/DAPO group's prompt) are
    packed as the prefix once plus each continuation (algos.learner.tree): same loss, log-probs and
    gradients, the prefix computed once. Off (or another attention implementation, or a
    sharded learner): plain packing."""
    tree_min_prefix: int = DEFAULT_MIN_PREFIX
    """Shared tokens below which a group is packed plainly."""
    bf16: bool = False
    """Run the transformer under bfloat16 autocast (parameters and optimiser stay as they are);
    on CUDA the log-prob head's GEMMs run in bfloat16 too (float32 softmax and accumulation)."""
    bf16_compute_copy: bool | None = None
    """With bf16: forward/backward on a bf16 copy of the weights, refreshed from the float32
    master weights once per step, gradients summed back in float32 (algos.learner.precision), instead
    of autocast's per-op casts. None: on CUDA in one process (FSDP2 mixed precision does it
    under torchrun); True: also on CPU."""
    liger: bool = True
    """On CUDA, patch the model with Liger's fused RMSNorm/SwiGLU/RoPE kernels when the
    optional liger-kernel package is installed (never used on CPU)."""
    grad_checkpointing: bool = False
    """model.gradient_checkpointing_enable() (non-reentrant)."""
    loss: str = "dapo"
    """Policy loss name in algos.objectives's registry (sft, pg, ppo, grpo, dapo, ...)."""
    loss_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments of the loss (eps_low, eps_high, clip_eps, dual_clip)."""
    agg_mode: str = "token-mean"
    """One of algos.objectives.AGG_MODES."""
    kl_coef: float = 0.0
    """beta of the KL(pi || pi_ref) penalty; > 0 needs a reference model or ref_logprobs."""
    kl_estimator: str = "k3"
    entropy_coef: float = 0.0
    """Entropy bonus weight (0: entropy is only logged when log_entropy)."""
    log_entropy: bool = False
    temperature: float = 1.0
    """Sampling temperature the old log-probs were taken at."""
    logprob_chunk_size: int | None = None
    """Rows per chunk of the log-prob head; None sizes it from the vocabulary."""
    off_policy_correction: str = "none"
    """none, tis (truncated importance sampling) or decoupled (decoupled PPO): weights the
    per-token loss by the learner/behaviour probability ratio (algos.objectives.off_policy_weights)."""
    is_cap: float = 2.0
    """C of the off-policy correction: tis truncates the weight at C, decoupled drops tokens
    whose weight exceeds C."""

    def __post_init__(self) -> None:
        if len(self.betas) != 2:
            raise ValueError(f"betas must be two floats (beta1, beta2); got {self.betas}")
        self.betas = (self.betas[0], self.betas[1])  # from JSON/CLI lists
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0; got {self.lr}")
        if self.schedule not in SCHEDULES:
            raise unknown_choice("schedule", self.schedule, SCHEDULES)
        if self.schedule == "cosine" and (
            self.total_steps is None or self.total_steps <= self.warmup_steps
        ):
            raise ValueError(
                f"schedule 'cosine' needs total_steps > warmup_steps; got total_steps="
                f"{self.total_steps}, warmup_steps={self.warmup_steps}"
            )
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0; got {self.warmup_steps}")
        if self.micro_batch_tokens < 1:
            raise ValueError(f"micro_batch_tokens must be >= 1; got {self.micro_batch_tokens}")
        if self.grad_clip is not None and self.grad_clip <= 0:
            raise ValueError(f"grad_clip must be > 0 or None; got {self.grad_clip}")
        objectives.get_policy_loss_fn(self.loss)  # fails listing the accepted names
        if self.agg_mode not in objectives.AGG_MODES:
            raise unknown_choice("agg_mode", self.agg_mode, objectives.AGG_MODES)
        if self.kl_estimator not in objectives.KL_ESTIMATORS:
            raise unknown_choice("kl_estimator", self.kl_estimator, objectives.KL_ESTIMATORS)
        if self.kl_coef < 0:
            raise ValueError(f"kl_coef must be >= 0; got {self.kl_coef}")
        if self.off_policy_correction not in objectives.OFF_POLICY_CORRECTIONS:
            raise unknown_choice(
                "off_policy_correction",
                self.off_policy_correction,
                objectives.OFF_POLICY_CORRECTIONS,
            )
        if (
            self.off_policy_correction != "none"
            and self.loss not in objectives.NEEDS_OLD_LOGPROBS | {"pg"}
        ):
            raise ValueError(
                f"off_policy_correction={self.off_policy_correction!r} weights a "
                f"policy-gradient loss; loss {self.loss!r} has no importance ratio"
            )
        if self.is_cap <= 0:
            raise ValueError(f"is_cap must be > 0; got {self.is_cap}")


@dataclass
class LRSchedule:
    """Multiplier of the peak lr at optimiser step k (picklable, for LambdaLR state)."""

    warmup_steps: int
    schedule: str
    total_steps: int | None
    min_lr_ratio: float

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        if self.schedule == "constant" or self.total_steps is None:  # config: cosine has it
            return 1.0
        span = max(1, self.total_steps - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / span)
        return self.min_lr_ratio + (1 - self.min_lr_ratio) * 0.5 * (
            1 + math.cos(math.pi * progress)
        )


class PolicyLearner(Protocol):
    """What the loops (``algos.loop.trainer``, ``algos.loop.rft_loop``, ``algos.loop.run_state``) use of a learner:
    :class:`Learner` in one process, ``algos.distributed.learner.DistributedLearner`` (FSDP2,
    which adds ``ctx``) under torchrun. ``step`` is the optimiser step, the version of the weights
    pushed to the engine."""

    step: int
    skipped_steps: int

    @property
    def model(self) -> nn.Module: ...

    @property
    def optimizer(self) -> torch.optim.Optimizer: ...

    @property
    def scheduler(self) -> torch.optim.lr_scheduler.LRScheduler: ...

    def train_step(self, samples: Sequence[Sample]) -> dict[str, float]: ...

    def compute_logprobs(
        self, samples: Sequence[Sample], model: nn.Module | None = None, *, loss_only: bool = False
    ) -> list[list[float]]: ...

    def save_checkpoint(
        self, directory: str | os.PathLike[str], extra_state: dict[str, Any] | None = None
    ) -> None: ...

    def load_checkpoint(self, directory: str | os.PathLike[str]) -> dict[str, Any]: ...
