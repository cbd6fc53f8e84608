"""Learner throughput: packed rows vs padded batches, trajectories whose lengths spread 10x.

A small random Llama (built from a config), one ``Learner.train_step`` (forward, backward,
AdamW) per measurement, the same samples and the same token budget per micro-batch for every
layout. Packed: sequences concatenated into rows of at most ``--budget`` tokens, attention run
per sequence (``packed_sdpa``, algos.learner.attention: sum of n_i^2 scores). Packed-mask: the same rows
with one SDPA call over the row and a 4D block-diagonal bool mask (L^2 scores, most masked).
Padded: one sequence per row, rows in input order while ``rows * longest <= budget``.
Padded-sorted: the same after sorting the samples by length (length bucketing: the best padded
layout, and the fair baseline; packing is compared to it).
Throughput counts real (non-padding) tokens. The layouts alternate step by step so machine
load hits them alike; the median is reported.

    python benchmarks/bench_packing.py              # about 1-2 min on 2 cores

Writes benchmarks/results/bench_packing.json.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from algos.learner.learner import Learner
from algos.learner.learner_config import LearnerConfig
from algos.learner.samples import Sample, pack_samples, pad_samples

RESULTS = Path(__file__).resolve().parent / "results"


def make_samples(n: int, lo: int, hi: int, vocab: int, seed: int) -> list[Sample]:
    """Log-uniform lengths in [lo, hi]; the first quarter is prompt, the rest policy tokens."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        u = float(torch.rand(1, generator=g))
        length = int(round(lo * (hi / lo) ** u))
        ids = torch.randint(0, vocab, (length,), generator=g).tolist()
        mask = [0] * (length // 4) + [1] * (length - length // 4)
        old = [-7.6 * m for m in mask]
        out.append(
            Sample(
                ids,
                mask,
                behaviour_logprobs=old,
                advantage=float(torch.randn(1, generator=g)),
                sample_id=i,
            )
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--min-len", type=int, default=64)
    ap.add_argument("--max-len", type=int, default=640)
    ap.add_argument("--budget", type=int, default=2048, help="micro_batch_tokens")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=2048)
    args = ap.parse_args()

    cfg = LlamaConfig(
        hidden_size=args.hidden,
        intermediate_size=4 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        vocab_size=args.vocab,
        max_position_embeddings=4096,
    )
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    base = LlamaForCausalLM(cfg)
    samples = make_samples(args.samples, args.min_len, args.max_len, args.vocab, seed=1)
    real = sum(len(s) for s in samples)
    packed = pack_samples(samples, args.budget)
    # packed: per-sequence SDPA (the default); packed-mask: one SDPA over the row with a 4D
    # block-diagonal mask (packed_attention=False); padded: one sequence per row.
    # padded-sorted: the learner pads in the order it is given, so it gets the sorted list
    by_len = sorted(samples, key=len)
    inputs = {"packed": samples, "packed-mask": samples, "padded": samples, "padded-sorted": by_len}
    layouts = {
        "packed": packed,
        "packed-mask": packed,
        "padded": pad_samples(samples, args.budget),
        "padded-sorted": pad_samples(by_len, args.budget),
    }
    learners = {
        name: Learner(
            copy.deepcopy(base),
            LearnerConfig(
                lr=1e-5,
                micro_batch_tokens=args.budget,
                packing=name.startswith("packed"),
                packed_attention=(name == "packed"),
            ),
        )
        for name in layouts
    }
    for name, learner in learners.items():  # warm-up step each
        learner.train_step(inputs[name])
    tps: dict[str, list[float]] = {name: [] for name in layouts}
    for _ in range(args.steps):
        for name, learner in learners.items():
            tps[name].append(learner.train_step(inputs[name])["tokens_per_s"])

    rows = []
    for name, mbs in layouts.items():
        processed = sum(mb.num_tokens for mb in mbs)
        rows.append(
            {
                "layout": name,
                "micro_batches": len(mbs),
                "real_tokens": real,
                "processed_tokens": processed,
                "padding_frac": 1 - real / processed,
                "tokens_per_s_median": statistics.median(tps[name]),
                "tokens_per_s": tps[name],
            }
        )
    lens = sorted(len(s) for s in samples)
    print(
        f"{args.samples} trajectories, lengths {lens[0]}..{lens[-1]} (log-uniform), "
        f"{real} tokens; budget {args.budget} tokens/micro-batch; Llama hidden {args.hidden} x "
        f"{args.layers} layers, vocab {args.vocab}; {torch.get_num_threads()} threads"
    )
    print(
        f"{'layout':>13} | {'micro-batches':>13} {'processed':>10} {'padding':>8} | {'tokens/s':>9}"
    )
    for r in rows:
        print(
            f"{r['layout']:>13} | {r['micro_batches']:>13} {r['processed_tokens']:>10} "
            f"{100 * r['padding_frac']:7.1f}% | {r['tokens_per_s_median']:9.0f}"
        )
    tps_of = {r["layout"]: r["tokens_per_s_median"] for r in rows}
    speedup = tps_of["packed"] / tps_of["padded-sorted"]
    vs_input_order = tps_of["packed"] / tps_of["padded"]
    mask_speedup = tps_of["packed-mask"] / tps_of["padded-sorted"]
    print(
        f"packed / padded-sorted throughput: {speedup:.2f}x; packed / padded (input order): "
        f"{vs_input_order:.2f}x; packed-mask / padded-sorted: {mask_speedup:.2f}x"
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "bench_packing.json"
    out.write_text(
        json.dumps(
            {
                "args": vars(args),
                "layouts": rows,
                "speedup": speedup,
                "speedup_vs_input_order": vs_input_order,
                "mask_speedup": mask_speedup,
            },
            indent=2,
        )
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
