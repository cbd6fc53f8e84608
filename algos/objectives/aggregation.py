"""Masked reductions and the loss aggregation modes (token-mean, seq-mean-token-mean,
seq-mean-token-sum)."""

from __future__ import annotations

import torch
from torch import Tensor

from swe_gym.errors import unknown_choice

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")


# exp() of a log-ratio beyond this is clamped: exp(20) ~ 5e8 is already "fully clipped" for any
# sane eps, and larger values only overflow in bf16/fp16 (verl clamps the same way).
LOG_RATIO_CLAMP = 20.0


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
