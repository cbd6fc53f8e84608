"""The objectives: pure RL math (advantages, filters, policy losses, loss aggregation, KL, entropy,
off-policy weights, reward shaping), one module per concern, each choice a registry by name.

Every function is a pure tensor function (no model, no optimiser, no I/O). Policy losses
are registered by name and share ONE signature::

    loss, metrics = fn(logprobs, old_logprobs, advantages, mask, *,
                       agg_mode="token-mean", global_token_count=None,
                       global_seq_count=None, **loss_kwargs)

with ``logprobs``, ``old_logprobs``, ``mask`` of shape ``[B, T]`` (one row per sequence, padded;
``mask`` 1 on policy tokens) and ``advantages`` ``[B, T]`` or ``[B]`` (per sequence, broadcast
over tokens). ``metrics`` maps names to Python floats computed over the tokens given (the
learner averages them over micro-batches weighted by token counts; keys ending in ``_max`` /
``_min`` are combined with max / min).

The formulas, the config fields that choose them and their sources: ``docs/methods.md``.
"""

from __future__ import annotations

from algos.objectives.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageEstimator,
    compute_advantages,
    group_advantages,
    register_advantage_estimator,
    rloo_advantages,
)
from algos.objectives.aggregation import (
    AGG_MODES,
    LOG_RATIO_CLAMP,
    agg_loss,
    masked_mean,
    masked_sum,
)
from algos.objectives.filters import (
    FILTERS,
    SampleFilter,
    keep_groups_without_failures,
    keep_mask,
    keep_nonconstant_groups,
    keep_nonzero_advantage,
)
from algos.objectives.kl import (
    KL_ESTIMATORS,
    entropy_from_logits,
    kl_estimate,
    kl_loss,
)
from algos.objectives.off_policy import (
    OFF_POLICY_CORRECTIONS,
    mismatch_metrics,
    off_policy_weights,
)
from algos.objectives.policy_losses import (
    CLIP_DEFAULTS,
    GSPO_CLIP,
    NEEDS_OLD_LOGPROBS,
    POLICY_LOSSES,
    PolicyLossFn,
    clipped_policy_loss,
    dapo_loss,
    get_policy_loss_fn,
    gspo_loss,
    pg_loss,
    ppo_loss,
    register_policy_loss,
    sft_loss,
)
from algos.objectives.shaping import (
    overlong_penalty,
    turn_length_penalty,
)

__all__ = [
    "AGG_MODES",
    "LOG_RATIO_CLAMP",
    "masked_sum",
    "masked_mean",
    "agg_loss",
    "group_advantages",
    "rloo_advantages",
    "AdvantageEstimator",
    "ADVANTAGE_ESTIMATORS",
    "register_advantage_estimator",
    "compute_advantages",
    "keep_nonconstant_groups",
    "keep_nonzero_advantage",
    "keep_groups_without_failures",
    "SampleFilter",
    "FILTERS",
    "keep_mask",
    "overlong_penalty",
    "turn_length_penalty",
    "KL_ESTIMATORS",
    "kl_estimate",
    "kl_loss",
    "entropy_from_logits",
    "PolicyLossFn",
    "POLICY_LOSSES",
    "NEEDS_OLD_LOGPROBS",
    "CLIP_DEFAULTS",
    "GSPO_CLIP",
    "register_policy_loss",
    "get_policy_loss_fn",
    "clipped_policy_loss",
    "ppo_loss",
    "dapo_loss",
    "pg_loss",
    "sft_loss",
    "gspo_loss",
    "OFF_POLICY_CORRECTIONS",
    "off_policy_weights",
    "mismatch_metrics",
]
