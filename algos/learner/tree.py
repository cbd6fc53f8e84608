"""Shared-prefix ("tree") packing: a group's common prompt computed once per micro-batch.

GRPO/DAPO groups hold G episodes that start from the same tokens (system prompt, tool docs,
issue). Plain packing computes that prefix G times in every forward and backward. Here samples
that share a token prefix (found from the token ids, never from task ids) are laid out in one
row as the prefix followed by each sample's continuation::

    [prefix p][cont 1][cont 2]...[cont G]   [other tree or plain sample] ...

Each continuation attends to its tree's prefix and causally to itself (algos.learner.tree_attention),
with position ids continuing from the prefix, so every hidden state equals the one of the plain
layout. A token's log-prob is read from the hidden state of its *parent* position (the previous
token of its own sequence: the prefix's last position for a continuation's first token), so the
head runs once per row position. Each sample's ``gather_index`` points at the prefix positions
and then at its continuation: the per-sample ``[S, Tmax]`` tensors the losses of algos.objectives
consume are those of plain packing, and the gather's backward sums the gradient every sample
sends through the shared positions.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from algos.learner.logprobs import hidden_states, lm_head, token_logprobs
from algos.learner.samples import MicroBatch, Sample, _sample_tensors, pack_samples

DEFAULT_MIN_PREFIX = 64
"""Below this many shared tokens a group is packed plainly: the saving is smaller than the
per-piece overhead of the tree attention (one more SDPA call per continuation and layer)."""


@dataclass
class Tree:
    """A packing unit: ``members`` (sample indices) sharing their first ``prefix`` tokens; a
    single member is a plain sequence (``prefix`` is then ignored)."""

    members: list[int]
    prefix: int

    def cost(self, samples: Sequence[Sample]) -> int:
        """Tokens the unit puts in a row."""
        if len(self.members) == 1:
            return len(samples[self.members[0]])
        return self.prefix + sum(len(samples[i]) - self.prefix for i in self.members)


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def find_trees(samples: Sequence[Sample], min_prefix: int = DEFAULT_MIN_PREFIX) -> list[Tree]:
    """Group samples by shared token prefixes (one level; nested sharing is not exploited).

    Samples are sorted by their token ids, so sharers are neighbours; a run grows while its
    common prefix stays >= ``min_prefix`` and the tokens it saves, ``(k - 1) * prefix``, do not
    drop (so a batch-wide system prompt does not merge two tasks' groups into one shallow tree).
    Deterministic; every sample is in exactly one unit.
    """
    order = sorted(range(len(samples)), key=lambda i: (samples[i].input_ids, i))
    units: list[Tree] = []
    cur: list[int] = []
    depth = 0
    for i in order:
        if cur:
            shared = min(depth, _lcp(samples[cur[-1]].input_ids, samples[i].input_ids))
            k = len(cur)
            if shared >= max(1, min_prefix) and k * shared >= (k - 1) * depth:
                cur.append(i)
                depth = shared
                continue
            units.append(Tree(cur, depth))
        cur, depth = [i], len(samples[i])
    if cur:
        units.append(Tree(cur, depth))
    return units


def _split(tree: Tree, samples: Sequence[Sample], budget: int) -> list[Tree]:
    """A tree over the token budget as several trees (each recomputes the prefix) that fit."""
    if len(tree.members) == 1 or tree.cost(samples) <= budget:
        return [tree]
    out: list[Tree] = []
    cur: list[int] = []
    used = tree.prefix
    for i in tree.members:
        cont = len(samples[i]) - tree.prefix
        if cur and used + cont > budget:
            out.append(Tree(cur, tree.prefix))
            cur, used = [], tree.prefix
        cur.append(i)
        used += cont
    out.append(Tree(cur, tree.prefix))
    return out


@dataclass
class TreeMicroBatch(MicroBatch):
    """A one-row micro-batch of trees and plain sequences.

    ``parent_index [1, L]``: the row position whose hidden state predicts each token (-1 at a
    sequence's first token); ``pieces``: per contiguous run of the row ``(start, end,
    prefix_start, prefix_end)``, the run attending causally to itself and fully to
    ``[prefix_start, prefix_end)`` (empty for a prefix or a plain sequence);
    ``plain_tokens``: what plain packing would have computed for the same samples.
    """

    parent_index: Tensor | None = None
    pieces: list[tuple[int, int, int, int]] = field(default_factory=list)
    plain_tokens: int = 0

    def to(self, device: torch.device | str) -> TreeMicroBatch:
        moved: dict[str, Any] = {
            k: (v.to(device) if isinstance(v, Tensor) else v) for k, v in vars(self).items()
        }
        return TreeMicroBatch(**moved)

    def attention_mask(self, attn_implementation: str | None, dtype: torch.dtype) -> Tensor:
        """The dense tree mask ``[1, 1, L, L]`` (True = attend; additive for eager): a
        reference for tests and for implementations without the tree kernel."""
        allowed = dense_tree_mask(self.pieces, self.input_ids.shape[1], self.input_ids.device)
        allowed = allowed[None, None]
        if attn_implementation != "eager":
            return allowed
        zero = torch.zeros((), dtype=dtype, device=allowed.device)
        return torch.where(allowed, zero, torch.finfo(dtype).min)

    def model_kwargs(self, kernel: str | None = None) -> dict:
        """Keyword arguments for the model's forward (read by ``packed_sdpa``)."""
        from algos.learner.tree_attention import TreeLayout

        return {"tree_layout": TreeLayout(self.pieces, self.input_ids.shape[1], kernel)}


def dense_tree_mask(
    pieces: Sequence[tuple[int, int, int, int]], length: int, device: torch.device | str = "cpu"
) -> Tensor:
    """``[L, L]`` bool: who attends to whom in a tree row (O(L^2): tests, short rows)."""
    allowed = torch.zeros(length, length, dtype=torch.bool, device=device)
    for s, e, ps, pe in pieces:
        allowed[s:e, s:e] = torch.ones(e - s, e - s, dtype=torch.bool, device=device).tril()
        allowed[s:e, ps:pe] = True
    return allowed


def _build_trees(samples: Sequence[Sample], units: list[Tree]) -> TreeMicroBatch:
    ids: list[int] = []
    pos: list[int] = []
    seg: list[int] = []
    parent: list[int] = []
    pieces: list[tuple[int, int, int, int]] = []
    rows: dict[int, list[int]] = {}  # sample -> its row positions
    order: list[int] = []

    def put(tokens: Sequence[int], first_pos: int, first_parent: int, prefix: tuple[int, int]):
        start = len(ids)
        ids.extend(tokens)
        pos.extend(range(first_pos, first_pos + len(tokens)))
        seg.extend([len(pieces)] * len(tokens))
        parent.extend([first_parent] + list(range(start, start + len(tokens) - 1)))
        pieces.append((start, start + len(tokens), *prefix))
        return list(range(start, start + len(tokens)))

    for unit in units:
        if len(unit.members) == 1:
            i = unit.members[0]
            rows[i] = put(samples[i].input_ids, 0, -1, (0, 0))
            order.append(i)
            continue
        p = unit.prefix
        head = put(samples[unit.members[0]].input_ids[:p], 0, -1, (0, 0))
        for i in unit.members:
            rest = samples[i].input_ids[p:]
            tail = put(rest, p, head[-1], (head[0], head[-1] + 1)) if rest else []
            rows[i] = head + tail
            order.append(i)
    chosen = [samples[i] for i in order]
    width = max(len(x) for x in chosen)
    gather = torch.zeros(len(order), width, dtype=torch.long)
    for k, i in enumerate(order):
        gather[k, : len(rows[i])] = torch.tensor(rows[i], dtype=torch.long)
    t = _sample_tensors(chosen, width)
    return TreeMicroBatch(
        input_ids=torch.tensor([ids], dtype=torch.long),
        position_ids=torch.tensor([pos], dtype=torch.long),
        segment_ids=torch.tensor([seg], dtype=torch.long),
        gather_index=gather,
        loss_mask=t["loss_mask"],
        behaviour_logprobs=t["behaviour_logprobs"],
        advantages=t["advantages"],
        ref_logprobs=t.get("ref_logprobs"),
        sample_indices=order,
        proximal_logprobs=t.get("proximal_logprobs"),
        parent_index=torch.tensor([parent], dtype=torch.long),
        pieces=pieces,
        plain_tokens=sum(len(x) for x in chosen),
    )


def pack_trees(
    samples: Sequence[Sample], micro_batch_tokens: int, min_prefix: int = DEFAULT_MIN_PREFIX
) -> list[MicroBatch]:
    """Micro-batches of at most ``micro_batch_tokens`` row tokens with shared prefixes computed
    once (first-fit decreasing over units, as :func:`algos.learner.samples.pack_samples` over samples).

    When no two samples share ``min_prefix`` tokens this *is* ``pack_samples`` (same batches,
    same numbers). A unit over the budget is split into trees that fit; a single sequence over
    the budget gets a micro-batch of its own (never split).
    """
    if micro_batch_tokens < 1:
        raise ValueError(f"micro_batch_tokens must be >= 1; got {micro_batch_tokens}")
    units = [
        u for t in find_trees(samples, min_prefix) for u in _split(t, samples, micro_batch_tokens)
    ]
    if all(len(u.members) == 1 for u in units):
        return pack_samples(samples, micro_batch_tokens)
    units.sort(key=lambda u: (-u.cost(samples), min(u.members)))
    bins: list[list[Tree]] = []
    room: list[int] = []
    for u in units:
        n = u.cost(samples)
        for b, free in enumerate(room):
            if n <= free:
                bins[b].append(u)
                room[b] -= n
                break
        else:
            bins.append([u])
            room.append(max(0, micro_batch_tokens - n))
    return [_build_trees(samples, b) for b in bins]


def tree_ready(*models: nn.Module | None) -> bool:
    """True when every given model runs ``packed_sdpa`` (the implementation that reads the
    tree layout); other implementations get plain packing."""
    from algos.learner.attention import ATTN_NAME

    impls = [
        getattr(getattr(m, "config", None), "_attn_implementation", None)
        for m in models
        if m is not None
    ]
    return bool(impls) and all(i == ATTN_NAME for i in impls)


def tree_token_logprobs(
    mb: TreeMicroBatch,
    model: nn.Module,
    input_ids: Tensor,
    *,
    position_ids: Tensor | None = None,
    temperature: float = 1.0,
    chunk_size: int | None = None,
    return_entropy: bool = False,
    autocast_dtype: torch.dtype | None = None,
    head_dtype: torch.dtype | None = None,
    attention_mask: Tensor | None = None,
    positions: Tensor | None = None,
    **model_kwargs,
) -> Tensor | tuple[Tensor, Tensor]:
    """Row log-probs ``[1, L]`` of a tree row (the signature of
    :func:`algos.learner.logprobs.model_token_logprobs`): ``out[0, j] = log p(x_j | h[parent_j])``,
    0 at roots (and, with ``positions``, everywhere else but there: the head runs on those
    only). ``model_kwargs`` must carry the ``tree_layout``."""
    ctx = (
        torch.autocast(input_ids.device.type, dtype=autocast_dtype)
        if autocast_dtype is not None
        else contextlib.nullcontext()
    )
    with ctx:
        h = hidden_states(
            model,
            input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            **model_kwargs,
        )
    assert mb.parent_index is not None  # pack_trees sets it on every tree row
    parent = mb.parent_index[0]
    child = (parent >= 0).nonzero().squeeze(1) if positions is None else positions
    weight, bias = lm_head(model)
    out = token_logprobs(
        h[0].index_select(0, parent[child]),
        weight,
        input_ids[0, child],
        bias=bias,
        temperature=temperature,
        chunk_size=chunk_size,
        return_entropy=return_entropy,
        compute_dtype=head_dtype,
    )
    length = input_ids.shape[1]

    def row(values: Tensor) -> Tensor:
        return values.new_zeros(length).index_copy(0, child, values)[None]

    if isinstance(out, tuple):  # return_entropy
        return row(out[0]), row(out[1])
    return row(out)
