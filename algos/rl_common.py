"""What the GRPO and DAPO configs share: their checks and the LearnerConfig they imply."""

from __future__ import annotations

from typing import Any

from algos import core
from algos.config import ConfigError
from algos.learner import LearnerConfig
from algos.scoring import FILTERS
from swe_gym.errors import unknown_choice

ON_EXHAUSTED = ("error", "skip")
OLD_LOGPROBS = ("auto", "sampler", "recompute")


def validate_rl_config(cfg: Any) -> None:
    """Checks GRPO and DAPO share (called from their ``__post_init__``, before any work)."""
    if cfg.filter not in FILTERS:
        raise unknown_choice("filter", cfg.filter, FILTERS)
    if cfg.on_exhausted not in ON_EXHAUSTED:
        raise unknown_choice("on_exhausted", cfg.on_exhausted, ON_EXHAUSTED)
    if cfg.old_logprobs not in OLD_LOGPROBS:
        raise unknown_choice("old_logprobs", cfg.old_logprobs, OLD_LOGPROBS)
    for name in ("iterations", "problems_per_iteration", "group_size", "batch_size",
                 "max_steps_per_iteration"):
        if getattr(cfg, name) < 1:
            raise ConfigError(f"{name} must be >= 1; got {getattr(cfg, name)}")
    if cfg.max_refill_rounds < 0:
        raise ConfigError(f"max_refill_rounds must be >= 0; got {cfg.max_refill_rounds}")
    if cfg.group_size < 2 and cfg.filter != "none":
        raise ConfigError(
            f"group_size={cfg.group_size}: a group of one has zero advantage, so filter="
            f"{cfg.filter!r} would drop every sample; use group_size >= 2")
    if cfg.length_penalty and cfg.length_threshold >= cfg.max_turns:
        raise ConfigError(
            f"length_penalty needs length_threshold < max_turns (T_max); got length_threshold="
            f"{cfg.length_threshold}, max_turns={cfg.max_turns}")
    if cfg.kl_coef < 0:
        raise ConfigError(f"kl_coef must be >= 0; got {cfg.kl_coef}")
    core.get_policy_loss_fn(cfg.loss)
    if cfg.agg_mode not in core.AGG_MODES:
        raise unknown_choice("agg_mode", cfg.agg_mode, core.AGG_MODES)
    if cfg.kl_estimator not in core.KL_ESTIMATORS:
        raise unknown_choice("kl_estimator", cfg.kl_estimator, core.KL_ESTIMATORS)


def learner_config_from(cfg: Any, loss_kwargs: dict[str, Any]) -> LearnerConfig:
    """The LearnerConfig an RL config implies (constant lr after warm-up,
    docs/methods.md#modified-dapo)."""
    return LearnerConfig(
        lr=cfg.lr, weight_decay=cfg.weight_decay, grad_clip=cfg.grad_clip,
        warmup_steps=cfg.warmup_steps, schedule="constant",
        micro_batch_tokens=cfg.micro_batch_tokens, bf16=cfg.bf16,
        grad_checkpointing=cfg.grad_checkpointing, loss=cfg.loss, loss_kwargs=loss_kwargs,
        agg_mode=cfg.agg_mode, kl_coef=cfg.kl_coef, kl_estimator=cfg.kl_estimator,
        entropy_coef=cfg.entropy_coef, log_entropy=True, temperature=cfg.temperature,
        off_policy_correction=getattr(cfg, "off_policy_correction", "none"),
        is_cap=getattr(cfg, "is_cap", 2.0), tree_packing=getattr(cfg, "tree_packing", True),
    )


def resolve_old_logprobs(cfg: Any, on_policy: bool, shares_weights: bool) -> str:
    """``old_logprobs`` made concrete: ``auto`` takes the sampler's log-probs only when the
    sampler is the training module itself and no off-policy correction is asked for (a
    correction needs the learner's log-probs next to the sampler's), else ``recompute``."""
    mode = cfg.old_logprobs
    if mode == "auto":
        correct = getattr(cfg, "off_policy_correction", "none") != "none"
        mode = "sampler" if on_policy and shares_weights and not correct else "recompute"
    if mode == "sampler" and not on_policy:
        raise ConfigError(
            f"old_logprobs='sampler' needs on-policy rollouts; rollout_model="
            f"{cfg.rollout_model!r} is another model: use old_logprobs=recompute")
    return mode
