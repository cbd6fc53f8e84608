"""Distributed learner and rollout figures, side by side in one run (CPU by default).

    python benchmarks/bench_distributed.py [--seq-lens 2048 4096 8192] [--skip-ray] [--device cuda]

1. Learner peak memory per rank (RSS high-water growth from before the first step, CPU;
   max_memory_allocated on CUDA)
   vs sequence length, without CP (1 process) and with CP=2 (torchrun, 2 processes); the
   activation part should fall ~1/CP.
2. Learner tokens/s with 1 and 2 data-parallel processes, both ways: weak scaling (each rank
   a row of seq_len tokens, so the global batch grows with the processes) and strong scaling
   (one global batch of seq_len tokens split over the ranks). Ideal: 2x weak, 2x strong; strong
   falls short sooner (smaller per-rank work, same gradient all-reduce).
3. Rollout throughput (episodes/s, SWEStarter + the oracle model) vs number of Ray workers.
4. On a GPU: tokens/s and MFU (6 * params * tokens/s / peak FLOP/s).

Prints a table and writes JSON to benchmarks/results/bench_distributed.json. No assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _model(layers: int, hidden: int, device: str):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from algos.distributed.context_parallel import register_cp_attention

    register_cp_attention()
    cfg = LlamaConfig(
        vocab_size=4096,
        hidden_size=hidden,
        intermediate_size=hidden * 3,
        num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 64),
        num_key_value_heads=max(1, hidden // 128),
        max_position_embeddings=65536,
        attn_implementation="ring_cp",
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).to(device)


def worker(args) -> None:
    """One rank: a few train steps on one packed row of seq_len tokens per DP rank."""
    import torch

    from algos.distributed.context_parallel import (
        cp_attention_context,
        next_token_targets,
        seq_ids_from_cu_seqlens,
        shard_packed_batch,
    )
    from algos.distributed.fsdp import (
        all_reduce_token_count,
        call_model,
        setup_distributed,
        shard_model,
        teardown_distributed,
    )
    from algos.learner.logprobs import token_logprobs

    torch.set_num_threads(
        max(1, (os.cpu_count() or 2) // max(1, int(os.environ.get("WORLD_SIZE", "1"))))
    )
    ctx = setup_distributed(cp=args.cp, device=args.device)
    model = shard_model(_model(args.layers, args.hidden, args.device), ctx)
    n_params = sum(p.numel() for p in model.parameters()) * (ctx.world if ctx.distributed else 1)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-4)
    t = args.seq_len
    g = torch.Generator().manual_seed(ctx.dp_rank)
    ids = torch.randint(0, 4096, (1, t), generator=g)
    seq = seq_ids_from_cu_seqlens([0, t // 2, t])[None]
    batch = {"input_ids": ids, "seq_ids": seq, "targets": next_token_targets(ids, seq)}
    sh = {k: v.to(ctx.device) for k, v in shard_packed_batch(batch, ctx.cp_rank, ctx.cp).items()}
    mask = (sh["targets"] >= 0).float()

    def fwd(m):
        with cp_attention_context(ctx.cp_group, sh["global_index"], sh["seq_ids"]):
            h = m.model(input_ids=sh["input_ids"], position_ids=sh["position_ids"])
        return token_logprobs(h.last_hidden_state, m.lm_head.weight, sh["targets"].clamp(min=0))

    def step():
        n = all_reduce_token_count(mask.sum(), ctx)
        lp = call_model(model, fwd)
        (-(lp * mask).sum() / n).backward()
        optim.step()
        optim.zero_grad()

    cuda = ctx.device.type == "cuda"
    # CPU: the RSS high-water mark cannot be reset, so the baseline is taken before the first
    # step (model, inputs, libraries); the peak over the steps then holds the activations, the
    # gradients and the (small) optimizer state of this rank.
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    step()  # warm-up (allocations of the optimizer state too)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    if cuda:
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    peak = (
        (torch.cuda.max_memory_allocated() - base)
        if cuda
        else (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss0)
    )
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    tokens = t * ctx.dp * args.steps  # global tokens processed
    row = {
        "rank": ctx.rank,
        "peak_step_bytes": peak,
        "max_rss_bytes": rss,
        "wall_s": wall,
        "tokens_per_s": tokens / wall,
        "params": n_params,
    }
    import torch.distributed as dist

    rows = [row]
    if ctx.distributed:
        rows = [None] * ctx.world
        dist.all_gather_object(rows, row)
    if ctx.is_main:
        Path(args.out).write_text(json.dumps(rows))
    teardown_distributed()


def launch(nproc: int, extra: list[str]) -> list[dict]:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "rows.json"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        base = [__file__, "--worker", "--out", str(out), *extra]
        cmd = (
            [sys.executable, *base]
            if nproc == 1
            else [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc-per-node={nproc}",
                *base,
            ]
        )
        subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, text=True)
        return json.loads(out.read_text())


def bench_ray(workers_list: list[int], episodes: int) -> list[dict]:
    import ray

    from agents.models.scripted import OracleModel
    from algos.distributed.ray_rollout import RayRolloutConfig, RayRolloutPool
    from swe_gym.tasks import load_tasks

    ids = [t.instance_id for t in load_tasks("starter")]
    jobs = [(ids[i % len(ids)], 0) for i in range(episodes)]
    ray.init(num_cpus=max(workers_list) + 1, include_dashboard=False, log_to_driver=False)
    out = []
    try:
        for n in workers_list:
            pool = RayRolloutPool(
                RayRolloutConfig(num_workers=n, worker_concurrency=1, worker_num_cpus=1),
                OracleModel,
            )
            pool.wait_ready()
            res = pool.run(jobs)
            pool.shutdown()
            out.append(
                {
                    "workers": n,
                    "episodes": episodes,
                    "wall_s": res.wall_s,
                    "episodes_per_s": episodes / res.wall_s,
                    "failed": res.failed,
                }
            )
    finally:
        ray.shutdown()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--cp", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--seq-len", type=int, default=1024, help=argparse.SUPPRESS)
    ap.add_argument("--seq-lens", type=int, nargs="+", default=[2048, 4096, 8192])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--device", default="cuda" if _has_cuda() else "cpu")
    ap.add_argument("--skip-ray", action="store_true")
    ap.add_argument("--ray-workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--ray-episodes", type=int, default=4)
    ap.add_argument(
        "--peak-tflops",
        type=float,
        default=989.0,
        help="GPU peak dense bf16 TFLOP/s for MFU (H100/H200 SXM: 989)",
    )
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    common = [
        "--layers",
        str(args.layers),
        "--hidden",
        str(args.hidden),
        "--steps",
        str(args.steps),
        "--device",
        args.device,
    ]
    results: dict = {"memory": [], "throughput": [], "rollout": [], "device": args.device}
    print(
        f"{'seq_len':>8} {'cp':>3} {'procs':>5} {'peak/rank MiB':>14} {'maxRSS MiB':>11} "
        f"{'tok/s':>9}"
    )
    for t in args.seq_lens:
        for cp in (1, 2):
            rows = launch(cp, [*common, "--seq-len", str(t), "--cp", str(cp)])
            peak = max(r["peak_step_bytes"] for r in rows)
            rss = max(r["max_rss_bytes"] for r in rows)
            results["memory"].append(
                {
                    "seq_len": t,
                    "cp": cp,
                    "peak_step_bytes_per_rank": peak,
                    "max_rss_bytes_per_rank": rss,
                    "tokens_per_s": rows[0]["tokens_per_s"],
                }
            )
            print(
                f"{t:>8} {cp:>3} {cp:>5} {peak / 2**20:>14.1f} {rss / 2**20:>11.1f} "
                f"{rows[0]['tokens_per_s']:>9.0f}"
            )
    t = args.seq_lens[0]
    one = None
    for scaling in ("weak", "strong"):
        for n in (1, 2):
            per_rank = t if scaling == "weak" else t // n
            if n == 1 and one is not None:  # the 1-process run is the same for both
                r = one
            else:
                r = launch(n, [*common, "--seq-len", str(per_rank), "--cp", "1"])[0]
            one = r if n == 1 else one
            entry = {
                "scaling": scaling,
                "procs": n,
                "seq_len_per_rank": per_rank,
                "global_tokens_per_step": per_rank * n,
                "tokens_per_s": r["tokens_per_s"],
            }
            if args.device == "cuda":
                entry["mfu"] = 6 * r["params"] * r["tokens_per_s"] / (args.peak_tflops * 1e12 * n)
            results["throughput"].append(entry)
    base = results["throughput"][0]["tokens_per_s"]
    print(
        f"\n{'scaling':>7} {'DP procs':>8} {'tokens/rank':>11} {'tok/s':>9} {'speed-up':>9}"
        + (f" {'MFU':>6}" if args.device == "cuda" else "")
    )
    for e in results["throughput"]:
        mfu = f" {e['mfu']:>6.1%}" if "mfu" in e else ""
        print(
            f"{e['scaling']:>7} {e['procs']:>8} {e['seq_len_per_rank']:>11} "
            f"{e['tokens_per_s']:>9.0f} {e['tokens_per_s'] / base:>8.2f}x{mfu}"
        )
    if not args.skip_ray:
        results["rollout"] = bench_ray(args.ray_workers, args.ray_episodes)
        print(f"\n{'Ray workers':>11} {'episodes':>8} {'wall s':>7} {'ep/s':>6}")
        for e in results["rollout"]:
            print(
                f"{e['workers']:>11} {e['episodes']:>8} {e['wall_s']:>7.1f} "
                f"{e['episodes_per_s']:>6.2f}"
            )
    out = ROOT / "benchmarks" / "results" / "bench_distributed.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"\nJSON: {out}")


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


if __name__ == "__main__":
    main()
