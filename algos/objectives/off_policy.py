"""Off-policy correction: per-token weights from the sampler's (behaviour) and the learner's
(proximal) log-probs, registered by name (``off_policy_correction``), and how far they differ."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from algos.objectives.aggregation import LOG_RATIO_CLAMP, masked_mean
from algos.objectives.kl import kl_estimate
from swe_gym.errors import unknown_choice

# name -> fn(w, over) -> weights, with w = exp(proximal - behaviour) and over = w > cap
OFF_POLICY_CORRECTIONS: dict[str, Callable[[Tensor, Tensor, float], Tensor]] = {
    "none": lambda w, over, cap: torch.ones_like(w),
    "tis": lambda w, over, cap: w.clamp(max=cap),
    "decoupled": lambda w, over, cap: torch.where(over, torch.zeros_like(w), w),
}


def off_policy_weights(
    proximal_logprobs: Tensor,
    behaviour_logprobs: Tensor,
    mask: Tensor,
    *,
    kind: str = "tis",
    cap: float = 2.0,
) -> tuple[Tensor, dict[str, float]]:
    """Per-token weights ``[B, T]`` (no gradient) correcting for the behaviour/learner gap.

    ``w = exp(proximal - behaviour)``: the learner's probability of the sampled token (before the
    step) over the sampler's.

    - ``tis`` (truncated importance sampling; Yao et al. 2025, verl/prime-rl "TIS"):
      ``min(w, cap)``.
    - ``decoupled`` (decoupled PPO's behaviour weight, Hilton et al. 2022 / AReaL): ``w`` where
      ``w <= cap``, 0 above (the token is dropped, still counted in the normaliser); the
      policy loss is then clipped around the proximal policy (``old_logprobs = proximal``).
    - ``none``: all ones.

    Metrics: ``is_weight_mean`` (after truncation) and ``is_capped_frac`` (share of policy
    tokens with ``w > cap``).
    """
    if kind not in OFF_POLICY_CORRECTIONS:
        raise unknown_choice("off-policy correction", kind, OFF_POLICY_CORRECTIONS)
    if cap <= 0:
        raise ValueError(f"importance weight cap must be > 0; got {cap}")
    with torch.no_grad():
        log_w = (proximal_logprobs - behaviour_logprobs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        w = torch.exp(log_w)
        over = w > cap
        out = OFF_POLICY_CORRECTIONS[kind](w, over, cap)
        m = mask.bool()
        metrics = {
            "is_weight_mean": masked_mean(out, m).item(),
            "is_capped_frac": masked_mean(over.float(), m).item(),
        }
    return out, metrics


def mismatch_metrics(
    learner_logprobs: Tensor, behaviour_logprobs: Tensor, mask: Tensor
) -> dict[str, float]:
    """How far the sampler's log-probs are from the learner's on the sampled tokens.

    ``mismatch_kl``: k3 estimate of KL(behaviour || learner) (tokens were drawn from the behaviour policy);
    ``mismatch_ratio_mean/max/min``: ``exp(learner - behaviour)`` over the policy tokens (1 when
    they agree).
    """
    with torch.no_grad():
        m = mask.bool()
        # float64: a float32 k3 of two nearly equal policies (KL ~1e-10) is all rounding noise
        learner_logprobs, behaviour_logprobs = (
            learner_logprobs.double(),
            behaviour_logprobs.double(),
        )
        log_r = (learner_logprobs - behaviour_logprobs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        r = torch.exp(log_r)
        any_tok = bool(m.any())
        return {
            "mismatch_kl": masked_mean(
                kl_estimate(behaviour_logprobs, learner_logprobs, "k3"), m
            ).item(),
            "mismatch_ratio_mean": masked_mean(r, m).item(),
            "mismatch_ratio_max": r[m].max().item() if any_tok else 1.0,
            "mismatch_ratio_min": r[m].min().item() if any_tok else 1.0,
        }
