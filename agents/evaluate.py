"""Evaluate a model on an env: ``python -m agents.evaluate --env SWEStarter-v0 --model oracle``.

Runs ``--runs K`` episodes per task (``agents.rollout``), prints a per-task table, pass@1 as the
mean over runs with its standard error (methods.md section 4 reports Pass@1 as the mean over 10
runs), and pass@k with the unbiased estimator ``1 - C(n-c, k) / C(n, k)`` averaged over tasks.
Writes ``trajectories.jsonl``, SWE-bench ``predictions.jsonl`` (run 0; ``predictions_run<j>.jsonl``
for the others) and ``summary.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agents.models import SPEC_FORMS, load_model
from agents.protocols import SamplingParams
from agents.rollout import rollout
from agents.trajectory import Trajectory, write_predictions


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
    return {
        "num_tasks": len(task_ids),
        "runs": runs,
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


def _env_task_ids(env_id: str, env_kwargs: dict[str, Any]) -> tuple[list[str], list[Any]]:
    import gymnasium

    import swe_gym  # noqa: F401 - registers the ids

    if env_id not in gymnasium.registry:
        from swe_gym.errors import unknown_choice

        raise unknown_choice("env id", env_id, [k for k in gymnasium.registry if "SWE" in k])
    env = gymnasium.make(env_id, **env_kwargs)
    try:
        tasks = list(env.unwrapped.tasks)
    finally:
        env.close()
    return [t.instance_id for t in tasks], tasks


def evaluate(
    env_id: str,
    model: Any,
    task_ids: Sequence[str],
    runs: int = 1,
    *,
    env_kwargs: dict[str, Any] | None = None,
    agent_kwargs: dict[str, Any] | None = None,
    concurrency: int = 4,
    episode_timeout_s: float | None = None,
    seed: int = 0,
    progress_bar: bool = True,
) -> tuple[list[Trajectory], dict]:
    """Run the episodes and summarise them (see the module docstring)."""
    total = len(task_ids) * runs
    bar = None
    if progress_bar:
        from tqdm import tqdm

        bar = tqdm(total=total, desc="episodes", unit="ep", file=sys.stderr)
    solved = 0

    def tick(traj: Trajectory) -> None:
        nonlocal solved
        solved += int(traj.resolved)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(resolved=f"{solved}/{bar.n}")

    try:
        trajs = rollout(
            env_id,
            model,
            list(task_ids),
            n_per_task=runs,
            concurrency=concurrency,
            agent_kwargs=agent_kwargs,
            episode_timeout_s=episode_timeout_s,
            env_kwargs=env_kwargs,
            seed=seed,
            progress=tick,
        )
    finally:
        if bar is not None:
            bar.close()
    return trajs, summarise(trajs, list(task_ids), runs)


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m agents.evaluate", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--env", default="SWEStarter-v0", help="registered env id")
    p.add_argument("--model", default="oracle", help="model spec: " + ", ".join(SPEC_FORMS))
    p.add_argument("--runs", type=int, default=1, help="episodes per task (K)")
    p.add_argument("--tasks", nargs="*", default=None, help="task ids (default: all)")
    p.add_argument("--out", default=None, help="output folder (default: eval_out/<env>-<time>)")
    p.add_argument("--concurrency", type=int, default=4, help="episodes at once")
    p.add_argument("--max-turns", type=int, default=None, help="env turn limit")
    p.add_argument("--max-context-tokens", type=int, default=None)
    p.add_argument("--max-new-tokens", type=int, default=1024)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--action-format", default=None, help="env action format (fenced, json)")
    p.add_argument("--backend", default=None, help="sandbox backend (local, docker)")
    p.add_argument("--command-timeout", type=float, default=None)
    p.add_argument("--episode-timeout", type=float, default=None, help="seconds per episode")
    p.add_argument("--max-consecutive-invalid", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--model-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra model constructor argument (VALUE parsed as JSON when it can be)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.runs < 1:
        raise SystemExit(f"--runs must be >= 1, got {args.runs}")
    env_kwargs: dict[str, Any] = {}
    for key, value in (
        ("max_turns", args.max_turns),
        ("action_format", args.action_format),
        ("backend", args.backend),
        ("command_timeout", args.command_timeout),
    ):
        if value is not None:
            env_kwargs[key] = value
    all_ids, all_tasks = _env_task_ids(args.env, env_kwargs)
    task_ids = args.tasks or all_ids
    unknown = [t for t in task_ids if t not in set(all_ids)]
    if unknown:
        raise SystemExit(f"unknown task id(s) {unknown[:5]} for {args.env}; it has: {all_ids[:20]}")

    model_kw: dict[str, Any] = {}
    for item in args.model_arg:
        key, eq, value = item.partition("=")
        if not eq:
            raise SystemExit(f"--model-arg {item!r} must be KEY=VALUE")
        model_kw[key] = _parse_value(value)
    if args.model == "oracle":
        model_kw.setdefault("tasks", all_tasks)
        model_kw.setdefault("action_format", args.action_format or "fenced")
    model = load_model(args.model, **model_kw)

    agent_kwargs = {
        "params": SamplingParams(
            temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=args.seed
        ),
        "max_context_tokens": args.max_context_tokens,
        "max_consecutive_invalid": args.max_consecutive_invalid,
    }
    out = Path(args.out or f"eval_out/{args.env}-{time.strftime('%Y%m%d-%H%M%S')}")
    t0 = time.perf_counter()
    trajs, summary = evaluate(
        args.env,
        model,
        task_ids,
        args.runs,
        env_kwargs=env_kwargs,
        agent_kwargs=agent_kwargs,
        concurrency=args.concurrency,
        episode_timeout_s=args.episode_timeout,
        seed=args.seed,
        progress_bar=not args.no_progress,
    )
    summary.update(
        env=args.env, model=getattr(model, "name", args.model), wall_s=time.perf_counter() - t0
    )
    Trajectory.save_jsonl(trajs, out / "trajectories.jsonl")
    for j in range(args.runs):
        name = "predictions.jsonl" if j == 0 else f"predictions_run{j}.jsonl"
        write_predictions(trajs[j :: args.runs], out / name)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(format_table(summary))
    print(f"wrote {out}/trajectories.jsonl, predictions.jsonl, summary.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
