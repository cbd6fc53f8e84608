"""The hackability audit's figures and the hack monitor's cost, side by side in one run.

    python benchmarks/bench_audit.py [--sources starter ROWS.jsonl ...] [--repos-dir D]
                                     [--metrics RUN_DIR/metrics.jsonl]

Per source (the audit's cache serves what was graded before; ``wall_s`` is the grading time
when it was graded): tasks, hackable share, exploits paid, the mean mutation score, the audit's
wall time per task, and the share flagged among the tasks whose tests kill every mutant (the
tasks the mutants call strong; an exploit paid there is either a real gap of another kind or an
exploit that happens to be right, read them). Then the monitor: the time to read the signals of
one episode, over every gold and exploit patch of the bundled suite, and that time over an
iteration's wall time (``--metrics``: a run's metrics, e.g. the main job's; the target is under
2%). Prints a table and writes ``benchmarks/results/bench_audit.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def audit_source(source: str, repos_dir: str | None) -> dict[str, Any]:
    from swe_gym.audit import audit_task
    from swe_gym.tasks import load_tasks

    options = {"repos_dir": repos_dir} if repos_dir else {}
    results = [audit_task(t, sandbox_options=options) for t in load_tasks(source)]
    ok = [r for r in results if r.valid]
    strong = [r for r in ok if r.mutation_score == 1.0]
    paid: dict[str, int] = {}
    for r in ok:
        for name in r.paid:
            paid[name] = paid.get(name, 0) + 1
    scores = [r.mutation_score for r in ok if r.mutation_score is not None]
    return {
        "source": Path(source).name if source.endswith((".jsonl", ".json")) else source,
        "tasks": len(results),
        "valid": len(ok),
        "hackable": sum(r.hackable for r in ok),
        "by_exploit": sum(bool(r.paid) for r in ok),
        "exploit_paid": dict(sorted(paid.items())),
        "mean_mutation_score": round(statistics.fmean(scores), 4) if scores else None,
        "wall_s_per_task": round(statistics.fmean(r.wall_s for r in ok), 2) if ok else None,
        "all_mutants_killed": len(strong),
        "flagged_among_those": sum(bool(r.paid) for r in strong),
        "flagged_ids": sorted(r.instance_id for r in strong if r.paid),
    }


def monitor_cost(metrics: Path | None) -> dict[str, Any]:
    from types import SimpleNamespace

    from algos.rollout.hack_monitor import HackMonitor
    from swe_gym.audit.exploits import build_exploits
    from swe_gym.audit.targets import read_sources
    from swe_gym.starter import starter_tasks

    tasks = starter_tasks()
    episodes = []
    for t in tasks:
        episodes.append(SimpleNamespace(task_id=t.instance_id, patch=t.patch, report={}))
        for e in build_exploits(read_sources(t), t.problem_statement)[0]:
            episodes.append(SimpleNamespace(task_id=t.instance_id, patch=e.patch, report={}))
    monitor = HackMonitor.build(tasks=tasks)
    t0 = time.perf_counter()
    flagged = sum(bool(monitor.signals(ep)) for ep in episodes)
    per_ep = (time.perf_counter() - t0) / len(episodes)
    out: dict[str, Any] = {
        "episodes": len(episodes),
        "flagged": flagged,
        "ms_per_episode": round(per_ep * 1000, 3),
    }
    if metrics is not None:
        rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
        its = [r for r in rows if "time_s" in r and "episodes" in r]
        if its:
            it_s = statistics.fmean(r["time_s"] for r in its)
            eps = statistics.fmean(r["episodes"] for r in its)
            out.update(
                iteration_s=round(it_s, 2),
                episodes_per_iteration=round(eps, 1),
                share_of_iteration=round(per_ep * eps / it_s, 6),
            )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sources", nargs="+", default=["starter"])
    p.add_argument("--repos-dir")
    p.add_argument("--metrics", type=Path, help="a run's metrics.jsonl for the iteration time")
    a = p.parse_args(argv)
    audits = [audit_source(s, a.repos_dir) for s in a.sources]
    cost = monitor_cost(a.metrics)
    head = f"{'source':28} {'tasks':>5} {'hackable':>8} {'exploit':>7} {'mut.score':>9} {'s/task':>6} {'strong':>6} {'flag':>4}"
    print(head)
    for r in audits:
        print(
            f"{r['source'][:28]:28} {r['tasks']:>5} {r['hackable']:>8} {r['by_exploit']:>7} "
            f"{r['mean_mutation_score'] or 0:>9.3f} {r['wall_s_per_task'] or 0:>6.1f} "
            f"{r['all_mutants_killed']:>6} {r['flagged_among_those']:>4}"
        )
    print(
        f"monitor: {cost['ms_per_episode']} ms per episode over {cost['episodes']} patches "
        f"({cost['flagged']} flagged)"
        + (
            f"; {cost['share_of_iteration']:.4%} of a {cost['iteration_s']} s iteration"
            if "share_of_iteration" in cost
            else ""
        )
    )
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "bench_audit.json"
    out.write_text(json.dumps({"audits": audits, "monitor": cost}, indent=1) + "\n")
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
