"""A tiny learner loop on the distributed hooks; the same file runs with python or torchrun.

    python fsdp_worker.py OUT.pt [--cp C] [--steps S] [--save-at K --ckpt DIR] [--resume DIR]

Writes (rank 0) the per-step loss and grad norm and the final full parameters to OUT.pt.
Driven by test_fsdp.py.
"""

from __future__ import annotations

import argparse

import torch

from algos.distributed.context_parallel import (
    cp_attention_context,
    next_token_targets,
    register_cp_attention,
    seq_ids_from_cu_seqlens,
    shard_packed_batch,
)
from algos.distributed.fsdp import (
    all_reduce_sum,
    all_reduce_token_count,
    call_model,
    clip_grad_norm_,
    full_state_dict,
    load_checkpoint,
    save_checkpoint,
    setup_distributed,
    shard_model,
    teardown_distributed,
)
from tests.algos.tiny_models import tiny_llama

VOCAB = 97


def sequences(step: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Six (input_ids, loss_mask) pairs of different lengths; deterministic per step."""
    g = torch.Generator().manual_seed(100 + step)
    out = []
    for n in (9, 14, 5, 11, 7, 16):
        ids = torch.randint(0, VOCAB, (n,), generator=g)
        mask = torch.rand(n, generator=g) > 0.4
        out.append((ids, mask))
    return out


def pack(seqs):
    lens = [len(s[0]) for s in seqs]
    cu = torch.tensor([0, *lens]).cumsum(0)
    ids = torch.cat([s[0] for s in seqs])[None]
    seq = seq_ids_from_cu_seqlens(cu)[None]
    tgt = next_token_targets(ids, seq)
    mask = torch.cat([s[1] for s in seqs])[None] & (tgt >= 0)
    return {"input_ids": ids, "seq_ids": seq, "targets": tgt, "mask": mask}


def token_logprobs(model, input_ids, position_ids, targets):
    """Base model, then the head weight applied directly (as algos.learner.logprobs does)."""
    hidden = model.model(input_ids=input_ids, position_ids=position_ids).last_hidden_state
    logits = torch.nn.functional.linear(hidden, model.lm_head.weight)
    return logits.float().log_softmax(-1).gather(-1, targets.clamp(min=0)[..., None])[..., 0]


def train_step(model, optim, ctx, step: int) -> dict[str, float]:
    batch = pack(ctx.split_for_dp(sequences(step)))
    sh = shard_packed_batch(batch, ctx.cp_rank, ctx.cp)
    n_tok = all_reduce_token_count(sh["mask"].sum(), ctx)
    with cp_attention_context(ctx.cp_group, sh["global_index"], sh["seq_ids"]):
        lp = call_model(model, token_logprobs, sh["input_ids"], sh["position_ids"], sh["targets"])
    loss = -(lp * sh["mask"]).sum() / n_tok
    loss.backward()
    norm = clip_grad_norm_(model.parameters(), 1.0)
    optim.step()
    optim.zero_grad()
    return {"loss": all_reduce_sum({"l": loss.item()}, ctx)["l"], "norm": norm, "tokens": n_tok}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--cp", type=int, default=1)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--save-at", type=int, default=0)
    ap.add_argument("--ckpt", default=None)
    ap.add_argument("--resume", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    register_cp_attention()
    ctx = setup_distributed(cp=args.cp, device="cpu")
    model = shard_model(tiny_llama(seed=1, attn="ring_cp", vocab=VOCAB, max_positions=128), ctx)
    # SGD with momentum, not AdamW: its update is linear in the gradient, so reduction-order
    # noise stays ~lr * 1e-7 in the weights (AdamW's g / (|g| + eps) blows it up near eps, issue
    # 16); the momentum buffers still make the resumes test optimizer state through DCP.
    optim = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9, weight_decay=0.1)
    start, log, at_save = 0, [], None
    if args.resume:
        start = load_checkpoint(args.resume, model, optim, ctx)["step"]
    for step in range(start, args.steps):
        log.append(train_step(model, optim, ctx, step))
        if args.ckpt and step + 1 == args.save_at:
            save_checkpoint(args.ckpt, model, optim, ctx, extra={"step": step + 1})
            at_save = full_state_dict(model)
    params = full_state_dict(model)
    if ctx.is_main:
        torch.save(
            {
                "log": log,
                "params": params,
                "params_at_save": at_save,
                "world": ctx.world,
                "dp": ctx.dp,
                "cp": ctx.cp,
            },
            args.out,
        )
    teardown_distributed()


if __name__ == "__main__":
    main()
