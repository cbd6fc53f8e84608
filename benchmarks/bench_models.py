"""Generation throughput: TransformersModel (bf16, fp32) vs VLLMModel on SmolLM2-135M-Instruct.

8 agent threads call ``generate`` at once, 64 new tokens each (end-of-turn ignored so every
backend does the same work), sampling at temperature 1 with per-request seeds. Each backend runs
in its own subprocess (vLLM changes the process's thread settings). Start-up (load / engine
start) is reported separately from generation. Prints a table, writes
``benchmarks/results/bench_models.json``.

    python benchmarks/bench_models.py [--concurrency 8] [--new-tokens 64] [--repeats 3] [--threads 1,2]

Threads: ``--threads`` (default ``1,2``) lists the ``OMP_NUM_THREADS`` values the transformers
backends run with (one row each): on a quiet 2-core machine 2 threads are fastest, on a shared,
oversubscribed one 2 OpenMP threads were up to 15x slower than 1 (spinning barriers). vLLM's CPU
worker pins its own OpenMP threads; ``--vllm-threads`` (default 0: leave it to vLLM) overrides.
Ratios are against the fastest transformers-bf16 row.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

QUESTIONS = [
    "What is the capital of France?",
    "Write a Python function that reverses a string.",
    "Explain what a git rebase does.",
    "List three prime numbers.",
    "How do I read a file line by line in Python?",
    "What does HTTP status 404 mean?",
    "Summarise the plot of Hamlet in two sentences.",
    "Why is the sky blue?",
]
BACKENDS = ("transformers-bf16", "transformers-fp32", "vllm", "vllm-compiled")


def run_backend(backend: str, concurrency: int, new_tokens: int, repeats: int) -> dict:
    """Child process: load one backend, time ``repeats`` rounds of concurrent generate calls."""
    from agents.models.smollm2 import smollm2_path
    from agents.protocols import Conversation, SamplingParams

    path = smollm2_path()
    started = time.perf_counter()
    if backend.startswith("transformers"):
        from agents.models.transformers import TransformersModel

        dtype = "bfloat16" if backend.endswith("bf16") else "float32"
        model = TransformersModel(path, dtype=dtype)
        model.eos_token_ids = {-1}  # benchmark only: always generate new_tokens tokens
    else:
        from agents.models.vllm import VLLMModel

        class FixedLengthVLLM(VLLMModel):
            def _vllm_params(self, params):  # benchmark only: ignore end-of-turn
                vparams = super()._vllm_params(params)
                vparams.ignore_eos = True
                return vparams

        # vllm: enforce_eager (the CPU default here); vllm-compiled: torch.compile (slow start).
        eager = backend == "vllm"
        model = FixedLengthVLLM(path, dtype="bfloat16", max_model_len=1024, enforce_eager=eager)
    startup_s = time.perf_counter() - started

    tokenizer = model.tokenizer
    convs = []
    for i in range(concurrency):
        messages = [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        convs.append(Conversation(messages=messages, token_ids=ids))

    def round_(seed: int) -> tuple[float, int]:
        results = [None] * concurrency
        barrier = threading.Barrier(concurrency + 1)

        def work(i: int) -> None:
            barrier.wait()
            params = SamplingParams(max_new_tokens=new_tokens, seed=seed * 1000 + i)
            results[i] = model.generate(convs[i], params)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(concurrency)]
        for t in threads:
            t.start()
        barrier.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        return time.perf_counter() - t0, sum(len(r.token_ids) for r in results)

    round_(0)  # warm-up (first-call allocations, vLLM's first scheduling)
    rounds = [round_(seed) for seed in range(1, repeats + 1)]
    model.close()
    times = [t for t, _ in rounds]
    tokens = rounds[0][1]
    return {
        "backend": backend,
        "startup_s": round(startup_s, 2),
        "tokens_per_round": tokens,
        "round_s": [round(t, 3) for t in times],
        "median_s": round(statistics.median(times), 3),
        "tokens_per_s": round(tokens / statistics.median(times), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--threads", default="1,2", help="transformers OMP_NUM_THREADS values")
    parser.add_argument("--vllm-threads", type=int, default=0, help="vLLM OMP_NUM_THREADS")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        result = run_backend(args.child, args.concurrency, args.new_tokens, args.repeats)
        print("RESULT " + json.dumps(result), flush=True)
        return

    results = []
    runs = []
    for backend in args.backends.split(","):
        if backend not in BACKENDS:
            raise SystemExit(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
        if backend.startswith("transformers"):
            runs += [(backend, int(t)) for t in args.threads.split(",")]
        else:
            runs.append((backend, args.vllm_threads))
    for backend, threads in runs:
        cmd = [sys.executable, __file__, "--child", backend, "--concurrency",
               str(args.concurrency), "--new-tokens", str(args.new_tokens),
               "--repeats", str(args.repeats)]  # fmt: skip
        env = dict(os.environ)
        env.pop("OMP_NUM_THREADS", None)
        if threads > 0:
            env["OMP_NUM_THREADS"] = str(threads)
        label = f"{backend} omp={threads or 'vllm'}"
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
        except subprocess.TimeoutExpired:
            print(f"{label}: timed out", file=sys.stderr)
            continue
        lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
        if out.returncode != 0 or not lines:
            print(out.stdout[-2000:], out.stderr[-4000:], file=sys.stderr)
            raise SystemExit(f"{label} failed (exit {out.returncode})")
        result = json.loads(lines[-1][len("RESULT ") :])
        result.update(backend=label, omp_num_threads=threads or None)
        results.append(result)
        print(f"{label}: {result['tokens_per_s']} tok/s", file=sys.stderr)

    hf_bf16 = [r for r in results if r["backend"].startswith("transformers-bf16")]
    base = max(hf_bf16, key=lambda r: r["tokens_per_s"]) if hf_bf16 else None
    print(f"\nSmolLM2-135M-Instruct, {args.concurrency} concurrent x {args.new_tokens} new tokens, "
          f"median of {args.repeats} (load avg {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs)")  # fmt: skip
    print(f"{'backend':<32}{'startup s':>10}{'round s':>10}{'tok/s':>10}{'vs best hf-bf16':>17}")
    for r in results:
        ratio = r["tokens_per_s"] / base["tokens_per_s"] if base else float("nan")
        r["ratio_vs_transformers_bf16"] = round(ratio, 2)
        print(f"{r['backend']:<32}{r['startup_s']:>10.1f}{r['median_s']:>10.2f}"
              f"{r['tokens_per_s']:>10.1f}{ratio:>16.2f}x")  # fmt: skip
    report = {
        "model": "SmolLM2-135M-Instruct",
        "concurrency": args.concurrency,
        "new_tokens": args.new_tokens,
        "repeats": args.repeats,
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        "results": results,
    }
    out_dir = Path(__file__).resolve().parent / "results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "bench_models.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
