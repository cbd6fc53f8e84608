"""Pure RL math: advantages, policy losses, loss aggregation, KL, entropy, reward shaping.

Every function here is a pure tensor function (no model, no optimiser, no I/O). Policy losses
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

from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import Tensor

from swe_gym.errors import unknown_choice

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
KL_ESTIMATORS = ("k1", "k2", "k3")

# exp() of a log-ratio beyond this is clamped: exp(20) ~ 5e8 is already "fully clipped" for any
# sane eps, and larger values only overflow in bf16/fp16 (verl clamps the same way).
_LOG_RATIO_CLAMP = 20.0


# --------------------------------------------------------------------------------------------
# Masked reductions and aggregation
# --------------------------------------------------------------------------------------------


def masked_sum(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of ``values`` where ``mask`` is 1. Masked-out entries may hold NaN/inf safely."""
    masked = torch.where(mask.bool(), values, torch.zeros_like(values))
    return masked.sum() if dim is None else masked.sum(dim)


def masked_mean(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``values`` over ``mask``; 0 (not NaN) where the mask is empty."""
    count = mask.sum() if dim is None else mask.sum(dim)
    return masked_sum(values, mask, dim) / count.clamp(min=1).to(values.dtype)


def agg_loss(
    loss_mat: Tensor,
    mask: Tensor,
    mode: str = "token-mean",
    global_token_count: int | float | Tensor | None = None,
    global_seq_count: int | float | Tensor | None = None,
) -> Tensor:
    """Aggregate a per-token loss ``[B, T]`` into a scalar.

    Modes (L = per-token loss, m = mask, |.| = number of loss tokens):

    - ``token-mean`` (DAPO token-level loss, docs/methods.md#token-level-loss-averaging):
      ``sum_{i,t} m_it L_it / N`` with ``N = global_token_count`` when given (the number of
      loss tokens in the WHOLE step, across micro-batches and ranks, so that summing the
      micro-batch losses gives the full-batch loss), else the local ``sum(m)``.
    - ``seq-mean-token-mean`` (GRPO paper form): ``sum_i (sum_t m_it L_it / |o_i|) / S``.
    - ``seq-mean-token-sum``: ``sum_i (sum_t m_it L_it) / S``.

    For the seq modes ``S = global_seq_count`` when given, else the local number of sequences
    that hold at least one loss token (sequences with none contribute 0 and are not counted).
    An all-zero mask gives 0 (never NaN), with a gradient of zeros.
    """
    if mode not in AGG_MODES:
        raise unknown_choice("loss aggregation mode", mode, AGG_MODES)
    if loss_mat.shape != mask.shape:
        raise ValueError(
            f"loss_mat shape {tuple(loss_mat.shape)} != mask shape {tuple(mask.shape)}"
        )
    mask = mask.to(loss_mat.dtype)
    if mode == "token-mean":
        denom = mask.sum() if global_token_count is None else global_token_count
        denom = torch.as_tensor(denom, dtype=loss_mat.dtype, device=loss_mat.device)
        return masked_sum(loss_mat, mask) / denom.clamp(min=1)
    if loss_mat.dim() < 2:
        raise ValueError(f"mode {mode!r} needs a [B, T] loss, got shape {tuple(loss_mat.shape)}")
    tokens_per_seq = mask.sum(-1)
    seq_sum = masked_sum(loss_mat, mask, dim=-1)
    if mode == "seq-mean-token-mean":
        seq_loss = seq_sum / tokens_per_seq.clamp(min=1)
    else:
        seq_loss = seq_sum
    denom = (tokens_per_seq > 0).sum() if global_seq_count is None else global_seq_count
    denom = torch.as_tensor(denom, dtype=loss_mat.dtype, device=loss_mat.device)
    return seq_loss.sum() / denom.clamp(min=1)


# --------------------------------------------------------------------------------------------
# Advantages and dynamic-filter predicates
# --------------------------------------------------------------------------------------------


def _group_stats(values: Tensor, group_index: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-sample group mean, unbiased std, and whether the group is constant.

    "Constant" (all rewards equal, or a single sample) is decided by max == min, not by a std
    that float rounding can leave at 1e-17, so such groups get exactly-zero advantages.
    """
    if values.dim() != 1 or group_index.shape != values.shape:
        raise ValueError(
            f"rewards must be 1-D with a group_index of the same shape; got rewards "
            f"{tuple(values.shape)}, group_index {tuple(group_index.shape)}"
        )
    _, inverse = torch.unique(group_index, return_inverse=True)
    n_groups = int(inverse.max().item()) + 1 if inverse.numel() else 0
    v = values.to(torch.float64)  # group stats in float64: rewards are few, precision is cheap
    zeros = torch.zeros(n_groups, dtype=torch.float64, device=v.device)
    count = zeros.index_add(0, inverse, torch.ones_like(v))
    mean = zeros.index_add(0, inverse, v) / count
    sq = zeros.index_add(0, inverse, (v - mean[inverse]) ** 2)
    hi = zeros.scatter_reduce(0, inverse, v, "amax", include_self=False)
    lo = zeros.scatter_reduce(0, inverse, v, "amin", include_self=False)
    constant = hi == lo
    std = torch.where(constant, zeros, (sq / (count - 1).clamp(min=1)).sqrt())
    return mean[inverse], std[inverse], constant[inverse]


def group_advantages(
    rewards: Tensor,
    group_index: Tensor | None = None,
    *,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """Group-relative advantages (GRPO, docs/methods.md#grpo; DAPO uses the same).

    ``A_i = (r_i - mean_g(r)) / (std_g(r) + eps)`` with ``normalize_std``, else
    ``A_i = r_i - mean_g(r)``; ``std`` is the unbiased (n-1) sample std of the group.

    Args:
        rewards: ``[N]`` with ``group_index`` ``[N]`` (any integer ids, e.g. the task index), or
            ``[G, n]`` (G groups of n samples) with ``group_index`` None.
        normalize_std: divide by the group std (GRPO); False gives the mean-centred form
            (Dr. GRPO / the Nebius variant without std).
        eps: added to the std so all-equal groups give 0 rather than NaN.

    Returns:
        Advantages with the shape of ``rewards`` (float32, or rewards' float dtype).
        All-equal groups give 0; a single-sample group gives 0 (no baseline information).
    """
    out_dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
    if rewards.dim() == 2 and group_index is None:
        g, n = rewards.shape
        index = torch.arange(g, device=rewards.device).repeat_interleave(n)
        return group_advantages(
            rewards.reshape(-1), index, normalize_std=normalize_std, eps=eps
        ).reshape(g, n)
    if group_index is None:
        raise ValueError(
            f"rewards of shape {tuple(rewards.shape)} need a group_index [N]; "
            "or pass rewards as [G, n]"
        )
    mean, std, constant = _group_stats(rewards, group_index)
    adv = rewards.to(torch.float64) - mean
    if normalize_std:
        adv = adv / torch.where(constant, torch.ones_like(std), std + eps)
    return torch.where(constant, torch.zeros_like(adv), adv).to(out_dtype)


def keep_nonconstant_groups(rewards: Tensor, group_index: Tensor | None = None) -> Tensor:
    """DAPO dynamic sampling predicate: keep samples whose group rewards differ
    (docs/methods.md#dynamic-sampling).

    Returns a boolean keep-mask shaped like ``rewards`` (``[N]`` with ``group_index``, or
    ``[G, n]``); False for every sample of a group with zero reward std (all equal, including a
    single-sample group).
    """
    if rewards.dim() == 2 and group_index is None:
        g, n = rewards.shape
        index = torch.arange(g, device=rewards.device).repeat_interleave(n)
        return keep_nonconstant_groups(rewards.reshape(-1), index).reshape(g, n)
    if group_index is None:
        raise ValueError(f"rewards of shape {tuple(rewards.shape)} need a group_index [N]")
    _, _, constant = _group_stats(rewards, group_index)
    return ~constant


def keep_nonzero_advantage(
    advantages: Tensor, mask: Tensor | None = None, atol: float = 0.0
) -> Tensor:
    """Nebius filter (docs/methods.md#zero-advantage-filter): drop samples whose advantage is zero.

    ``advantages`` ``[N]`` (per sequence) or ``[N, T]`` (per token, with ``mask``): a sample is
    kept if any of its (masked) advantages has ``|A| > atol``. Returns a bool ``[N]``.
    """
    nonzero = advantages.abs() > atol
    if advantages.dim() == 1:
        return nonzero
    if mask is not None:
        nonzero = nonzero & mask.bool()
    return nonzero.any(dim=-1)


# --------------------------------------------------------------------------------------------
# Reward shaping
# --------------------------------------------------------------------------------------------


def overlong_penalty(lengths: Tensor, max_len: int = 20480, cache_len: int = 4096) -> Tensor:
    """DAPO soft overlong punishment (docs/methods.md#overlong-shaping), added to the task reward.

    ``R = 0`` if ``|y| <= L_max - L_cache``; ``((L_max - L_cache) - |y|) / L_cache`` if
    ``L_max - L_cache < |y| <= L_max``; ``-1`` beyond ``L_max``. ``lengths`` ``[N]`` (tokens).
    """
    if not 0 < cache_len <= max_len:
        raise ValueError(
            f"need 0 < cache_len <= max_len; got cache_len={cache_len}, max_len={max_len}"
        )
    lengths = torch.as_tensor(lengths)
    free = max_len - cache_len
    ramp = (free - lengths.to(torch.float32)) / cache_len
    out = torch.where(lengths <= free, torch.zeros_like(ramp), ramp)
    return torch.where(lengths > max_len, torch.full_like(ramp, -1.0), out)


def turn_length_penalty(turns: Tensor, threshold: int = 10, max_turns: int = 40) -> Tensor:
    """Nebius turn-based length penalty, added to the binary task reward
    (docs/methods.md#turn-based-length-penalty).

    ``R_len = 0`` if ``|tau| < L_thr`` else ``(L_thr - |tau|) / (T_max - L_thr)``, with |tau| in
    turns; it reaches -1 at ``T_max`` (no clamp beyond: the env caps episodes at T_max).
    """
    if max_turns <= threshold:
        raise ValueError(
            f"need max_turns > threshold; got max_turns={max_turns}, threshold={threshold}"
        )
    turns = torch.as_tensor(turns)
    ramp = (threshold - turns.to(torch.float32)) / (max_turns - threshold)
    return torch.where(turns < threshold, torch.zeros_like(ramp), ramp)


# --------------------------------------------------------------------------------------------
# KL and entropy
# --------------------------------------------------------------------------------------------


def kl_estimate(logprobs: Tensor, ref_logprobs: Tensor, kind: str = "k3") -> Tensor:
    """Per-token KL(pi || pi_ref) estimators on sampled tokens (docs/methods.md#kl-estimators).

    ``k1 = logp - ref``; ``k2 = (logp - ref)^2 / 2``; ``k3 = exp(ref - logp) - (ref - logp) - 1``
    (unbiased, non-negative; GRPO's choice). The log-ratio is clamped to +-20 before exp.
    """
    if kind not in KL_ESTIMATORS:
        raise unknown_choice("KL estimator", kind, KL_ESTIMATORS)
    diff = logprobs - ref_logprobs
    if kind == "k1":
        return diff
    if kind == "k2":
        return 0.5 * diff.square()
    log_r = (-diff).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    return torch.exp(log_r) - log_r - 1.0


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


# --------------------------------------------------------------------------------------------
# Policy losses (registry)
# --------------------------------------------------------------------------------------------


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


def register_policy_loss(
    name: str, *, needs_old_logprobs: bool = True
) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator: ``@register_policy_loss("dapo")`` makes the function reachable by name."""

    def deco(fn: PolicyLossFn) -> PolicyLossFn:
        if name in POLICY_LOSSES:
            raise ValueError(f"policy loss {name!r} is already registered")
        POLICY_LOSSES[name] = fn
        if needs_old_logprobs:
            NEEDS_OLD_LOGPROBS.add(name)
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
    log_ratio = (logprobs - old_logprobs).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
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


# --------------------------------------------------------------------------------------------
# Newer objectives: GSPO, RLOO, failure masking (issue 12)
# --------------------------------------------------------------------------------------------


@register_policy_loss("gspo")
def gspo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float = 3e-4,
    eps_high: float = 4e-4,
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
    multiply the per-token loss (off-policy correction). Metrics as :func:`clipped_policy_loss`
    (``ratio_*`` are the sequence ratios; fractions are shares of policy tokens).
    """
    if eps_low < 0 or eps_high < 0:
        raise ValueError(f"clip eps must be >= 0; got eps_low={eps_low}, eps_high={eps_high}")
    m = mask.to(logprobs.dtype)
    adv = advantages.to(logprobs.dtype)
    if adv.dim() == logprobs.dim():
        adv = masked_mean(adv, m, dim=-1)
    seq_log_ratio = masked_mean(logprobs - old_logprobs, m, dim=-1)
    ratio = torch.exp(seq_log_ratio.clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP))  # [B]
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


def rloo_advantages(rewards: Tensor, group_index: Tensor | None = None) -> Tensor:
    """RLOO leave-one-out baseline (Kool et al. 2019; Ahmadian et al. 2024).

    ``A_i = r_i - mean_{j != i, j in g(i)} r_j = n / (n - 1) * (r_i - mean_g(r))`` for a group
    of ``n >= 2``; a single-sample group gives 0 (no baseline). Shapes as
    :func:`group_advantages` (``[N]`` with ``group_index``, or ``[G, n]``).
    """
    centred = group_advantages(rewards, group_index, normalize_std=False)  # 0: constant groups
    if group_index is None:  # [G, n] (group_advantages checked the layout)
        n = torch.tensor(float(rewards.shape[-1]), dtype=centred.dtype)
    else:
        _, inverse, counts = torch.unique(group_index, return_inverse=True, return_counts=True)
        n = counts[inverse].to(centred.dtype)
    return centred * n / (n - 1).clamp(min=1)


ADVANTAGE_ESTIMATORS = ("grpo", "rloo")


def compute_advantages(
    name: str, rewards: Tensor, group_index: Tensor, *, normalize_std: bool = True
) -> Tensor:
    """Advantages by estimator name: ``grpo`` (:func:`group_advantages`, ``normalize_std``
    applies) or ``rloo`` (:func:`rloo_advantages`; no std normalisation)."""
    if name == "grpo":
        return group_advantages(rewards, group_index, normalize_std=normalize_std)
    if name == "rloo":
        return rloo_advantages(rewards, group_index)
    raise unknown_choice("advantage estimator", name, ADVANTAGE_ESTIMATORS)


def keep_groups_without_failures(failed: Tensor, group_index: Tensor) -> Tensor:
    """Instance-level failure masking: False for every member of a group in which any episode
    failed (a sandbox or rollout error: no signal about the policy), True elsewhere.

    ``failed`` bool ``[N]``, ``group_index`` ``[N]``; returns bool ``[N]``. Masking the whole
    group rather than scoring the failure as reward 0 (a wrong negative) or dropping only the
    failed episode (a group baseline computed from the survivors of a biased draw).
    """
    if failed.shape != group_index.shape or failed.dim() != 1:
        raise ValueError(
            f"failed {tuple(failed.shape)} and group_index "
            f"{tuple(group_index.shape)} must be the same 1-D shape"
        )
    _, inverse = torch.unique(group_index, return_inverse=True)
    n_groups = int(inverse.max().item()) + 1 if inverse.numel() else 0
    bad = torch.zeros(n_groups, device=failed.device).index_add(0, inverse, failed.float())
    return bad[inverse] == 0


# --------------------------------------------------------------------------------------------
# Off-policy correction: sampler (behaviour) vs learner (proximal) log-probs
# --------------------------------------------------------------------------------------------

OFF_POLICY_CORRECTIONS = ("none", "tis", "decoupled")


def off_policy_weights(
    proximal_logprobs: Tensor,
    sampler_logprobs: Tensor,
    mask: Tensor,
    *,
    kind: str = "tis",
    cap: float = 2.0,
) -> tuple[Tensor, dict[str, float]]:
    """Per-token weights ``[B, T]`` (no gradient) correcting for the sampler/learner gap.

    ``w = exp(proximal - sampler)``: the learner's probability of the sampled token (before the
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
        log_w = (proximal_logprobs - sampler_logprobs).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
        w = torch.exp(log_w)
        over = w > cap
        if kind == "none":
            out = torch.ones_like(w)
        elif kind == "tis":
            out = w.clamp(max=cap)
        else:
            out = torch.where(over, torch.zeros_like(w), w)
        m = mask.bool()
        metrics = {
            "is_weight_mean": masked_mean(out, m).item(),
            "is_capped_frac": masked_mean(over.float(), m).item(),
        }
    return out, metrics


def mismatch_metrics(
    learner_logprobs: Tensor, sampler_logprobs: Tensor, mask: Tensor
) -> dict[str, float]:
    """How far the sampler's log-probs are from the learner's on the sampled tokens.

    ``mismatch_kl``: k3 estimate of KL(sampler || learner) (tokens were drawn from the sampler);
    ``mismatch_ratio_mean/max/min``: ``exp(learner - sampler)`` over the policy tokens (1 when
    they agree).
    """
    with torch.no_grad():
        m = mask.bool()
        # float64: a float32 k3 of two nearly equal policies (KL ~1e-10) is all rounding noise
        learner_logprobs, sampler_logprobs = learner_logprobs.double(), sampler_logprobs.double()
        log_r = (learner_logprobs - sampler_logprobs).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
        r = torch.exp(log_r)
        any_tok = bool(m.any())
        return {
            "mismatch_kl": masked_mean(
                kl_estimate(sampler_logprobs, learner_logprobs, "k3"), m
            ).item(),
            "mismatch_ratio_mean": masked_mean(r, m).item(),
            "mismatch_ratio_max": r[m].max().item() if any_tok else 1.0,
            "mismatch_ratio_min": r[m].min().item() if any_tok else 1.0,
        }
