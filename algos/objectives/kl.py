"""KL to a reference policy (estimators registered by name, ``kl_estimator``) and entropy."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from algos.objectives.aggregation import LOG_RATIO_CLAMP, agg_loss, masked_mean
from swe_gym.errors import unknown_choice


def _k3(diff: Tensor) -> Tensor:
    log_r = (-diff).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return torch.exp(log_r) - log_r - 1.0


# name -> fn(logp - ref) -> per-token estimate
KL_ESTIMATORS: dict[str, Callable[[Tensor], Tensor]] = {
    "k1": lambda diff: diff,
    "k2": lambda diff: 0.5 * diff.square(),
    "k3": _k3,
}


def kl_estimate(logprobs: Tensor, ref_logprobs: Tensor, kind: str = "k3") -> Tensor:
    """Per-token KL(pi || pi_ref) estimators on sampled tokens (docs/methods.md#kl-estimators).

    ``k1 = logp - ref``; ``k2 = (logp - ref)^2 / 2``; ``k3 = exp(ref - logp) - (ref - logp) - 1``
    (unbiased, non-negative; GRPO's choice). The log-ratio is clamped to +-20 before exp.
    """
    if kind not in KL_ESTIMATORS:
        raise unknown_choice("KL estimator", kind, KL_ESTIMATORS)
    return KL_ESTIMATORS[kind](logprobs - ref_logprobs)


def kl_loss(
    logprobs: Tensor,
    ref_logprobs: Tensor,
    mask: Tensor,
    *,
    kind: str = "k3",
    agg_mode: str = "token-mean",
    global_token_count: int | float | Tensor | None = None,
    global_seq_count: int | float | Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """KL penalty term ``agg(k(logp, ref))`` ([B, T] inputs); the caller multiplies by beta."""
    kl = kl_estimate(logprobs, ref_logprobs, kind)
    loss = agg_loss(kl, mask, agg_mode, global_token_count, global_seq_count)
    return loss, {"kl": masked_mean(kl.detach(), mask).item()}


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of softmax(logits) over the last dim: ``H = lse(z) - sum_j softmax(z)_j z_j``."""
    logits = logits.float()
    lse = torch.logsumexp(logits, dim=-1)
    return lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)
