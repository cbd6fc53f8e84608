"""Our Learner against the loop a user writes by hand, side by side, on Qwen2.5 shapes.

Both train the same randomly initialised model (built from the shape's numbers: nothing is
downloaded) on one sequence of T random tokens per optimiser step:

- ours: ``algos.learner.learner.Learner`` (bf16, activation checkpointing, loss dapo, packed rows);
- plain: ``model(input_ids, labels=input_ids).loss`` under bf16 autocast, activation
  checkpointing, ``torch.optim.AdamW`` with its defaults.

Each (shape, T, method) runs in a fresh subprocess under its own timeout, so memory figures do
not leak between rows and an out-of-memory error ends only its row. Reported per row: seconds per
step (median of ``--steps`` after one warm-up step), tokens/s, peak memory (CUDA: the allocator's
peak; CPU: the peak resident set increase), MFU and, for the first length, a short
``torch.profiler`` summary (top operators by self time).

MFU = model FLOPs / time / peak, model FLOPs per token = 6 x matmul parameters (LM head
included, tied or not) + 6 x layers x T x hidden (causal attention); peak: ``--peak-tflops``
(default 989, the H100/H200 datasheet dense bf16 figure; none on CPU).

    python benchmarks/bench_gpu_learner.py                       # one GPU, about 10-20 min
    python benchmarks/bench_gpu_learner.py --largest-at 32768    # + largest shape that trains
    python benchmarks/bench_gpu_learner.py --tiny                # CPU check: tiny shapes, ~1 min

Writes benchmarks/results/bench_gpu_learner.json (``--out`` to change). Targets (issue 15, one
H200): ours >= 1.2x the plain loop's tokens/s wherever the plain loop fits; MFU >= 40% at 64k
and >= 45% at 131k on the 1.5B shapes; 131k in <= 60 GiB.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parents[1]

# Qwen2.5 configs (hidden, intermediate, layers, heads, kv heads, vocab, tied embeddings).
SHAPES = {
    "tiny": (64, 128, 2, 4, 2, 512, True),
    "0.5b": (896, 4864, 24, 14, 2, 151936, True),
    "1.5b": (1536, 8960, 28, 12, 2, 151936, True),
    "3b": (2048, 11008, 36, 16, 2, 151936, True),
    "7b": (3584, 18944, 28, 28, 4, 152064, False),
    "14b": (5120, 13824, 48, 40, 8, 152064, False),
}
LARGEST_SWEEP = ("3b", "7b", "14b")


def build_model(shape: str, length: int, device: str):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    hidden, inter, layers, heads, kv, vocab, tied = SHAPES[shape]
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        tie_word_embeddings=tied,
        max_position_embeddings=max(length, 32768),
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
        attn_implementation="sdpa",
        use_cache=False,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(config)  # float32 master weights, as the trainer loads them
    return model


def model_flops_per_token(shape: str, length: int) -> float:
    hidden, inter, layers, heads, kv, vocab, _ = SHAPES[shape]
    kv_dim = hidden // heads * kv
    per_layer = 2 * hidden * hidden + 2 * hidden * kv_dim + 3 * hidden * inter
    matmul_params = layers * per_layer + vocab * hidden
    return 6.0 * matmul_params + 6.0 * layers * length * hidden


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def run_row(method: str, shape: str, length: int, device: str, steps: int, profile: bool) -> dict:
    """One row, in this (fresh) process."""
    import torch

    cuda = device.startswith("cuda")
    model = build_model(shape, length, device)
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (length,), generator=gen)
    if method == "ours":
        from algos.learner.learner import Learner
        from algos.learner.learner_config import LearnerConfig
        from algos.learner.samples import Sample

        learner = Learner(
            model,
            LearnerConfig(
                bf16=True, grad_checkpointing=True, loss="dapo", micro_batch_tokens=length, lr=1e-6
            ),
        )
        uniform = -float(torch.log(torch.tensor(float(vocab))))  # ratio ~ 1 at random init
        sample = Sample(
            input_ids=ids.tolist(),
            loss_mask=[0] + [1] * (length - 1),
            behaviour_logprobs=[0.0] + [uniform] * (length - 1),
            advantage=1.0,
        )

        def step() -> None:
            learner.train_step([sample])
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
        batch = ids[None].to(device)

        def step() -> None:
            with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
                loss = model(input_ids=batch, labels=batch).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    rss0 = _rss_mib()
    step()  # warm-up (allocator, kernels, autotuning)
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    s = statistics.median(times)
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else (_rss_mib() - rss0) / 1024
    row = {
        "method": method,
        "shape": shape,
        "tokens": length,
        "device": device,
        "s_per_step": s,
        "step_times_s": times,
        "tokens_per_s": length / s,
        "peak_gib": peak,
        "peak_measure": "cuda max_memory_allocated"
        if cuda
        else "peak RSS increase after build (CPU)",
        "model_tflop_per_step": model_flops_per_token(shape, length) * length / 1e12,
    }
    if profile:
        row["profile"] = profile_step(step, cuda)
    return row


def profile_step(step, cuda: bool, top: int = 10) -> list[dict]:
    """Top operators of one step by self time (device time on CUDA, CPU time otherwise)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        step()
        if cuda:
            torch.cuda.synchronize()
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    events = sorted(prof.key_averages(), key=lambda e: getattr(e, key, 0), reverse=True)
    total = sum(getattr(e, key, 0) for e in events) or 1
    return [
        {
            "op": e.key,
            "self_ms": getattr(e, key, 0) / 1e3,
            "share": getattr(e, key, 0) / total,
            "calls": e.count,
        }
        for e in events[:top]
    ]


def spawn(args, method: str, shape: str, length: int, profile: bool) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        method,
        shape,
        str(length),
        "--device",
        args.device,
        "--steps",
        str(args.steps),
    ] + (["--profile"] if profile else [])
    base = {"method": method, "shape": shape, "tokens": length}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {**base, "error": f"timeout after {args.timeout} s"}
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if line:
        return json.loads(line[-1][len("RESULT ") :])
    tail = proc.stderr[-800:]
    return {**base, "oom": "out of memory" in tail.lower(), "error": tail}


def child_main(args) -> None:
    method, shape, length = args.child[0], args.child[1], int(args.child[2])
    try:
        row = run_row(method, shape, length, args.device, args.steps, args.profile)
    except Exception as e:  # noqa: BLE001 - OOM and friends become this row's result
        oom = "out of memory" in str(e).lower() or type(e).__name__ == "OutOfMemoryError"
        row = {
            "method": method,
            "shape": shape,
            "tokens": length,
            "oom": oom,
            "error": f"{type(e).__name__}: {str(e)[:300]}",
        }
    print("RESULT " + json.dumps(row), flush=True)


def mfu(row: dict, peak_tflops: float | None) -> float | None:
    if "error" in row or not peak_tflops:
        return None
    return row["model_tflop_per_step"] / row["s_per_step"] / peak_tflops


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", default=["1.5b", "3b"], choices=sorted(SHAPES))
    ap.add_argument("--lengths", type=int, nargs="+", default=[8192, 32768, 65536, 131072])
    ap.add_argument(
        "--lengths-3b",
        type=int,
        nargs="+",
        default=[65536],
        help="lengths for the 3b shape (the issue's table has 65,536 only)",
    )
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    ap.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="peak dense bf16 TFLOP/s for MFU (default 989 on CUDA, none on CPU)",
    )
    ap.add_argument(
        "--largest-at",
        type=int,
        default=None,
        metavar="T",
        help="also try ours on 3b, 7b, 14b at T tokens; report the largest that trains",
    )
    ap.add_argument("--timeout", type=int, default=900, help="seconds per row")
    ap.add_argument("--tiny", action="store_true", help="CPU check: tiny shape, T 256 and 512")
    ap.add_argument("--out", type=Path, default=RESULTS / "bench_gpu_learner.json")
    ap.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.child:
        child_main(args)
        return
    if args.tiny:
        args.shapes, args.lengths, args.lengths_3b, args.steps = ["tiny"], [256, 512], [], 2
    peak = args.peak_tflops or (989.0 if args.device.startswith("cuda") else None)

    plan = [
        (shape, t)
        for shape in args.shapes
        for t in (args.lengths_3b if shape == "3b" else args.lengths)
    ]
    rows = []
    for i, (shape, t) in enumerate(plan):
        for method in ("ours", "plain"):
            row = spawn(args, method, shape, t, profile=i == 0)
            row["mfu"] = mfu(row, peak)
            rows.append(row)
            status = (
                ("OOM" if row.get("oom") else "error")
                if "error" in row
                else (f"{row['s_per_step']:.3f} s/step {row['peak_gib']:.1f} GiB")
            )
            print(f"  {shape:5s} T={t:7d} {method:5s} {status}", file=sys.stderr, flush=True)
    largest = None
    if args.largest_at:
        for shape in LARGEST_SWEEP:
            row = spawn(args, "ours", shape, args.largest_at, profile=False)
            row["mfu"] = mfu(row, peak)
            row["sweep"] = "largest"
            rows.append(row)
            if "error" in row:
                break
            largest = shape
    summary = summarise(rows, plan)
    print_table(summary, args.device, peak)
    if args.largest_at:
        print(f"largest Qwen2.5 shape that trains at {args.largest_at} tokens: {largest}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "device": args.device,
                "peak_tflops": peak,
                "steps": args.steps,
                "mfu_formula": "6*matmul_params (LM head included) + 6*layers*T*hidden per token",
                "rows": rows,
                "summary": summary,
                "largest_at": {"tokens": args.largest_at, "shape": largest}
                if args.largest_at
                else None,
            },
            indent=2,
        )
    )
    print(f"wrote {args.out}")


def summarise(rows: list[dict], plan: list[tuple[str, int]]) -> list[dict]:
    by = {(r["method"], r["shape"], r["tokens"]): r for r in rows if "sweep" not in r}
    out = []
    for shape, t in plan:
        ours, plain = by.get(("ours", shape, t), {}), by.get(("plain", shape, t), {})
        ok = "error" not in ours and "error" not in plain and ours and plain
        out.append(
            {
                "shape": shape,
                "tokens": t,
                "ours_s": ours.get("s_per_step"),
                "plain_s": plain.get("s_per_step"),
                "ours_peak_gib": ours.get("peak_gib"),
                "plain_peak_gib": plain.get("peak_gib"),
                "ours_mfu": ours.get("mfu"),
                "plain_mfu": plain.get("mfu"),
                "speedup": plain["s_per_step"] / ours["s_per_step"] if ok else None,
                "ours_status": _status(ours),
                "plain_status": _status(plain),
            }
        )
    return out


def _status(row: dict) -> str:
    if not row:
        return "missing"
    if "error" in row:
        return "oom" if row.get("oom") else "error"
    return "ok"


def print_table(summary: list[dict], device: str, peak: float | None) -> None:
    def f(v, fmt):
        return format(v, fmt) if isinstance(v, (int, float)) else "-"

    print(f"\n{device}; one sequence per step; MFU vs {peak or '-'} TFLOP/s")
    print(
        f"{'shape':>5} {'tokens':>7} | {'ours s':>7} {'plain s':>7} {'x':>5} | "
        f"{'ours GiB':>8} {'plain GiB':>9} | {'ours MFU':>8} {'plain MFU':>9}"
    )
    for r in summary:
        plain_s = f(r["plain_s"], ".3f") if r["plain_status"] == "ok" else r["plain_status"]
        ours_s = f(r["ours_s"], ".3f") if r["ours_status"] == "ok" else r["ours_status"]
        mfu_o = f(100 * r["ours_mfu"], ".1f") + "%" if r["ours_mfu"] else "-"
        mfu_p = f(100 * r["plain_mfu"], ".1f") + "%" if r["plain_mfu"] else "-"
        print(
            f"{r['shape']:>5} {r['tokens']:>7} | {ours_s:>7} {plain_s:>7} "
            f"{f(r['speedup'], '.2f'):>5} | {f(r['ours_peak_gib'], '.2f'):>8} "
            f"{f(r['plain_peak_gib'], '.2f'):>9} | {mfu_o:>8} {mfu_p:>9}"
        )


if __name__ == "__main__":
    main()
