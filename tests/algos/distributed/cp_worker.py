"""Run under torchrun (gloo, CPU): ring attention and a tiny Llama on CP shards vs unsplit.

Writes the max abs differences as JSON to argv[1] (rank 0). Driven by test_context_parallel.py.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

from algos.distributed.context_parallel import (
    cp_attention_context,
    next_token_targets,
    position_ids_from_seq_ids,
    register_cp_attention,
    ring_attention,
    seq_ids_from_cu_seqlens,
    shard_packed_batch,
    unshard,
)
from algos.distributed.fsdp import teardown_distributed
from tests.algos.tiny_models import tiny_llama

MODEL = {"seed": 1, "attn": None, "vocab": 97, "max_positions": 128}  # stock attention first


def gather_unshard(x: torch.Tensor, seq_len: int, cp: int, dim: int = 1) -> torch.Tensor:
    parts = [torch.empty_like(x) for _ in range(cp)]
    dist.all_gather(parts, x.contiguous())
    return unshard(parts, seq_len, cp, dim)


def attention_check(rank: int, cp: int) -> dict:
    torch.manual_seed(0)
    b, h, hkv, t, d = 2, 4, 2, 29, 8  # 29: not divisible by 2*cp -> exercises padding
    q, k, v = (torch.randn(b, n, t, d) for n in (h, hkv, hkv))
    g = torch.randn(b, h, t, d)
    seq = torch.stack([seq_ids_from_cu_seqlens([0, 7, 20, 29]), seq_ids_from_cu_seqlens([0, 29])])
    # reference: full document-causal sdpa
    qr, kr, vr = (x.clone().requires_grad_() for x in (q, k, v))
    allowed = (torch.arange(t)[None, :] <= torch.arange(t)[:, None])[None] & (
        seq[:, None, :] == seq[:, :, None]
    )
    ref = F.scaled_dot_product_attention(
        qr,
        kr.repeat_interleave(h // hkv, 1),
        vr.repeat_interleave(h // hkv, 1),
        attn_mask=allowed[:, None],
    )
    (ref * g).sum().backward()
    # CP: tensors are [B, H, T, D]; shard along T (move to dim 1 for shard_packed_batch)
    sh = shard_packed_batch(
        {
            "seq_ids": seq,
            "q": q.transpose(1, 2),
            "k": k.transpose(1, 2),
            "v": v.transpose(1, 2),
            "g": g.transpose(1, 2),
        },
        rank,
        cp,
    )
    qs, ks, vs = (sh[n].transpose(1, 2).contiguous().requires_grad_() for n in "qkv")
    with cp_attention_context(dist.group.WORLD, sh["global_index"], sh["seq_ids"]):
        out = ring_attention(qs, ks, vs)
    (out * sh["g"].transpose(1, 2)).sum().backward()
    res = {}
    for name, mine, theirs in [
        ("attn_out", out, ref),
        ("attn_dq", qs.grad, qr.grad),
        ("attn_dk", ks.grad, kr.grad),
        ("attn_dv", vs.grad, vr.grad),
    ]:
        full = gather_unshard(mine.detach().transpose(1, 2), t, cp).transpose(1, 2)
        res[name] = (full - theirs.detach()).abs().max().item()
    return res


def token_logprobs(model, input_ids, position_ids, targets):
    hidden = model.model(input_ids=input_ids, position_ids=position_ids).last_hidden_state
    logp = model.lm_head(hidden).float().log_softmax(-1)
    return logp.gather(-1, targets.clamp(min=0)[..., None])[..., 0] * (targets >= 0)


def model_check(rank: int, cp: int) -> dict:
    register_cp_attention()
    cu = [0, 11, 12, 30, 37]  # 4 packed docs, one of length 1
    t = cu[-1]
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 97, (1, t), generator=g)
    seq = seq_ids_from_cu_seqlens(cu)[None]
    pos = position_ids_from_seq_ids(seq)
    tgt = next_token_targets(ids, seq)
    mask = (torch.rand(1, t, generator=g) > 0.3) & (tgt >= 0)
    n_tokens = mask.sum()

    # reference: each document alone through the stock sdpa model (no packing at all)
    ref_model = tiny_llama(**MODEL)
    ref_lp = torch.zeros(1, t)
    for a, z in zip(cu[:-1], cu[1:], strict=True):
        ref_lp[:, a:z] = token_logprobs(ref_model, ids[:, a:z], pos[:, a:z], tgt[:, a:z])
    ref_loss = -(ref_lp * mask).sum() / n_tokens
    ref_loss.backward()

    model = tiny_llama(**MODEL)
    model.set_attn_implementation("ring_cp")
    sh = shard_packed_batch(
        {"input_ids": ids, "seq_ids": seq, "position_ids": pos, "targets": tgt, "mask": mask},
        rank,
        cp,
    )
    with cp_attention_context(dist.group.WORLD, sh["global_index"], sh["seq_ids"]):
        lp = token_logprobs(model, sh["input_ids"], sh["position_ids"], sh["targets"])
    total = n_tokens.clone().float()  # the global loss-token count: all-reduced in real use
    local_n = sh["mask"].sum().float()
    dist.all_reduce(local_n)
    loss = -(lp * sh["mask"]).sum() / local_n
    loss.backward()
    loss_all = loss.detach().clone()
    dist.all_reduce(loss_all)
    for p in model.parameters():
        dist.all_reduce(p.grad)
    grad_diff = max(
        (p.grad - r.grad).abs().max().item()
        for p, r in zip(model.parameters(), ref_model.parameters(), strict=True)
    )
    full_lp = gather_unshard(lp.detach(), t, cp)
    return {
        "logprob": (full_lp - ref_lp.detach()).abs().max().item(),
        "loss": abs(loss_all.item() - ref_loss.item()),
        "count": abs(local_n.item() - total.item()),
        "grad": grad_diff,
        "ref_loss": ref_loss.item(),
    }


def main() -> None:
    dist.init_process_group("gloo")
    rank, cp = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    res = {**attention_check(rank, cp), **model_check(rank, cp)}
    if rank == 0:
        with open(sys.argv[1], "w") as f:
            json.dump(res, f)
    teardown_distributed()


if __name__ == "__main__":
    main()
