"""Learner input (:class:`Sample`) and its packing into token-budget micro-batches.

A micro-batch holds rows of tokens (``[R, L]``) for the model, and per-sample views
(``[S, Tmax]``) for the loss: ``gather_index`` maps each (sample, token) to its position in the
flattened rows, so the per-token log-probs of a packed row become a padded per-sample matrix
that :mod:`algos.objectives` losses consume. Two layouts share that structure:

- packed (default): sequences concatenated in one row (``R = 1``), ``position_ids`` restarting at
  0 per sequence, attention block-diagonal causal, no padding;
- padded (baseline, for comparison): one sequence per row, right-padded to the longest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


@dataclass
class Sample:
    """One trajectory as the learner sees it (the token-exact output of a rollout).

    Attributes:
        input_ids: every token of the sequence (prompt, actions, observations), as sampled.
        loss_mask: 1 on policy (action) tokens, 0 on prompt/observation tokens. ``loss_mask[0]``
            must be 0: the first token has no context to be predicted from.
        behaviour_logprobs: the behaviour policy's log-probs (the rollout engine's, as it
            sampled) aligned to tokens (0 where the mask is 0); needed by ratio-based losses
            (ppo/grpo/dapo), optional for sft/pg.
        advantage: one float for the sequence, or one per token.
        ref_logprobs: reference-policy log-probs aligned to tokens, if precomputed.
        sample_id: the caller's id (e.g. ``"task-3/rollout-7"``), carried into error messages.
        proximal_logprobs: the learner's log-probs of the same tokens before the iteration's
            first step (recomputed; ``old_logprobs=recompute``), else None. When present the
            ratio is taken against them and the off-policy correction and the mismatch metrics
            compare them with ``behaviour_logprobs``.
    """

    input_ids: list[int]
    loss_mask: list[int]
    behaviour_logprobs: list[float] | None = None
    advantage: float | list[float] = 0.0
    ref_logprobs: list[float] | None = None
    sample_id: str | int | None = None
    proximal_logprobs: list[float] | None = None

    def __post_init__(self) -> None:
        n = len(self.input_ids)
        if n < 2:
            raise ValueError(f"sample {self.sample_id}: needs >= 2 tokens, got {n}")
        aligned = {
            "loss_mask": self.loss_mask,
            "behaviour_logprobs": self.behaviour_logprobs,
            "ref_logprobs": self.ref_logprobs,
            "proximal_logprobs": self.proximal_logprobs,
        }
        if not isinstance(self.advantage, int | float):
            aligned["advantage"] = self.advantage
        for name, values in aligned.items():
            if values is not None and len(values) != n:
                raise ValueError(
                    f"sample {self.sample_id}: {name} has {len(values)} entries, input_ids has {n}"
                )
        if any(m not in (0, 1) for m in self.loss_mask):
            raise ValueError(f"sample {self.sample_id}: loss_mask must hold only 0/1")
        if self.loss_mask[0]:
            raise ValueError(
                f"sample {self.sample_id}: loss_mask[0] must be 0 (the first token has no "
                "context to be predicted from)"
            )

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def num_loss_tokens(self) -> int:
        return sum(self.loss_mask)


@dataclass
class MicroBatch:
    """Rows for the model and per-sample tensors for the loss (see the module docstring)."""

    input_ids: Tensor  # [R, L] long
    position_ids: Tensor  # [R, L] long, restarting at 0 per sequence
    segment_ids: Tensor  # [R, L] long, sequence number within the row, -1 on padding
    gather_index: Tensor  # [S, Tmax] long, flat index into the [R * L] rows (0 on padding)
    loss_mask: Tensor  # [S, Tmax] float
    behaviour_logprobs: Tensor  # [S, Tmax] float (0 where samples carry none)
    advantages: Tensor  # [S, Tmax] float
    ref_logprobs: Tensor | None  # [S, Tmax] float
    sample_indices: list[int]  # which samples of the step, in row order
    proximal_logprobs: Tensor | None = None  # [S, Tmax] float, when every sample has them

    @property
    def old_logprobs(self) -> Tensor:
        """What the ratio is taken against (PPO's pi_old, the losses' ``old_logprobs``): the
        proximal log-probs when recomputed, else the behaviour policy's."""
        return self.behaviour_logprobs if self.proximal_logprobs is None else self.proximal_logprobs

    @property
    def num_tokens(self) -> int:
        """Tokens the model processes (padding included)."""
        return self.input_ids.numel()

    @property
    def num_real_tokens(self) -> int:
        return int((self.segment_ids >= 0).sum())

    def to(self, device: torch.device | str) -> MicroBatch:
        moved: dict[str, Any] = {
            k: (v.to(device) if isinstance(v, Tensor) else v) for k, v in vars(self).items()
        }
        return MicroBatch(**moved)

    def attention_mask(self, attn_implementation: str | None, dtype: torch.dtype) -> Tensor | None:
        """The mask to pass to a HF model for this layout.

        ``sdpa``: a 4D bool block-diagonal causal mask (True = attend); ``eager``: the same as an
        additive float mask; any other implementation (flash-attention, flex): None for packed
        rows, so the model derives varlen boundaries from ``position_ids``, or a 2D padding mask.
        None also whenever each row is one unpadded sequence (plain causal attention). The 4D
        mask is ``[R, 1, L, L]``: fine for moderate L. The learner avoids it for packed rows by
        switching sdpa models to ``packed_sdpa`` (algos.learner.attention), which takes the sequence
        boundaries instead; flash-attention needs neither.
        """
        seg = self.segment_ids
        single = bool((seg == 0).all())
        if single:
            return None
        if attn_implementation not in ("sdpa", "eager"):
            padded = bool((seg < 0).any())
            return (seg >= 0).long() if padded and bool((seg <= 0).all()) else None
        length = seg.shape[1]
        causal = torch.ones(length, length, dtype=torch.bool, device=seg.device).tril()
        allowed = (seg[:, :, None] == seg[:, None, :]) & causal  # pads attend to pads: no NaN
        allowed = allowed[:, None]
        if attn_implementation == "sdpa":
            return allowed
        zero = torch.zeros((), dtype=dtype, device=seg.device)
        return torch.where(allowed, zero, torch.finfo(dtype).min)


def _sample_tensors(samples: Sequence[Sample], width: int) -> dict[str, Tensor]:
    s = len(samples)
    out = {k: torch.zeros(s, width) for k in ("loss_mask", "behaviour_logprobs", "advantages")}
    if all(x.ref_logprobs is not None for x in samples):
        out["ref_logprobs"] = torch.zeros(s, width)
    if all(x.proximal_logprobs is not None for x in samples):
        out["proximal_logprobs"] = torch.zeros(s, width)
    for i, x in enumerate(samples):
        n = len(x)
        out["loss_mask"][i, :n] = torch.tensor(x.loss_mask, dtype=torch.float32)
        if x.behaviour_logprobs is not None:
            out["behaviour_logprobs"][i, :n] = torch.tensor(
                x.behaviour_logprobs, dtype=torch.float32
            )
        if isinstance(x.advantage, int | float):
            out["advantages"][i, :n] = float(x.advantage)
        else:
            out["advantages"][i, :n] = torch.tensor(x.advantage, dtype=torch.float32)
        if "ref_logprobs" in out:
            out["ref_logprobs"][i, :n] = torch.tensor(x.ref_logprobs, dtype=torch.float32)
        if "proximal_logprobs" in out:
            out["proximal_logprobs"][i, :n] = torch.tensor(x.proximal_logprobs, dtype=torch.float32)
    return out


def _build(samples: Sequence[Sample], indices: list[int], rows: list[list[int]]) -> MicroBatch:
    """``rows``: for each row, the positions in ``indices`` of the samples it holds."""
    row_len = max(sum(len(samples[indices[j]]) for j in row) for row in rows)
    r = len(rows)
    ids = torch.zeros(r, row_len, dtype=torch.long)
    pos = torch.zeros(r, row_len, dtype=torch.long)
    seg = torch.full((r, row_len), -1, dtype=torch.long)
    order = [j for row in rows for j in row]
    chosen = [samples[indices[j]] for j in order]
    width = max(len(x) for x in chosen)
    gather = torch.zeros(len(chosen), width, dtype=torch.long)
    k = 0
    for ri, row in enumerate(rows):
        offset = 0
        for si, j in enumerate(row):
            x = samples[indices[j]]
            n = len(x)
            ids[ri, offset : offset + n] = torch.tensor(x.input_ids, dtype=torch.long)
            pos[ri, offset : offset + n] = torch.arange(n)
            seg[ri, offset : offset + n] = si
            gather[k, :n] = ri * row_len + offset + torch.arange(n)
            offset += n
            k += 1
    t = _sample_tensors(chosen, width)
    return MicroBatch(
        input_ids=ids,
        position_ids=pos,
        segment_ids=seg,
        gather_index=gather,
        loss_mask=t["loss_mask"],
        behaviour_logprobs=t["behaviour_logprobs"],
        advantages=t["advantages"],
        ref_logprobs=t.get("ref_logprobs"),
        sample_indices=[indices[j] for j in order],
        proximal_logprobs=t.get("proximal_logprobs"),
    )


def pack_samples(samples: Sequence[Sample], micro_batch_tokens: int) -> list[MicroBatch]:
    """Pack samples into one-row micro-batches of at most ``micro_batch_tokens`` tokens each.

    First-fit decreasing over sequence lengths (deterministic: ties keep input order). A
    sample longer than the budget gets a micro-batch of its own (a sequence is never split).
    """
    if micro_batch_tokens < 1:
        raise ValueError(f"micro_batch_tokens must be >= 1; got {micro_batch_tokens}")
    order = sorted(range(len(samples)), key=lambda i: -len(samples[i]))
    bins: list[list[int]] = []
    room: list[int] = []
    for i in order:
        n = len(samples[i])
        for b, free in enumerate(room):
            if n <= free:
                bins[b].append(i)
                room[b] -= n
                break
        else:
            bins.append([i])
            room.append(max(0, micro_batch_tokens - n))
    return [_build(samples, b, [list(range(len(b)))]) for b in bins]


def pad_samples(samples: Sequence[Sample], micro_batch_tokens: int) -> list[MicroBatch]:
    """Baseline layout: one sequence per row, right-padded, rows taken in input order while
    ``rows * longest <= micro_batch_tokens`` (padding counts against the budget)."""
    if micro_batch_tokens < 1:
        raise ValueError(f"micro_batch_tokens must be >= 1; got {micro_batch_tokens}")
    batches: list[list[int]] = []
    cur: list[int] = []
    longest = 0
    for i, x in enumerate(samples):
        new_longest = max(longest, len(x))
        if cur and (len(cur) + 1) * new_longest > micro_batch_tokens:
            batches.append(cur)
            cur, new_longest = [], len(x)
        cur.append(i)
        longest = new_longest
    if cur:
        batches.append(cur)
    return [_build(samples, b, [[j] for j in range(len(b))]) for b in batches]
