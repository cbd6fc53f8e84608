"""An evaluation's numbers: unbiased pass@k, pass@1 as the mean over runs with its standard
error, the format-valid rate, and the per-task table."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from agents.trajectory import Trajectory


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples with ``c`` correct: ``1 - C(n-c, k) / C(n, k)``."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _ks(runs: int) -> list[int]:
    ks = {k for k in (1, 2, 4, 8, 16, 32, 64) if k <= runs} | {runs}
    return sorted(ks)


def format_valid_rate(trajectories: Sequence[Trajectory]) -> float | None:
    """The share of replies the env could parse as one action (the format a policy must learn);
    None when there was no turn."""
    turns = [t for traj in trajectories for t in traj.turns]
    return sum(not t.invalid_action for t in turns) / len(turns) if turns else None


def summarise(trajectories: Sequence[Trajectory], task_ids: Sequence[str], runs: int) -> dict:
    """Per-task counts, pass@1 mean +- standard error over runs, pass@k.

    ``trajectories`` are task-major: ``runs`` consecutive episodes per task, as ``rollout``
    returns them.
    """
    if len(trajectories) != len(task_ids) * runs:
        raise ValueError(
            f"expected {len(task_ids)} tasks x {runs} runs = {len(task_ids) * runs} "
            f"trajectories, got {len(trajectories)}"
        )
    per_task: dict[str, dict[str, Any]] = {}
    by_run = [[0.0] * len(task_ids) for _ in range(runs)]
    for i, tid in enumerate(task_ids):
        group = trajectories[i * runs : (i + 1) * runs]
        solved = [bool(t.resolved) for t in group]
        for j, ok in enumerate(solved):
            by_run[j][i] = float(ok)
        reasons: dict[str, int] = {}
        for t in group:
            reasons[t.finish_reason] = reasons.get(t.finish_reason, 0) + 1
        per_task[tid] = {
            "n": runs,
            "resolved": sum(solved),
            "mean_turns": statistics.fmean(t.num_turns for t in group),
            "finish_reasons": reasons,
        }
    rates = [statistics.fmean(r) for r in by_run] if task_ids else [0.0] * runs
    stderr = statistics.stdev(rates) / math.sqrt(runs) if runs > 1 else 0.0
    pass_k = {
        k: statistics.fmean(pass_at_k(runs, p["resolved"], k) for p in per_task.values())
        if per_task
        else 0.0
        for k in _ks(runs)
    }
    turns = [t for traj in trajectories for t in traj.turns]
    exact = [traj for traj in trajectories if traj.token_exact]
    return {
        "num_tasks": len(task_ids),
        "runs": runs,
        "format_valid_rate": format_valid_rate(trajectories),
        "turns": len(turns),
        "tokens_per_trajectory": (statistics.fmean(t.num_tokens for t in exact) if exact else None),
        "pass@1": statistics.fmean(rates),
        "pass@1_stderr": stderr,
        "pass@1_per_run": rates,
        "pass@k": {str(k): v for k, v in pass_k.items()},
        "per_task": per_task,
    }


def format_table(summary: dict) -> str:
    rows = [("task", "resolved", "turns", "finish reasons")]
    for tid, p in summary["per_task"].items():
        reasons = ", ".join(f"{k}:{v}" for k, v in sorted(p["finish_reasons"].items()))
        rows.append((tid, f"{p['resolved']}/{p['n']}", f"{p['mean_turns']:.1f}", reasons))
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append(
        f"pass@1 = {100 * summary['pass@1']:.1f}% +- {100 * summary['pass@1_stderr']:.1f} "
        f"(mean +- s.e. over {summary['runs']} run(s), {summary['num_tasks']} task(s))"
    )
    if summary["runs"] > 1:
        ks = summary["pass@k"].items()
        lines.append("  ".join(f"pass@{k} = {100 * v:.1f}%" for k, v in ks))
    return "\n".join(lines)
