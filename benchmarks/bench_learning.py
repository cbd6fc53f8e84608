"""Learning curves of DAPO and GRPO side by side on ToyKeyword-v0 (a tiny random policy learns
to say the letter "w"), through the real entry points. Prints a table, writes
benchmarks/results/bench_learning.json and bench_learning.png.

    python benchmarks/bench_learning.py [--iterations 20] [--seeds 0]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from algos import dapo, grpo
from algos.loop.metrics import read_metrics
from algos.plot import plot_runs

RESULTS = Path(__file__).parent / "results"
COMMON = ["--config", str(Path(__file__).resolve().parents[1] / "algos/presets/toy_keyword.yaml")]
ALGOS = {"dapo": (dapo.main, []), "grpo": (grpo.main, ["--kl-coef", "0.04"])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--seeds", default="0", help="comma-separated seeds")
    args = p.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    out: dict = {"iterations": args.iterations, "seeds": seeds, "runs": {}}
    root = Path(tempfile.mkdtemp(prefix="bench_learning-"))
    run_dirs = []
    for name, (main_fn, extra) in ALGOS.items():
        for seed in seeds:
            run = root / f"{name}-seed{seed}"
            t0 = time.perf_counter()
            main_fn(
                [
                    *COMMON,
                    *extra,
                    "--iterations",
                    str(args.iterations),
                    "--seed",
                    str(seed),
                    "--run-dir",
                    str(run),
                ]
            )
            rows = read_metrics(run)
            out["runs"][f"{name}-seed{seed}"] = {
                "wall_s": time.perf_counter() - t0,
                "reward": [r["reward_mean"] for r in rows],
                "filtered_frac": [r["filtered_frac"] for r in rows],
                "entropy": [r.get("entropy") for r in rows],
            }
            run_dirs.append(run)
    names = list(out["runs"])
    print("iter  " + "  ".join(f"{n:>12}" for n in names))
    for i in range(args.iterations):
        print(f"{i + 1:4d}  " + "  ".join(f"{out['runs'][n]['reward'][i]:12.3f}" for n in names))
    for n in names:
        r = out["runs"][n]["reward"]
        # start: iteration 1, the only one sampled from the untrained policy (as the learning test)
        print(
            f"{n}: start {r[0]:.3f} -> end {statistics.fmean(r[-3:]):.3f} "
            f"({out['runs'][n]['wall_s']:.0f} s)"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "bench_learning.json").write_text(json.dumps(out, indent=1))
    png = plot_runs(run_dirs, RESULTS / "bench_learning.png", labels=names)
    print(f"wrote {RESULTS / 'bench_learning.json'} and {png}")


if __name__ == "__main__":
    main()
