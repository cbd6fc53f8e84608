"""``RFTConfig``: rejection fine-tuning's settings (defaults: Nebius RFT, docs/methods.md#rft)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from algos.config import ConfigError, require_at_least
from algos.config.run import RunConfig
from algos.learner.learner_config import LearnerConfig
from swe_gym.errors import unknown_choice

# the format probe's kinds (algos/loop/format_probe.py)
PROBES = ("greedy", "sample")


@dataclass
class RFTConfig(RunConfig):
    """Rejection fine-tuning (defaults: Nebius RFT, docs/methods.md#rft)."""

    trajectories: list[str] | None = None
    """Trajectory JSONL files to train on instead of rolling out (comma-separated)."""
    runs_per_task: int = 10
    """Episodes per task when rolling out (Nebius: 10)."""
    mask_invalid: bool = True
    """Mask turns whose action the env rejected (format errors) out of the loss."""
    epochs: int = 1
    """Passes over the kept trajectories."""
    batch_size: int = 64
    """Trajectories per optimiser step."""
    lr: float = 5e-6
    """Peak AdamW learning rate."""
    warmup_steps: int = 10
    """Linear warm-up steps, then cosine to 0."""
    probe_contexts: int = 0
    """Turn contexts of the kept trajectories the format probe samples a reply for, before the
    first epoch and after each (format_valid in the metrics); 0: no probe."""
    probe: str = "greedy"
    """Format probe (algos/loop/format_probe.py): greedy (one forward pass: the share of valid turns
    greedy decoding reproduces, a lower bound) or sample (sampled replies parsed as the env
    would: the format-valid rate itself, minutes per probe on a CPU)."""
    format_patience: int = 0
    """Stop after this many epochs in a row without a rise of format_valid (epochs is then a
    maximum; needs probe_contexts); 0: run every epoch."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require_at_least(self, 1, "runs_per_task", "epochs")
        try:  # lr, warmup_steps and the learner mapping: LearnerConfig's checks, run now
            self.learner_config(total_steps=max(self.warmup_steps, 0) + 1)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        for path in self.trajectories or []:
            if not Path(path).is_file():
                raise ConfigError(f"trajectory file {path!r} does not exist")
        if self.probe_contexts < 0 or self.format_patience < 0:
            raise ConfigError("probe_contexts and format_patience must be >= 0")
        if self.probe not in PROBES:
            raise unknown_choice("probe", self.probe, PROBES)
        if self.format_patience and not self.probe_contexts:
            raise ConfigError("format_patience stops on the format probe: set probe_contexts too")
        for name in ("agent", "agent_cmd"):
            if self.trajectories and getattr(self, name):
                raise ConfigError(
                    f"{name}={getattr(self, name)!r} runs the rollouts, but trajectories="
                    f"{self.trajectories} replace them: pass one or the other"
                )

    def learner_config(self, total_steps: int) -> LearnerConfig:
        warmup = min(self.warmup_steps, max(0, total_steps - 1))
        return LearnerConfig(
            lr=self.lr,
            weight_decay=self.weight_decay,
            grad_clip=self.grad_clip,
            warmup_steps=warmup,
            schedule="cosine",
            total_steps=total_steps,
            micro_batch_tokens=self.micro_batch_tokens,
            bf16=self.bf16,
            grad_checkpointing=self.grad_checkpointing,
            loss="sft",
            agg_mode="token-mean",
            temperature=self.temperature,
            tree_packing=self.tree_packing,
            **{"min_lr_ratio": 0.0, **self.learner},
        )
