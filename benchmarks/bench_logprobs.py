"""Naive ``[T, vocab]`` token log-probs vs the chunked autograd Function, forward + backward.

SmolLM2-135M head shape (hidden 576, vocab 49,152), float32, CPU. Each (method, T) runs in a
fresh subprocess so memory figures do not leak between cases. Memory is the PEAK RESIDENT SET
SIZE increase of that process (``getrusage(RUSAGE_SELF).ru_maxrss`` after the run minus before
it, inputs already allocated): it counts what torch's CPU allocator really took from the OS
(tracemalloc does not see torch's allocations). Time is the best of ``--reps`` runs, as wall
time and as process CPU time (all threads; steadier than wall time on a shared machine).

    python benchmarks/bench_logprobs.py            # T in 1024 4096 16384 (about 3-5 min, 2 cores)
    python benchmarks/bench_logprobs.py --T 1024 4096 --reps 2

Writes benchmarks/results/bench_logprobs.json. Targets (issue): chunked peak <= 15% of naive at
T = 16384, time <= 1.1x naive, memory flat in T.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def child(method: str, t: int, hidden: int, vocab: int, reps: int, chunk: int | None) -> dict:
    import torch

    from algos.learner.logprobs import default_chunk_size, naive_token_logprobs, token_logprobs

    torch.manual_seed(0)
    h = torch.randn(t, hidden, requires_grad=True)
    w = (torch.randn(vocab, hidden) * 0.02).requires_grad_(True)
    y = torch.randint(0, vocab, (t,))
    g = torch.randn(t)
    before = _maxrss_mib()
    times, cpu = [], []
    for _ in range(reps):
        h.grad = w.grad = None
        c0 = time.process_time()
        t0 = time.perf_counter()
        if method == "naive":
            lp = naive_token_logprobs(h, w, y)
        else:
            lp = token_logprobs(h, w, y, chunk_size=chunk)
        (lp * g).sum().backward()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        del lp
    return {
        "method": method,
        "T": t,
        "hidden": hidden,
        "vocab": vocab,
        "chunk_size": None if method == "naive" else (chunk or default_chunk_size(vocab)),
        "time_s": min(times),
        "cpu_s": min(cpu),
        "peak_rss_delta_mib": _maxrss_mib() - before,
        "threads": torch.get_num_threads(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--T", type=int, nargs="+", default=[1024, 4096, 16384])
    ap.add_argument("--hidden", type=int, default=576)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--chunk-size", type=int, default=None)
    ap.add_argument("--child", nargs=2, metavar=("METHOD", "T"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        out = child(
            args.child[0], int(args.child[1]), args.hidden, args.vocab, args.reps, args.chunk_size
        )
        print("RESULT " + json.dumps(out))
        return

    rows = []
    for t in args.T:
        for method in ("naive", "chunked"):
            cmd = [
                sys.executable,
                __file__,
                "--child",
                method,
                str(t),
                "--hidden",
                str(args.hidden),
                "--vocab",
                str(args.vocab),
                "--reps",
                str(args.reps),
            ]
            if args.chunk_size:
                cmd += ["--chunk-size", str(args.chunk_size)]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
            if proc.returncode != 0 or not line:
                rows.append({"method": method, "T": t, "error": proc.stderr[-500:]})
                print(f"{method} T={t}: failed ({proc.returncode})", file=sys.stderr)
                continue
            rows.append(json.loads(line[0][len("RESULT ") :]))
            print(
                f"  {method:8s} T={t:6d} {rows[-1]['time_s']:8.2f} s "
                f"{rows[-1]['peak_rss_delta_mib']:9.0f} MiB",
                file=sys.stderr,
                flush=True,
            )

    by = {(r["method"], r["T"]): r for r in rows if "error" not in r}
    print(f"\nhidden {args.hidden}, vocab {args.vocab}, float32, forward+backward, CPU")
    print(
        f"{'T':>6} | {'naive s':>8} {'naive MiB':>10} | {'chunked s':>9} {'chunked MiB':>11} |"
        f" {'time x':>6} {'cpu x':>6} {'mem %':>6}"
    )
    summary = []
    for t in args.T:
        n, c = by.get(("naive", t)), by.get(("chunked", t))
        if not (n and c):
            print(f"{t:>6} | missing (see errors)")
            continue
        ratio_t = c["time_s"] / n["time_s"]
        ratio_cpu = c["cpu_s"] / n["cpu_s"]
        ratio_m = c["peak_rss_delta_mib"] / max(n["peak_rss_delta_mib"], 1e-9)
        summary.append(
            {"T": t, "time_ratio": ratio_t, "cpu_time_ratio": ratio_cpu, "memory_ratio": ratio_m}
        )
        print(
            f"{t:>6} | {n['time_s']:8.2f} {n['peak_rss_delta_mib']:10.0f} | {c['time_s']:9.2f}"
            f" {c['peak_rss_delta_mib']:11.0f} | {ratio_t:6.2f} {ratio_cpu:6.2f} {100 * ratio_m:5.1f}%"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "bench_logprobs.json"
    out.write_text(
        json.dumps(
            {
                "memory_measure": "peak RSS delta (getrusage ru_maxrss), fresh subprocess per case",
                "cases": rows,
                "summary": summary,
            },
            indent=2,
        )
    )
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
