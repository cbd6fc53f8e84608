"""Context parallelism: one (packed) sequence split along the sequence dim over a CP group.

Choice: **ring attention** with an online softmax (log-sum-exp merge), not Ulysses all-to-all.

- Ring works for any head count. Ulysses scatters heads, so it needs ``num_kv_heads % cp == 0``;
  small GQA models (SmolLM2-135M: 3 KV heads, Qwen-7B: 4) would cap CP at 1-4.
- Ring keeps memory ~1/CP: a rank holds its own Q/K/V/O (T/CP tokens) plus one K/V block in
  flight; the score tile is (T/CP)^2. All-gathering K/V would hold all T keys on every rank.
- The K/V send for step s+1 overlaps the block computation of step s (``batch_isend_irecv``).
- Causal load balance: **zig-zag sharding**. The sequence is cut into 2*CP chunks and rank r
  holds chunks r and 2*CP-1-r, so every rank has the same amount of causal work (with plain
  contiguous shards the last rank does CP times the work of the first).

Masking is computed from each token's *global index* in the packed row and its *sequence id*:
key j is visible to query i iff ``idx_j <= idx_i and seq_j == seq_i``. This gives exact
document-level causal attention for packed sequences (cu_seqlens converted to sequence ids by
:func:`seq_ids_from_cu_seqlens`) on any sharding. This pure-PyTorch version computes every
block tile (masked ones too); a fused kernel would skip the fully-masked tiles.

Backward is exact: a custom ``autograd.Function`` that runs the ring again, recomputes each
block's probabilities from the saved final log-sum-exp (as FlashAttention does) and sends each
K/V block's gradient accumulator around the ring with it; after CP steps plus one hop every
rank holds dK/dV of its own block.

Using it with an HF Llama-style model::

    register_cp_attention()                                  # once; name "ring_cp"
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="ring_cp")
    shard = shard_packed_batch(batch, cp_rank, cp_size)      # zig-zag shard + global indices
    with cp_attention_context(cp_group, shard["global_index"], shard["seq_ids"]):
        hidden = model.model(input_ids=shard["input_ids"],
                             position_ids=shard["position_ids"]).last_hidden_state

Positions (rope) come from the shard's ``position_ids``; next-token targets are computed on the
unsplit row (:func:`next_token_targets`) before sharding, so a shard's last token still has its
label. With ``cp_group=None`` (or size 1) the same attention runs locally: it is then simply
document-masked attention for packed rows.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist

from algos.learner.attention import set_attention

ATTN_NAME = "ring_cp"
PAD_SEQ_ID = -1  # sequence id of padding added to make the length divisible by 2*CP


# --------------------------------------------------------------------------- sharding


def padded_length(seq_len: int, cp_size: int) -> int:
    """Smallest length >= seq_len divisible by 2*cp_size (zig-zag needs 2*CP equal chunks)."""
    if cp_size < 1:
        raise ValueError(f"cp_size must be >= 1, got {cp_size}")
    m = 2 * cp_size
    return -(-seq_len // m) * m


def zigzag_indices(seq_len: int, cp_rank: int, cp_size: int) -> torch.Tensor:
    """Global token indices held by ``cp_rank``: chunks ``r`` and ``2*CP-1-r`` of 2*CP chunks."""
    if not 0 <= cp_rank < cp_size:
        raise ValueError(f"cp_rank must be in [0, {cp_size}), got {cp_rank}")
    if seq_len % (2 * cp_size):
        raise ValueError(
            f"sequence length {seq_len} is not divisible by 2*cp_size={2 * cp_size}; "
            "pad it first (padded_length / shard_packed_batch do this)"
        )
    c = seq_len // (2 * cp_size)
    a = torch.arange(cp_rank * c, (cp_rank + 1) * c)
    b = torch.arange((2 * cp_size - 1 - cp_rank) * c, (2 * cp_size - cp_rank) * c)
    return torch.cat([a, b])


def seq_ids_from_cu_seqlens(cu_seqlens: torch.Tensor | list[int], total: int | None = None):
    """``cu_seqlens=[0, 3, 5]`` -> ``[0, 0, 0, 1, 1]`` (tokens past the last boundary: pad id)."""
    cu = torch.as_tensor(cu_seqlens, dtype=torch.long)
    total = int(cu[-1]) if total is None else total
    ids = torch.full((total,), PAD_SEQ_ID, dtype=torch.long)
    for i in range(len(cu) - 1):
        ids[int(cu[i]) : int(cu[i + 1])] = i
    return ids


def position_ids_from_seq_ids(seq_ids: torch.Tensor) -> torch.Tensor:
    """Positions restarting at 0 at each new sequence id, along the last dim."""
    t = seq_ids.shape[-1]
    ar = torch.arange(t, device=seq_ids.device).expand_as(seq_ids)
    start = torch.ones_like(seq_ids, dtype=torch.bool)
    start[..., 1:] = seq_ids[..., 1:] != seq_ids[..., :-1]
    first = torch.where(start, ar, torch.zeros_like(ar)).cummax(-1).values
    return ar - first


def next_token_targets(input_ids: torch.Tensor, seq_ids: torch.Tensor, ignore: int = -100):
    """Target of position t is token t+1 of the same sequence; ``ignore`` at sequence ends."""
    tgt = torch.full_like(input_ids, ignore)
    tgt[..., :-1] = input_ids[..., 1:]
    same = torch.zeros_like(seq_ids, dtype=torch.bool)
    same[..., :-1] = seq_ids[..., 1:] == seq_ids[..., :-1]
    return torch.where(same & (seq_ids != PAD_SEQ_ID), tgt, torch.full_like(tgt, ignore))


_PAD_VALUES = {"seq_ids": PAD_SEQ_ID, "targets": -100}


def shard_packed_batch(
    batch: dict[str, torch.Tensor], cp_rank: int, cp_size: int, pad_values: dict | None = None
) -> dict[str, torch.Tensor]:
    """Pad every ``[B, T, ...]`` tensor to a multiple of 2*CP and keep this rank's zig-zag part.

    ``batch`` must hold ``seq_ids`` ([B, T], one id per packed document). Missing
    ``position_ids`` are derived from ``seq_ids``. Padding gets sequence id -1, position 0,
    target -100 and 0 elsewhere (so a loss mask pads with 0). The result adds
    ``global_index`` ([T_local]) for :func:`cp_attention_context`.
    """
    if "seq_ids" not in batch:
        raise KeyError(f"batch needs 'seq_ids' ([B, T]); got keys {sorted(batch)}")
    batch = dict(batch)
    if "position_ids" not in batch:
        batch["position_ids"] = position_ids_from_seq_ids(batch["seq_ids"])
    t = batch["seq_ids"].shape[1]
    tp = padded_length(t, cp_size)
    pads = {**_PAD_VALUES, **(pad_values or {})}
    idx = zigzag_indices(tp, cp_rank, cp_size)
    out: dict[str, torch.Tensor] = {}
    for name, x in batch.items():
        if x.shape[1] != t:
            raise ValueError(f"batch[{name!r}] has length {x.shape[1]} on dim 1, expected {t}")
        if tp > t:
            pad = torch.full(
                (x.shape[0], tp - t, *x.shape[2:]),
                pads.get(name, 0),
                dtype=x.dtype,
                device=x.device,
            )
            x = torch.cat([x, pad], dim=1)
        out[name] = x.index_select(1, idx.to(x.device))
    out["global_index"] = idx.to(batch["seq_ids"].device)
    return out


def unshard(shards: list[torch.Tensor], seq_len: int, cp_size: int, dim: int = 1) -> torch.Tensor:
    """Inverse of the zig-zag split: ``shards[r]`` from every rank -> the padded full tensor."""
    tp = padded_length(seq_len, cp_size)
    full_shape = list(shards[0].shape)
    full_shape[dim] = tp
    full = shards[0].new_zeros(full_shape)
    for r, s in enumerate(shards):
        full.index_copy_(dim, zigzag_indices(tp, r, cp_size).to(s.device), s)
    return full.narrow(dim, 0, seq_len)


# --------------------------------------------------------------------------- ring attention


def _ring_peers(group) -> tuple[int, int, int, int]:
    """(group rank, group size, global rank of next, global rank of previous)."""
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    nxt = dist.get_global_rank(group, (rank + 1) % size)
    prv = dist.get_global_rank(group, (rank - 1) % size)
    return rank, size, nxt, prv


def _exchange(send: list[torch.Tensor], group, nxt: int, prv: int):
    """Start sending ``send`` to the next rank and receiving same-shaped tensors from the previous."""
    send = [t.contiguous() for t in send]  # gloo/NCCL send contiguous buffers only
    recv = [torch.empty_like(t) for t in send]
    ops = [dist.P2POp(dist.isend, t, nxt, group) for t in send]
    ops += [dist.P2POp(dist.irecv, t, prv, group) for t in recv]
    return dist.batch_isend_irecv(ops), recv


def _allowed(q_idx, q_seq, k_idx, k_seq) -> torch.Tensor:
    """[B, 1, 1, Tq, Tk] bool: causal within the same sequence id."""
    causal = k_idx[None, :] <= q_idx[:, None]  # [Tq, Tk]
    same = k_seq[:, None, :] == q_seq[:, :, None]  # [B, Tq, Tk]
    return (causal[None] & same)[:, None, None]


def _scores(q, k, scale, allowed):
    s = torch.einsum("bhgqd,bhkd->bhgqk", q, k) * scale
    return s.masked_fill(~allowed, float("-inf"))


def _finite_or_zero(x: torch.Tensor) -> torch.Tensor:
    return torch.where(torch.isfinite(x), x, torch.zeros_like(x))


class _RingAttention(torch.autograd.Function):
    """q [B, Hkv, g, Tq, D], k/v [B, Hkv, Tk, D] (fp32); returns out like q (fp32)."""

    @staticmethod
    def forward(ctx, q, k, v, scale, q_idx, q_seq, all_idx, all_seq, group):
        cp_rank, cp_size, nxt, prv = (0, 1, 0, 0) if group is None else _ring_peers(group)
        out = torch.zeros_like(q)
        lse = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype, device=q.device)
        kk, vv = k, v
        for step in range(cp_size):
            src = (cp_rank - step) % cp_size
            pending = None
            if step < cp_size - 1:  # overlap the next block's transfer with this block's math
                pending, recv = _exchange([kk.contiguous(), vv.contiguous()], group, nxt, prv)
            s = _scores(q, kk, scale, _allowed(q_idx, q_seq, all_idx[src], all_seq[src]))
            lse_b = torch.logsumexp(s, dim=-1)
            p = torch.exp(s - _finite_or_zero(lse_b)[..., None])
            o_b = torch.einsum("bhgqk,bhkd->bhgqd", p, vv)
            new = torch.logaddexp(lse, lse_b)
            out = (
                out * torch.exp(lse - new).nan_to_num(0.0)[..., None]
                + o_b * torch.exp(lse_b - new).nan_to_num(0.0)[..., None]
            )
            lse = new
            if pending is not None:
                for w in pending:
                    w.wait()
                kk, vv = recv
        ctx.save_for_backward(q, k, v, out, lse, q_idx, q_seq, all_idx, all_seq)
        ctx.scale, ctx.group = scale, group
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse, q_idx, q_seq, all_idx, all_seq = ctx.saved_tensors
        scale, group = ctx.scale, ctx.group
        cp_rank, cp_size, nxt, prv = (0, 1, 0, 0) if group is None else _ring_peers(group)
        dout = dout.contiguous()
        delta = (dout * out).sum(-1, keepdim=True)  # D_i = rowsum(dO * O)
        dq = torch.zeros_like(q)
        kk, vv = k, v
        dk, dv = torch.zeros_like(k), torch.zeros_like(v)
        lse_safe = _finite_or_zero(lse)[..., None]
        for step in range(cp_size):
            src = (cp_rank - step) % cp_size
            pending = None
            if step < cp_size - 1:
                pending, recv = _exchange([kk.contiguous(), vv.contiguous()], group, nxt, prv)
            s = _scores(q, kk, scale, _allowed(q_idx, q_seq, all_idx[src], all_seq[src]))
            p = torch.exp(s - lse_safe)
            dv = dv + torch.einsum("bhgqk,bhgqd->bhkd", p, dout)
            dp = torch.einsum("bhgqd,bhkd->bhgqk", dout, vv)
            ds = p * (dp - delta)
            dq = dq + torch.einsum("bhgqk,bhkd->bhgqd", ds, kk) * scale
            dk = dk + torch.einsum("bhgqk,bhgqd->bhkd", ds, q) * scale
            if cp_size > 1:  # the accumulators travel with their K/V block
                works, (dk, dv) = _exchange([dk, dv], group, nxt, prv)
                for w in works:
                    w.wait()
            if pending is not None:
                for w in pending:
                    w.wait()
                kk, vv = recv
        # after cp_size hops each rank holds the gradient of its own K/V block
        return dq, dk, dv, None, None, None, None, None, None


@dataclass
class _CPState:
    group: object | None
    global_index: torch.Tensor  # [T_local] long
    seq_ids: torch.Tensor  # [B, T_local] long
    all_index: torch.Tensor  # [CP, T_local]
    all_seq: torch.Tensor  # [CP, B, T_local]


_STATE: contextvars.ContextVar[_CPState | None] = contextvars.ContextVar("cp_state", default=None)


def _gather(x: torch.Tensor, group) -> torch.Tensor:
    if group is None or dist.get_world_size(group) == 1:
        return x[None]
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.stack(parts)


@contextlib.contextmanager
def cp_attention_context(
    group, global_index: torch.Tensor, seq_ids: torch.Tensor
) -> Iterator[None]:
    """Make ``ring_cp`` attention use this shard's global token indices and sequence ids.

    Every rank of ``group`` must enter it with its own shard (all of the same length); the
    indices and ids of all ranks are exchanged once here, not per layer.
    """
    if seq_ids.dim() != 2 or global_index.dim() != 1 or seq_ids.shape[1] != global_index.shape[0]:
        raise ValueError(
            f"expected global_index [T] and seq_ids [B, T]; got {tuple(global_index.shape)} "
            f"and {tuple(seq_ids.shape)}"
        )
    if group is not None and dist.get_world_size(group) == 1:
        group = None
    gi, si = global_index.long(), seq_ids.long()
    state = _CPState(group, gi, si, _gather(gi, group), _gather(si, group))
    token = _STATE.set(state)
    try:
        yield
    finally:
        _STATE.reset(token)


def ring_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float | None = None
) -> torch.Tensor:
    """Exact document-causal attention over the CP group set by :func:`cp_attention_context`.

    query [B, H, T_local, D], key/value [B, Hkv, T_local, D] (GQA: H % Hkv == 0).
    Returns [B, H, T_local, D] in query's dtype; the math runs in fp32.
    """
    st = _STATE.get()
    if st is None:
        raise RuntimeError(
            "ring_cp attention called outside cp_attention_context(group, global_index, seq_ids)"
        )
    b, h, t, d = query.shape
    hkv = key.shape[1]
    if h % hkv:
        raise ValueError(f"query heads {h} not divisible by key/value heads {hkv}")
    if t != st.global_index.shape[0]:
        raise ValueError(f"shard length {t} != cp context length {st.global_index.shape[0]}")
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    q = query.float().reshape(b, hkv, h // hkv, t, d).contiguous()
    out = _RingAttention.apply(
        q,
        key.float().contiguous(),
        value.float().contiguous(),
        scale,
        st.global_index,
        st.seq_ids,
        st.all_index,
        st.all_seq,
        st.group,
    )
    return out.reshape(b, h, t, d).to(query.dtype)


def hf_ring_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers ``AttentionInterface`` signature; returns [B, T, H, D] like sdpa's."""
    if dropout and module.training:
        raise ValueError(f"ring_cp attention does not implement dropout (got {dropout})")
    out = ring_attention(query, key, value, scaling)
    return out.transpose(1, 2).contiguous(), None


def register_cp_attention(name: str = ATTN_NAME) -> str:
    """Register the ring attention with transformers under ``name`` (idempotent)."""
    from transformers import AttentionInterface

    AttentionInterface.register(name, hf_ring_attention_forward)
    return name


def use_cp_attention(model: torch.nn.Module, name: str = ATTN_NAME) -> torch.nn.Module:
    """Switch an already-built HF model to ring attention."""
    register_cp_attention(name)
    return set_attention(model, name)
