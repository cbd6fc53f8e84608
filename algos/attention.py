"""Per-sequence attention for packed rows: SDPA on each sequence, no ``[L, L]`` mask.

A packed row concatenates sequences of lengths ``n_1 .. n_k``. With a block-diagonal 4D mask,
SDPA on CPU (and its math path on GPU) computes all ``L**2`` scores of the row and masks most
of them away; the work that matters is ``sum(n_i**2)``. This module registers an attention
implementation, ``packed_sdpa``, with transformers' ``AttentionInterface``: given the row's
sequence boundaries (``cu_seq_lens_q``, the varlen convention of flash-attention, passed as a
model keyword that transformers forwards to every attention call) it runs causal SDPA on each
sequence and concatenates; without boundaries it *is* ``sdpa`` (same mask, same kernel), so a
model switched to it generates and evaluates exactly as before.

Why keyword arguments and not a context variable: activation checkpointing re-runs each layer
in the backward pass, outside any ``with`` block of the forward; the checkpoint replays the
layer's keyword arguments, so the boundaries are there in the recomputation too.

While :func:`packed_forward` is active, the causal-mask builder of ``packed_sdpa`` returns None
(the boundaries replace the mask), so no ``[L, L]`` mask is allocated for a packed row. The
mask is built once per forward at the model level, before any layer, so the recomputation
does not need it.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import torch
from torch import nn

ATTN_NAME = "packed_sdpa"

_SKIP_MASK: contextvars.ContextVar[bool] = contextvars.ContextVar("packed_sdpa_skip_mask",
                                                                  default=False)


def packed_sdpa_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    cu_seq_lens_q: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers ``AttentionInterface`` signature. query ``[1, H, L, D]``, key/value
    ``[1, Hkv, L, D]``; returns ``[1, L, H, D]`` like sdpa. ``cu_seq_lens_q``: ``[k + 1]``
    cumulative sequence starts (0, n_1, n_1 + n_2, ...); positions past the last one (padding)
    get zeros."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    kwargs.pop("cu_seq_lens_k", None)
    if cu_seq_lens_q is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    if query.shape[0] != 1:
        raise ValueError(f"packed_sdpa with cu_seq_lens_q needs one packed row; got batch "
                         f"{query.shape[0]}")
    bounds = cu_seq_lens_q.tolist()
    outs = []
    for start, end in zip(bounds[:-1], bounds[1:], strict=True):
        out, _ = sdpa_attention_forward(
            module, query[:, :, start:end], key[:, :, start:end], value[:, :, start:end], None,
            dropout=dropout, scaling=scaling, is_causal=True,
        )
        outs.append(out)
    length = query.shape[2]
    if bounds[-1] < length:
        b, h, _, d = query.shape
        outs.append(query.new_zeros(b, length - bounds[-1], h, d))
    return torch.cat(outs, dim=1), None


def _packed_sdpa_mask(*args, **kwargs):
    from transformers.masking_utils import sdpa_mask

    if _SKIP_MASK.get():
        return None
    return sdpa_mask(*args, **kwargs)


def register_packed_attention() -> str:
    """Register ``packed_sdpa`` (attention and mask builder) with transformers (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    AttentionInterface.register(ATTN_NAME, packed_sdpa_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTN_NAME, _packed_sdpa_mask)
    return ATTN_NAME


def use_packed_attention(model: nn.Module) -> bool:
    """Switch a HF model that uses ``sdpa`` to ``packed_sdpa``; True if it now uses it.

    Models with another implementation (eager, flash-attention, ring_cp, ...) are left alone:
    flash-attention already runs varlen from ``position_ids``; eager gets the 4D mask. So is
    every model under transformers without ``masking_utils`` (< 4.53).
    """
    config = getattr(model, "config", None)
    impl = getattr(config, "_attn_implementation", None)
    if impl == ATTN_NAME:
        return True
    if impl != "sdpa":
        return False
    try:  # the mask registry (transformers >= 4.53); older versions keep sdpa with a 4D mask
        import transformers.masking_utils  # noqa: F401
    except ImportError:
        return False
    register_packed_attention()
    set_attention(model, ATTN_NAME)
    return getattr(config, "_attn_implementation", None) == ATTN_NAME


def set_attention(model: nn.Module, name: str) -> nn.Module:
    """Switch an already-built HF model to the registered attention implementation ``name``."""
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(name)
    else:  # older transformers
        model.config._attn_implementation = name
    return model


@contextlib.contextmanager
def packed_forward() -> Iterator[None]:
    """Within it, ``packed_sdpa`` builds no causal mask (the caller passes ``cu_seq_lens_q``)."""
    token = _SKIP_MASK.set(True)
    try:
        yield
    finally:
        _SKIP_MASK.reset(token)


def cu_seq_lens(segment_ids: torch.Tensor) -> torch.Tensor:
    """``[k + 1]`` int32 sequence starts of a one-row ``segment_ids`` ``[1, L]`` (-1 = padding,
    sequences numbered 0..k-1 in order)."""
    if segment_ids.shape[0] != 1:
        raise ValueError(f"cu_seq_lens needs one row; got {segment_ids.shape[0]}")
    seg = segment_ids[0]
    counts = torch.bincount(seg[seg >= 0])
    out = torch.zeros(counts.numel() + 1, dtype=torch.int32, device=seg.device)
    out[1:] = torch.cumsum(counts, 0)
    return out
