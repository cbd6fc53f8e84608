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

On CUDA with bf16/fp16 activations, a packed row runs on torch's varlen flash/cuDNN kernel
(``torch.nn.attention.varlen``) when this torch has it: one kernel per layer for the whole row,
with the boundaries (``cu_seq_lens_q`` on the device, ``max_length_q`` a host int) computed
once per micro-batch by :func:`packed_kwargs`, so no layer waits on the host.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

if TYPE_CHECKING:
    from transformers import PretrainedConfig

ATTN_NAME = "packed_sdpa"

_SKIP_MASK: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "packed_sdpa_skip_mask", default=False
)


def packed_sdpa_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    cu_seq_lens_q: torch.Tensor | None = None,
    max_length_q: int | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers ``AttentionInterface`` signature. query ``[1, H, L, D]``, key/value
    ``[1, Hkv, L, D]``; returns ``[1, L, H, D]`` like sdpa. ``cu_seq_lens_q``: ``[k + 1]``
    cumulative sequence starts (0, n_1, n_1 + n_2, ...); positions past the last one (padding)
    get zeros."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    tree = kwargs.pop("tree_layout", None)
    if tree is not None:  # a shared-prefix row (algos.learner.tree_attention)
        return tree.attend(module, query, key, value, dropout=dropout, scaling=scaling)
    kwargs.pop("cu_seq_lens_k", None)
    kwargs.pop("max_length_k", None)
    if cu_seq_lens_q is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    if query.shape[0] != 1:
        raise ValueError(
            f"packed_sdpa with cu_seq_lens_q needs one packed row; got batch {query.shape[0]}"
        )
    kernel = varlen_kernel(query, dropout, max_length_q)
    if kernel is not None and max_length_q is not None:  # a kernel needs it (varlen_kernel)
        out = _varlen_forward(kernel, query, key, value, cu_seq_lens_q, max_length_q, scaling)
        if out is not None:
            return out, None
    bounds = cu_seq_lens_q.tolist()
    outs = []
    for start, end in zip(bounds[:-1], bounds[1:], strict=True):
        out, _ = sdpa_attention_forward(
            module,
            query[:, :, start:end],
            key[:, :, start:end],
            value[:, :, start:end],
            None,
            dropout=dropout,
            scaling=scaling,
            is_causal=True,
        )
        outs.append(out)
    length = query.shape[2]
    if bounds[-1] < length:
        b, h, _, d = query.shape
        outs.append(query.new_zeros(b, length - bounds[-1], h, d))
    return torch.cat(outs, dim=1), None


def varlen_kernel(query: torch.Tensor, dropout: float, max_length: int | None):
    """torch's varlen attention function when it can serve this call, else None: CUDA only,
    bf16/fp16, no dropout, the host-side ``max_length`` known, and a torch that has it."""
    if not query.is_cuda or query.dtype not in (torch.bfloat16, torch.float16):
        return None
    if dropout or max_length is None:
        return None
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


def _varlen_forward(
    kernel, query, key, value, cu_seq: torch.Tensor, max_len: int, scaling: float | None
) -> torch.Tensor | None:
    """Causal varlen attention on one packed row: ``[1, H, L, D]`` in, ``[1, L, H, D]`` out;
    None when this torch's ``varlen_attn`` cannot express the call (a custom scale in a release
    without ``scale``). ``cu_seq`` must cover all ``L`` positions (:func:`packed_kwargs` with
    ``cover_padding``). Spellings differ by release: ``is_causal`` then ``window_size``; GQA
    needs ``enable_gqa`` or repeated KV heads."""
    import inspect

    params = inspect.signature(kernel).parameters
    extra: dict = {}
    if scaling is not None:
        if "scale" in params:
            extra["scale"] = scaling
        elif abs(scaling - query.shape[-1] ** -0.5) > 1e-12:
            return None
    # [L, heads, D]; contiguous, as every varlen kernel accepts that layout
    q, k, v = (x[0].transpose(0, 1).contiguous() for x in (query, key, value))
    if k.shape[1] != q.shape[1]:  # grouped-query attention
        if "enable_gqa" in params:
            extra["enable_gqa"] = True
        else:
            groups = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    if "window_size" in params:
        extra["window_size"] = (-1, 0)  # causal
    else:
        extra["is_causal"] = True  # the first releases' spelling
    out = kernel(q, k, v, cu_seq, cu_seq, max_len, max_len, **extra)
    return out.unsqueeze(0)


def packed_kwargs(segment_ids: torch.Tensor, cover_padding: bool = False) -> dict:
    """Model keyword arguments for one packed row ``[1, L]``: ``cu_seq_lens_q`` (int32, on the
    row's device) and ``max_length_q`` (a host int). One host sync, once per micro-batch.

    ``cover_padding`` makes the trailing padding one more (ignored) sequence, so a varlen
    kernel writes every position; the per-sequence SDPA path zero-fills it instead."""
    cu = cu_seq_lens(segment_ids)
    bounds = cu.tolist()
    length = segment_ids.shape[1]
    if cover_padding and bounds[-1] < length:
        bounds.append(length)
        cu = torch.tensor(bounds, dtype=torch.int32, device=segment_ids.device)
    lengths = [b - a for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    return {"cu_seq_lens_q": cu, "max_length_q": max(lengths, default=0)}


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
    set_impl = getattr(model, "set_attn_implementation", None)  # an HF model's
    if set_impl is not None:
        set_impl(name)
    else:  # older transformers
        cast("PretrainedConfig", model.config)._attn_implementation = name
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
