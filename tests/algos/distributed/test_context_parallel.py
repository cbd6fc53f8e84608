"""Context parallelism: zig-zag sharding, ring attention and a Llama on CP shards == unsplit."""

from __future__ import annotations

import pytest
import torch

from algos.distributed.context_parallel import (
    cp_attention_context,
    next_token_targets,
    padded_length,
    position_ids_from_seq_ids,
    ring_attention,
    seq_ids_from_cu_seqlens,
    shard_packed_batch,
    unshard,
    zigzag_indices,
)

TOL = 2e-6  # fp32


def test_zigzag_balances_causal_work_and_covers_every_token():
    t, cp = 16, 4
    shards = [zigzag_indices(t, r, cp) for r in range(cp)]
    assert sorted(torch.cat(shards).tolist()) == list(range(t))
    # causal work of a query = its index + 1; zig-zag makes it equal on every rank
    work = {int((s + 1).sum()) for s in shards}
    assert len(work) == 1


def test_shard_pads_and_unshard_restores():
    seq = seq_ids_from_cu_seqlens([0, 3, 7])[None]
    ids = torch.arange(7)[None] + 10
    parts = [shard_packed_batch({"input_ids": ids, "seq_ids": seq}, r, 2) for r in range(2)]
    assert padded_length(7, 2) == 8
    # rank 0 holds chunks 0 and 3 of 4: tokens 0, 1, 6 and the pad at index 7
    assert parts[0]["global_index"].tolist() == [0, 1, 6, 7]
    assert parts[0]["seq_ids"][0, -1].item() == -1 and parts[0]["input_ids"][0, -1].item() == 0
    full = unshard([p["input_ids"] for p in parts], 7, 2)
    assert torch.equal(full, ids)
    pos = unshard([p["position_ids"] for p in parts], 7, 2)
    assert pos.tolist() == [[0, 1, 2, 0, 1, 2, 3]]


def test_targets_stop_at_document_boundaries():
    seq = seq_ids_from_cu_seqlens([0, 2, 5])[None]
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    assert next_token_targets(ids, seq).tolist() == [[6, -100, 8, 9, -100]]
    assert position_ids_from_seq_ids(seq).tolist() == [[0, 1, 0, 1, 2]]


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match="not divisible by 2\\*cp_size=4"):
        zigzag_indices(6, 0, 2)
    with pytest.raises(KeyError, match="seq_ids"):
        shard_packed_batch({"input_ids": torch.zeros(1, 4)}, 0, 1)
    with pytest.raises(RuntimeError, match="outside cp_attention_context"):
        ring_attention(torch.zeros(1, 2, 4, 8), torch.zeros(1, 2, 4, 8), torch.zeros(1, 2, 4, 8))


def test_single_rank_is_document_masked_attention_with_exact_backward():
    torch.manual_seed(0)
    t = 12
    seq = seq_ids_from_cu_seqlens([0, 5, 12])[None]
    q = torch.randn(1, 4, t, 8, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 2, t, 8, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 2, t, 8, dtype=torch.float64, requires_grad=True)
    with cp_attention_context(None, torch.arange(t), seq):
        out = ring_attention(q, k, v)
    allowed = (torch.arange(t)[None] <= torch.arange(t)[:, None]) & (
        seq[0][None] == seq[0][:, None]
    )
    ref = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), attn_mask=allowed
    )
    assert (out.double() - ref).abs().max() < TOL
    g = torch.randn_like(ref)
    mine = torch.autograd.grad(out, (q, k, v), g)
    theirs = torch.autograd.grad(ref, (q, k, v), g)
    for a, b in zip(mine, theirs, strict=True):
        assert (a - b).abs().max() < TOL


@pytest.mark.slow  # 11-18 s: torchrun with 2 or 4 ranks
@pytest.mark.parametrize("cp", [2, 4])
def test_ring_attention_and_llama_on_cp_ranks_match_unsplit(run_worker, cp):
    """gloo ranks; packed docs incl. a 1-token doc and padding; fwd + bwd, fp32."""
    res = run_worker("cp_worker.py", cp)
    for key in ("attn_out", "attn_dq", "attn_dk", "attn_dv", "logprob", "loss", "grad"):
        assert res[key] < TOL, f"{key}: max |CP - unsplit| = {res[key]:.2e} (cp={cp})"
    assert res["count"] == 0
