"""Attention over a tree row (algos.learner.tree): each piece attends causally to itself and fully to
its tree's prefix, without an ``[L, L]`` mask on the default paths.

Kernels, chosen at run time by :func:`pick_kernel` (or forced through ``TreeLayout.kernel``):

- ``pieces`` (CPU default): SDPA per piece; a continuation's keys are the prefix's keys
  followed by its own, with a ``[c, p + c]`` mask (prefix visible, own part causal). Work is
  ``p^2 / 2 + sum_i c_i (p + c_i)`` scores, what the tree needs; the prefix's K/V gradient is
  the sum over the continuations (autograd through the concatenation).
- ``flex`` (CUDA default): FlexAttention with a block mask built once per micro-batch from the
  piece table (compiled kernel; fully masked blocks are skipped, nothing ``L x L`` exists).
  On CPU it runs eagerly (unfused, it materialises the scores), which is how it is tested here.
- ``dense``: one SDPA call with the dense tree mask (``L^2`` scores; a reference and a
  measurement baseline).

The layout travels as a model keyword argument (``tree_layout``) like ``cu_seq_lens_q`` for
packed rows, so activation checkpointing replays it in the recomputation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

KERNELS = ("pieces", "flex", "dense")

_compiled_flex = None


def pick_kernel(query: torch.Tensor) -> str:
    """``flex`` where FlexAttention compiles to a fused kernel (CUDA), else ``pieces``."""
    if query.is_cuda:
        try:
            import torch.nn.attention.flex_attention  # noqa: F401
        except ImportError:
            return "pieces"
        return "flex"
    return "pieces"


def _sdpa(q, k, v, mask, dropout: float, scaling: float | None) -> torch.Tensor:
    """SDPA ``[1, H, n, D]`` -> ``[1, n, H, D]``; causal without a mask. Grouped-query heads
    go to the kernel as they are (``enable_gqa``): repeating the K/V heads would copy every
    continuation's prefix keys H/Hkv times and keep the copies for backward."""
    out = torch.nn.functional.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=mask,
        dropout_p=dropout,
        scale=scaling,
        is_causal=mask is None,
        enable_gqa=q.shape[1] != k.shape[1],
    )
    return out.transpose(1, 2)


class TreeLayout:
    """Host-side piece table of one tree row plus per-device caches (masks, block masks)."""

    def __init__(
        self, pieces: list[tuple[int, int, int, int]], length: int, kernel: str | None = None
    ) -> None:
        if kernel is not None and kernel not in KERNELS:
            raise ValueError(f"tree kernel must be one of {KERNELS}; got {kernel!r}")
        # pieces tile the row in order; a continuation's prefix is one whole earlier piece
        ends = [0] + [e for _, e, _, _ in pieces]
        if [s for s, _, _, _ in pieces] != ends[:-1] or ends[-1] != length:
            raise ValueError(f"tree pieces must tile the {length}-token row in order")
        self._piece_at = {s: n for n, (s, _, _, _) in enumerate(pieces)}
        for _, _, ps, pe in pieces:
            if pe > ps and pieces[self._piece_at.get(ps, 0)][:2] != (ps, pe):
                raise ValueError(f"a continuation's prefix [{ps}, {pe}) is not a piece")
        self.pieces = pieces
        self.length = length
        self.kernel = kernel
        self._cache: dict = {}

    # ------------------------------------------------------------------ kernels

    def attend(
        self,
        module: nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        dropout: float = 0.0,
        scaling: float | None = None,
    ) -> tuple[torch.Tensor, None]:
        """query ``[1, H, L, D]``, key/value ``[1, Hkv, L, D]`` -> ``[1, L, H, D]``."""
        if query.shape[0] != 1 or query.shape[2] != self.length:
            raise ValueError(
                f"tree attention needs one row of {self.length} tokens; got {tuple(query.shape)}"
            )
        kernel = self.kernel or pick_kernel(query)
        if kernel == "flex":
            return self._flex(query, key, value, scaling), None
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        if kernel == "dense":
            mask = self._dense_mask(query.device)
            return sdpa_attention_forward(
                module, query, key, value, mask, dropout=dropout, scaling=scaling, is_causal=False
            )
        # split, not slicing: a slice's backward writes a zero-filled full-row gradient per
        # piece (O(pieces * L) per layer); split's backward is one concatenation
        sizes = [e - s for s, e, _, _ in self.pieces]
        qs, ks, vs = (torch.split(x, sizes, dim=2) for x in (query, key, value))
        outs = []
        for n, (s, e, ps, pe) in enumerate(self.pieces):
            if pe == ps:  # a prefix or a plain sequence: causal on itself
                outs.append(_sdpa(qs[n], ks[n], vs[n], None, dropout, scaling))
            else:
                j = self._piece_at[ps]
                k = torch.cat([ks[j], ks[n]], dim=2)
                v = torch.cat([vs[j], vs[n]], dim=2)
                mask = self._cont_mask(pe - ps, e - s, query.device)
                outs.append(_sdpa(qs[n], k, v, mask, dropout, scaling))
        return torch.cat(outs, dim=1), None

    def _cont_mask(self, p: int, c: int, device: torch.device) -> torch.Tensor:
        key = ("cont", p, c, device)
        if key not in self._cache:
            own = torch.ones(c, c, dtype=torch.bool, device=device).tril()
            pre = torch.ones(c, p, dtype=torch.bool, device=device)
            self._cache[key] = torch.cat([pre, own], dim=1)[None, None]
        return self._cache[key]

    def _dense_mask(self, device: torch.device) -> torch.Tensor:
        key = ("dense", device)
        if key not in self._cache:
            from algos.learner.tree import dense_tree_mask

            self._cache[key] = dense_tree_mask(self.pieces, self.length, device)[None, None]
        return self._cache[key]

    def piece_tables(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """``piece_of [L]`` (piece of each position) and ``prefix_of [n]`` (the piece a piece
        attends to fully, -1 if none)."""
        key = ("tables", device)
        if key not in self._cache:
            piece_of = torch.empty(self.length, dtype=torch.int32)
            starts = {}
            for n, (s, e, _, _) in enumerate(self.pieces):
                piece_of[s:e] = n
                starts[s] = n
            prefix_of = torch.tensor(
                [starts[ps] if pe > ps else -1 for _, _, ps, pe in self.pieces], dtype=torch.int32
            )
            self._cache[key] = (piece_of.to(device), prefix_of.to(device))
        return self._cache[key]

    def block_mask(self, device: torch.device):
        """FlexAttention block mask of the tree (built once per micro-batch and device)."""
        key = ("block", device)
        if key not in self._cache:
            from torch.nn.attention.flex_attention import create_block_mask

            self._cache[key] = create_block_mask(
                self.mask_mod(device), None, None, self.length, self.length, device=device
            )
        return self._cache[key]

    def mask_mod(self, device: torch.device):
        """FlexAttention ``mask_mod``: own piece causally, or the piece's prefix entirely."""
        piece_of, prefix_of = self.piece_tables(device)

        def mask_mod(b, h, q_idx, kv_idx):
            pq, pk = piece_of[q_idx], piece_of[kv_idx]
            return ((pq == pk) & (kv_idx <= q_idx)) | (prefix_of[pq] == pk)

        return mask_mod

    def _flex(self, query, key, value, scaling):
        global _compiled_flex
        from torch.nn.attention.flex_attention import flex_attention

        fn: Callable[..., Any] = flex_attention
        if query.is_cuda:  # eager flex is unfused; the compiled one is the kernel
            if _compiled_flex is None:
                _compiled_flex = torch.compile(flex_attention, dynamic=True)
            fn = _compiled_flex
        gqa = query.shape[1] != key.shape[1]
        out = fn(
            query,
            key,
            value,
            block_mask=self.block_mask(query.device),
            scale=scaling,
            enable_gqa=gqa,
        )
        return out.transpose(1, 2).contiguous()
