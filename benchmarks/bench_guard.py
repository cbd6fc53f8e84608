"""The runtime guard's cost and its false alarms: every starter task's gold patch graded with the
guard and without it (the channel alone, as before the guard), side by side in one run.

    python benchmarks/bench_guard.py [--backends local docker] [--repeat 3]

Per backend: the median grading time of each task with and without the guard (interleaved, so
machine load falls on both alike), their ratio over the suite, the median test-run share of
the grading time, and how many gold patches the guard calls ``tampered`` (the target is none).
Prints a table and writes ``benchmarks/results/bench_guard.json``. Docker needs a daemon
(``eval "$(bash .ci/docker-up.sh)"``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path


def grade_once(task, backend: str, guard: bool, options: dict) -> tuple[float, object]:
    from swe_gym.grading import grade_patch

    t = dataclasses.replace(
        task, install_config={**(task.install_config or {}), "verdict_guard": guard}
    )
    t0 = time.perf_counter()
    report = grade_patch(t, task.patch, backend=backend, sandbox_options=options, timeout=600)
    return time.perf_counter() - t0, report


def run(backends: list[str], repeat: int) -> dict:
    from swe_gym.starter import starter_tasks

    tasks = starter_tasks()
    out: dict = {"tasks": len(tasks), "repeat": repeat, "backends": {}}
    for backend in backends:
        options: dict = {}
        if backend == "docker":
            import docker

            options = {"client": docker.from_env()}
        rows, tampered, unresolved = [], [], []
        for task in tasks:
            times: dict[bool, list[float]] = {True: [], False: []}
            for _ in range(repeat):
                for guard in (True, False):
                    dt, report = grade_once(task, backend, guard, options)
                    times[guard].append(dt)
                    if guard and report.tampered:
                        tampered.append((task.instance_id, report.tampered[:3]))
                    if not report.resolved:
                        unresolved.append((task.instance_id, guard, report.reason))
            rows.append(
                {
                    "task": task.instance_id,
                    "guard_s": statistics.median(times[True]),
                    "no_guard_s": statistics.median(times[False]),
                }
            )
        total_on = sum(r["guard_s"] for r in rows)
        total_off = sum(r["no_guard_s"] for r in rows)
        out["backends"][backend] = {
            "rows": rows,
            "total_guard_s": total_on,
            "total_no_guard_s": total_off,
            "ratio": total_on / total_off,
            "gold_tampered": tampered,
            "gold_unresolved": unresolved,
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backends", nargs="+", default=["local"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "bench_guard.json"))
    args = ap.parse_args()
    res = run(args.backends, args.repeat)
    print(f"{'backend':8} {'tasks':>5} {'guard s':>9} {'no guard s':>11} {'ratio':>6} "
          f"{'gold tampered':>14} {'gold unresolved':>16}")  # fmt: skip
    for name, b in res["backends"].items():
        print(
            f"{name:8} {res['tasks']:>5} {b['total_guard_s']:>9.1f} {b['total_no_guard_s']:>11.1f} "
            f"{b['ratio']:>6.2f} {len(b['gold_tampered']):>14} {len(b['gold_unresolved']):>16}"
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
