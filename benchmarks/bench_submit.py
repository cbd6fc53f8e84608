"""Submit and grade through ``env.step``: a fixed starter task, then the same with a big file.

    python benchmarks/bench_submit.py [--backends local docker] [--big-mb 200] [--timeout 900]

Each case runs ``--repeat`` times (the median is reported, every time listed), each in a child
process (its peak RSS is its own) under ``--timeout``: reset, the gold
patch applied in the agent's shell, optionally a ``--big-mb`` MB random file written into the
working copy, then ``submit``. Reported per case: the submit step's wall time, the reward, the
end reason, the child's peak RSS and its growth during submit. Side by side in one run: the
normal task and the big-file task on each backend. Prints a table and writes
``benchmarks/results/bench_submit.json`` (``--out`` to change it). Docker cases need a daemon
(``eval "$(bash .ci/docker-up.sh)"``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

TASK = "starter__tinystats-2"


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def run_case(backend: str, big_mb: int) -> dict:
    import gymnasium as gym

    import swe_gym  # noqa: F401

    env = gym.make("SWEStarter-v0", backend=backend, instance_ids=[TASK], max_turns=10)
    try:
        env.reset(seed=0)
        sb = env.unwrapped.sandbox
        task = env.unwrapped.task
        sb.write_file(".gold.diff", task.patch)
        res = sb.run("git apply .gold.diff && rm .gold.diff", timeout=60)
        assert res.exit_code == 0, res.output
        if big_mb:
            res = sb.run(f"head -c {big_mb}M /dev/urandom > big.bin && ls -la big.bin", timeout=300)
            assert res.exit_code == 0, res.output
        rss0 = _rss_mb()
        t0 = time.perf_counter()
        _, reward, _, _, info = env.step("```\nsubmit\n```")
        dt = time.perf_counter() - t0
        return {
            "backend": backend,
            "big_mb": big_mb,
            "submit_s": round(dt, 2),
            "reward": reward,
            "end_reason": info.get("end_reason"),
            "reason": (info.get("report") or {}).get("reason"),
            "rss_growth_mb": round(_rss_mb() - rss0, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }
    finally:
        env.close()


def _run(backend: str, big: int, timeout: float) -> dict:
    """One case in a child process (its own peak RSS), or the error it ended with."""
    t0 = time.perf_counter()
    try:
        p = subprocess.run(
            [sys.executable, __file__, "--case", backend, str(big)],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
        lines = p.stdout.strip().splitlines()
        row = json.loads(lines[-1]) if p.returncode == 0 and lines else None
        if row is None:
            row = {"backend": backend, "big_mb": big, "error": p.stderr[-500:]}
    except subprocess.TimeoutExpired:
        row = {"backend": backend, "big_mb": big, "error": f"timeout {timeout:g} s"}
    row["case_s"] = round(time.perf_counter() - t0, 1)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", nargs="+", default=["local", "docker"])
    ap.add_argument("--big-mb", type=int, default=200)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per case")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each case (median reported)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "bench_submit.json"))
    ap.add_argument("--case", nargs=2, metavar=("BACKEND", "BIG_MB"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case[0], int(args.case[1]))))
        return
    rows = []
    for backend in args.backends:
        for big in (0, args.big_mb):
            runs = [_run(backend, big, args.timeout) for _ in range(args.repeat)]
            ok = [r for r in runs if "error" not in r]
            row = dict(sorted(ok, key=lambda r: r["submit_s"])[len(ok) // 2] if ok else runs[0])
            row["submit_s_all"] = [r.get("submit_s") for r in runs]
            rows.append(row)
            print(json.dumps(row), flush=True)
    cols = ["backend", "big_mb", "submit_s", "reward", "end_reason", "reason", "rss_growth_mb"]
    print("\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r.get(c, r.get("error", ""))) for c in cols) + " |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"task": TASK, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
