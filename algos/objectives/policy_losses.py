"""Policy losses, registered by name (``loss``); every one has the signature in
:class:`PolicyLossFn`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import Tensor

from algos.objectives.aggregation import LOG_RATIO_CLAMP, agg_loss, masked_mean
from algos.objectives.kl import kl_estimate
from swe_gym.errors import unknown_choice


class PolicyLossFn(Protocol):
    """What the learner calls: the shared signature (module docstring) plus ``token_weights``
    (the off-policy correction's, passed only to losses in ``NEEDS_OLD_LOGPROBS`` and ``pg``).
    A loss may take further keyword arguments with defaults (``eps_low``, ``clip_eps``...): the
    config's ``loss_kwargs`` reach them by name."""

    def __call__(
        self,
        logprobs: Tensor,
        old_logprobs: Tensor,
        advantages: Tensor,
        mask: Tensor,
        *,
        agg_mode: str = ...,
        global_token_count: int | float | Tensor | None = ...,
        global_seq_count: int | float | Tensor | None = ...,
        token_weights: Tensor | None = ...,
    ) -> tuple[Tensor, dict[str, float]]: ...


POLICY_LOSSES: dict[str, PolicyLossFn] = {}
# Losses that read old_logprobs (an importance ratio); the learner checks samples carry them.
NEEDS_OLD_LOGPROBS: set[str] = set()
# (eps_low, eps_high) of losses whose ratio is not PPO's per-token one, so a token-level range
# would not fit them; GRPO and DAPO pass these unless the user sets a range (algos.config.policy_gradient).
CLIP_DEFAULTS: dict[str, tuple[float, float]] = {}
GSPO_CLIP = (3e-4, 4e-4)  # the GSPO paper's range for its sequence-level ratio


def register_policy_loss(
    name: str, *, needs_old_logprobs: bool = True, clip: tuple[float, float] | None = None
) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator: ``@register_policy_loss("dapo")`` makes the function reachable by name;
    ``clip``: the loss's own ``(eps_low, eps_high)`` (:data:`CLIP_DEFAULTS`)."""

    def deco(fn: PolicyLossFn) -> PolicyLossFn:
        if name in POLICY_LOSSES:
            raise ValueError(f"policy loss {name!r} is already registered")
        POLICY_LOSSES[name] = fn
        if needs_old_logprobs:
            NEEDS_OLD_LOGPROBS.add(name)
        if clip is not None:
            CLIP_DEFAULTS[name] = clip
        return fn

    return deco


def get_policy_loss_fn(name: str) -> PolicyLossFn:
    """The registered policy loss ``name``; unknown names fail listing the accepted ones."""
    try:
        return POLICY_LOSSES[name]
    except KeyError:
        raise unknown_choice("policy loss", name, POLICY_LOSSES) from None


def _broadcast_adv(advantages: Tensor, like: Tensor) -> Tensor:
    if advantages.dim() == like.dim() - 1:
        advantages = advantages.unsqueeze(-1)
    return advantages.to(like.dtype).expand_as(like)


def _weighted(loss_mat: Tensor, token_weights: Tensor | None) -> Tensor:
    """``loss_mat * token_weights`` (the off-policy correction's weights, never differentiated)."""
    return loss_mat if token_weights is None else loss_mat * token_weights.detach()


def clipped_policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip: float | None = None,
    token_weights: Tensor | None = None,
    agg_mode: str = "token-mean",
    global_token_count: int | float | Tensor | None = None,
    global_seq_count: int | float | Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """PPO/GRPO clipped surrogate with asymmetric clip (DAPO clip-higher,
    docs/methods.md#asymmetric-clipping).

    Per token, with ``r = exp(logp - old_logp)``:
    ``L = max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high))``; with dual clip ``c > 1``
    (Ye et al. 2020) and ``A < 0`` additionally ``L = min(L, -A c)``, which bounds the loss when
    ``r`` explodes on a negative-advantage token. ``token_weights`` ``[B, T]`` (an off-policy
    correction's, :func:`off_policy_weights`) multiply ``L``. Then ``agg_loss(L, mask, ...)``.

    Shapes: ``logprobs``, ``old_logprobs``, ``mask`` ``[B, T]``; ``advantages`` ``[B, T]`` or
    ``[B]``. Metrics: ``clip_frac_low`` (A<0, r<1-eps_low: gradient cut),
    ``clip_frac_high`` (A>0, r>1+eps_high), ``dual_clip_frac``, ``approx_kl`` (k3 estimate of
    KL(old || new)), ``ratio_mean``, ``ratio_max``, ``ratio_min``, ``pg_loss``.
    """
    if eps_low < 0 or eps_high < 0:
        raise ValueError(f"clip eps must be >= 0; got eps_low={eps_low}, eps_high={eps_high}")
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 (or None); got {dual_clip}")
    adv = _broadcast_adv(advantages, logprobs)
    log_ratio = (logprobs - old_logprobs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    loss_unclipped = -adv * ratio
    loss_clipped = -adv * ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    loss_mat = torch.maximum(loss_unclipped, loss_clipped)
    dual_hit = torch.zeros_like(mask, dtype=torch.bool)
    if dual_clip is not None:
        bound = -adv * dual_clip
        dual_hit = (adv < 0) & (loss_mat > bound)
        loss_mat = torch.where(adv < 0, torch.minimum(loss_mat, bound), loss_mat)
    loss_mat = _weighted(loss_mat, token_weights)
    loss = agg_loss(loss_mat, mask, agg_mode, global_token_count, global_seq_count)

    with torch.no_grad():
        m = mask.bool()
        r = ratio.detach()
        any_tok = bool(m.any())
        metrics = {
            "pg_loss": masked_mean(loss_mat.detach(), m).item(),
            "clip_frac_low": masked_mean(((r < 1 - eps_low) & (adv < 0)).float(), m).item(),
            "clip_frac_high": masked_mean(((r > 1 + eps_high) & (adv > 0)).float(), m).item(),
            "dual_clip_frac": masked_mean(dual_hit.float(), m).item(),
            "approx_kl": masked_mean(kl_estimate(old_logprobs, logprobs.detach(), "k3"), m).item(),
            "ratio_mean": masked_mean(r, m).item(),
            "ratio_max": r[m].max().item() if any_tok else 1.0,
            "ratio_min": r[m].min().item() if any_tok else 1.0,
        }
    return loss, metrics


@register_policy_loss("ppo")
def ppo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_eps: float = 0.2,
    **kwargs: Any,
) -> tuple[Tensor, dict[str, float]]:
    """GRPO/PPO: symmetric clip ``eps_low = eps_high = clip_eps`` (docs/methods.md#grpo).

    Equation, shapes and metrics: :func:`clipped_policy_loss` (``eps_low``/``eps_high``/
    ``dual_clip`` may also be passed and win over ``clip_eps``).
    """
    kwargs.setdefault("eps_low", clip_eps)
    kwargs.setdefault("eps_high", clip_eps)
    return clipped_policy_loss(logprobs, old_logprobs, advantages, mask, **kwargs)


POLICY_LOSSES["grpo"] = ppo_loss  # alias: GRPO's policy term is PPO's clipped surrogate
NEEDS_OLD_LOGPROBS.add("grpo")


@register_policy_loss("dapo")
def dapo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    **kwargs: Any,
) -> tuple[Tensor, dict[str, float]]:
    """DAPO clip-higher (docs/methods.md#asymmetric-clipping): ``eps_low=0.2, eps_high=0.28`` by
    default; use with ``agg_mode="token-mean"`` and the global token count. Nebius stage 1/2
    use (0.2, 0.3) / (0.2, 0.26) (docs/methods.md#stages). Equation: :func:`clipped_policy_loss`.
    """
    return clipped_policy_loss(
        logprobs, old_logprobs, advantages, mask, eps_low=eps_low, eps_high=eps_high, **kwargs
    )


@register_policy_loss("pg", needs_old_logprobs=False)
def pg_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    agg_mode: str = "token-mean",
    global_token_count: int | float | Tensor | None = None,
    global_seq_count: int | float | Tensor | None = None,
    token_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Vanilla policy gradient (REINFORCE with a baseline in A): ``L = -A * logp`` per token
    (times ``token_weights`` when given)."""
    adv = _broadcast_adv(advantages, logprobs)
    loss_mat = _weighted(-adv * logprobs, token_weights)
    loss = agg_loss(loss_mat, mask, agg_mode, global_token_count, global_seq_count)
    return loss, {"pg_loss": masked_mean(loss_mat.detach(), mask).item()}


@register_policy_loss("sft", needs_old_logprobs=False)
def sft_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    agg_mode: str = "token-mean",
    global_token_count: int | float | Tensor | None = None,
    global_seq_count: int | float | Tensor | None = None,
    token_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Negative log-likelihood of the policy tokens: RFT = SFT on filtered passing trajectories
    (docs/methods.md#rft). ``L = -logp`` per token (times ``token_weights`` when given, as every
    registered loss); ``old_logprobs`` and ``advantages`` are ignored.
    Metric ``nll`` is the mean over loss tokens.
    """
    loss_mat = _weighted(-logprobs, token_weights)
    loss = agg_loss(loss_mat, mask, agg_mode, global_token_count, global_seq_count)
    return loss, {"nll": masked_mean(loss_mat.detach(), mask).item()}


@register_policy_loss("gspo", clip=GSPO_CLIP)
def gspo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float = GSPO_CLIP[0],
    eps_high: float = GSPO_CLIP[1],
    token_weights: Tensor | None = None,
    agg_mode: str = "seq-mean-token-mean",
    global_token_count: int | float | Tensor | None = None,
    global_seq_count: int | float | Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """GSPO (Zheng et al. 2025): one importance ratio and one clip per sequence.

    ``s_i = exp(mean_t m_it (logp_it - old_logp_it))`` over the policy tokens of sequence i;
    ``L_i = max(-A_i s_i, -A_i clip(s_i, 1 - eps_low, 1 + eps_high))`` (the paper's clip range:
    3e-4 / 4e-4, far tighter than PPO's because ``s_i`` is a geometric mean). ``L_i`` is spread
    over the sequence's policy tokens, so ``seq-mean-token-mean`` (the default here) gives the
    paper's ``mean_i L_i``; ``token-mean`` weights sequences by their length. A per-token
    advantage ``[B, T]`` is averaged over the policy tokens. ``token_weights`` ``[B, T]``
    multiply the per-token loss (off-policy correction); a token weighted 0 (decoupled PPO's
    drop) gets no gradient: its log-ratio still counts in ``s_i``'s value but is detached.
    Metrics as :func:`clipped_policy_loss` (``ratio_*`` are the sequence ratios; fractions are
    shares of policy tokens).
    """
    if eps_low < 0 or eps_high < 0:
        raise ValueError(f"clip eps must be >= 0; got eps_low={eps_low}, eps_high={eps_high}")
    m = mask.to(logprobs.dtype)
    adv = advantages.to(logprobs.dtype)
    if adv.dim() == logprobs.dim():
        adv = masked_mean(adv, m, dim=-1)
    log_ratio = logprobs - old_logprobs
    if token_weights is not None:
        # s_i carries every token's log-ratio, so weighting a token's share of L_i by 0 would
        # still train it through the other tokens' shares: detach it to drop it (as the
        # token-level losses do); its value stays in s_i, as the token stays in the normaliser
        log_ratio = torch.where(token_weights == 0, log_ratio.detach(), log_ratio)
    seq_log_ratio = masked_mean(log_ratio, m, dim=-1)
    ratio = torch.exp(seq_log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))  # [B]
    loss_seq = torch.maximum(-adv * ratio, -adv * ratio.clamp(1.0 - eps_low, 1.0 + eps_high))
    loss_mat = _weighted(loss_seq.unsqueeze(-1).expand_as(logprobs), token_weights)
    loss = agg_loss(loss_mat, mask, agg_mode, global_token_count, global_seq_count)
    with torch.no_grad():
        r = ratio.detach().unsqueeze(-1).expand_as(logprobs)
        a = adv.unsqueeze(-1).expand_as(logprobs)
        bm = mask.bool()
        any_tok = bool(bm.any())
        metrics = {
            "pg_loss": masked_mean(loss_mat.detach(), bm).item(),
            "clip_frac_low": masked_mean(((r < 1 - eps_low) & (a < 0)).float(), bm).item(),
            "clip_frac_high": masked_mean(((r > 1 + eps_high) & (a > 0)).float(), bm).item(),
            "approx_kl": masked_mean(kl_estimate(old_logprobs, logprobs.detach(), "k3"), bm).item(),
            "ratio_mean": masked_mean(r, bm).item(),
            "ratio_max": r[bm].max().item() if any_tok else 1.0,
            "ratio_min": r[bm].min().item() if any_tok else 1.0,
        }
    return loss, metrics
