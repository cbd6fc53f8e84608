"""Synthetic task throughput: mutants validated per minute and acceptance rate per operator.

    python benchmarks/bench_synth.py [--repos starter/textkit starter/confparse] [--candidates 24]
                                     [--workers 1 2]

Runs ``swe_gym.synth.synthesize`` on each repository from a fresh state (every candidate is
validated in the local sandbox), once per worker count, so the worker counts compare side by
side on the same candidates. Reports mutants validated per minute and tasks accepted per minute
(wall time including the clean runs and sandbox starts), and per operator the acceptance rate
and the drop reasons. Prints tables and writes benchmarks/results/bench_synth.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from swe_gym.starter import repo_path
from swe_gym.synth import SynthConfig, synthesize


def run_once(repo: str, candidates: int, workers: int, seed: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_synth_") as tmp:
        cfg = SynthConfig(
            source=repo_path(repo) if not Path(repo).exists() else Path(repo),
            out=Path(tmp) / "tasks.jsonl",
            repos_dir=Path(tmp) / "repos",
            max_candidates=candidates,
            workers=workers,
            seed=seed,
            progress=False,
        )
        t0 = time.monotonic()
        summary = synthesize(cfg, log=lambda _: None)
        wall = time.monotonic() - t0
    return {
        "repo": repo,
        "workers": workers,
        "validated": summary["validated_this_run"],
        "accepted": summary["accepted"],
        "wall_s": round(wall, 2),
        "validated_per_min": round(summary["validated_this_run"] / wall * 60, 1),
        "accepted_per_min": round(summary["accepted"] / wall * 60, 1),
        "baseline_s": summary.get("baseline_s"),
        "per_operator": summary["per_operator"],
        "dropped": summary["dropped"],
    }


def _table(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    return "\n".join(
        "  ".join(x.ljust(w) for x, w in zip(r, widths, strict=True)) for r in [head, *rows]
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repos", nargs="+", default=["starter/textkit", "starter/confparse"])
    p.add_argument("--candidates", type=int, default=24, help="mutants validated per repository")
    p.add_argument("--workers", type=int, nargs="+", default=[2], help="worker counts to compare")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/bench_synth.json"))
    args = p.parse_args()

    runs = [run_once(r, args.candidates, w, args.seed) for w in args.workers for r in args.repos]
    print(
        _table(
            ["repo", "workers", "validated", "accepted", "wall s", "validated/min", "accepted/min"],
            [
                [r["repo"], str(r["workers"]), str(r["validated"]), str(r["accepted"])]
                + [str(r["wall_s"]), str(r["validated_per_min"]), str(r["accepted_per_min"])]
                for r in runs
            ],
        )
    )
    # Acceptance per operator over every repository, from the first worker count's runs (the
    # verdicts do not depend on the worker count).
    per_op: dict[str, Counter] = defaultdict(Counter)
    for r in runs:
        if r["workers"] == args.workers[0]:
            for op, c in r["per_operator"].items():
                per_op[op].update({k: v for k, v in c.items() if k != "duplicate"})
    reasons = sorted({k for c in per_op.values() for k in c} - {"candidates", "accepted"})
    op_rows = []
    acceptance = {}
    for op, c in sorted(per_op.items()):
        n = c["candidates"]
        acceptance[op] = {"candidates": n, "accepted": c["accepted"], **{k: c[k] for k in reasons}}
        acceptance[op]["rate"] = round(c["accepted"] / n, 3) if n else None
        rate = f"{c['accepted'] / n:.0%}" if n else "-"
        op_rows.append([op, str(n), str(c["accepted"]), rate, *(str(c[k]) for k in reasons)])
    print()
    print(_table(["operator", "candidates", "accepted", "rate", *reasons], op_rows))
    if len(args.workers) > 1:
        base = {r["repo"]: r["validated_per_min"] for r in runs if r["workers"] == args.workers[0]}
        for r in runs:
            if r["workers"] != args.workers[0] and base.get(r["repo"]):
                ratio = r["validated_per_min"] / base[r["repo"]]
                print(f"{r['repo']}: {r['workers']} workers / {args.workers[0]}: {ratio:.2f}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {"args": vars(args) | {"out": str(args.out)}, "runs": runs, "acceptance": acceptance},
            indent=2,
        )
        + "\n"
    )
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
