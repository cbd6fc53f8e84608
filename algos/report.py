"""A run's saved episodes and its static HTML report.

The RL loop writes each iteration's episodes to ``RUN_DIR/episodes/`` (at most
``save_episodes`` of them, chosen by ``save_episodes_sampling``):

- ``iter-000007.jsonl``: the token-exact :class:`~agents.trajectory.Trajectory` JSONL
  (``Trajectory.load_jsonl`` reads it back);
- ``iter-000007.meta.json``: ``{"iteration", "policy_version", "episodes", "saved", ...}``, where
  ``policy_version`` is the learner's optimiser step whose weights sampled the iteration.

A redone iteration (after ``--resume``) overwrites its two files.

``python -m algos.report RUN_DIR`` writes ``RUN_DIR/report.html``: one self-contained page (inline
CSS and script, nothing fetched) with the curves of ``metrics.jsonl`` and, per task, its episodes
with their turns, actions, observations, reward and policy version (:mod:`algos.report_html`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EPISODES_DIR = "episodes"
REPORT_FILE = "report.html"


def _stem(iteration: int) -> str:
    return f"iter-{iteration:06d}"


def select_episodes(
    trajs: Sequence[Any], cap: int | None, sampling: str, rng: random.Random
) -> list[Any]:
    """At most ``cap`` of ``trajs`` (all when ``cap`` is None), in their original order.

    ``groups``: whole tasks at random while they fit (a task's episodes stay together; when
    no whole task fits, the first ``cap`` episodes of a random one); ``random``: episodes at
    random. Episodes the hack monitor flagged (``report["hack_signals"]``) are always kept, over
    the cap: they are what a reader of the report must see.
    """
    if cap is None or len(trajs) <= cap:
        return list(trajs)
    flagged = {i for i, t in enumerate(trajs) if (t.report or {}).get("hack_signals")}
    if sampling == "random":
        picked = set(rng.sample(range(len(trajs)), cap))
    elif sampling == "groups":
        by_task: dict[Any, list[int]] = {}
        for i, t in enumerate(trajs):
            by_task.setdefault(t.task_id, []).append(i)
        tasks = list(by_task)
        rng.shuffle(tasks)
        picked = set()
        for task in tasks:
            if len(picked) + len(by_task[task]) <= cap:
                picked.update(by_task[task])
        if not picked:
            picked = set(by_task[tasks[0]][:cap])
    else:
        raise ValueError(f"unknown episode sampling {sampling!r}; choose one of: groups, random")
    picked |= flagged
    return [t for i, t in enumerate(trajs) if i in picked]


def save_iteration_episodes(
    run_dir: str | os.PathLike,
    iteration: int,
    trajs: Sequence[Any],
    policy_version: int,
    cap: int | None = None,
    sampling: str = "groups",
    seed: int = 0,
) -> Path:
    """Write iteration ``iteration``'s episodes (see the module docstring); returns the JSONL.

    The choice of episodes uses its own generator (``seed``, ``iteration``), never the
    training's random state.
    """
    from agents.trajectory import Trajectory

    folder = Path(run_dir) / EPISODES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    chosen = select_episodes(trajs, cap, sampling, random.Random(seed * 1_000_003 + iteration))
    path = folder / f"{_stem(iteration)}.jsonl"
    tmp = path.with_suffix(".jsonl.tmp")
    Trajectory.save_jsonl(chosen, tmp)
    os.replace(tmp, path)
    meta = {
        "iteration": iteration,
        "policy_version": policy_version,
        "episodes": len(trajs),
        "saved": len(chosen),
        "cap": cap,
        "sampling": sampling,
    }
    (folder / f"{_stem(iteration)}.meta.json").write_text(json.dumps(meta), encoding="utf-8")
    return path


def load_run(run_dir: str | os.PathLike) -> dict[str, Any]:
    """``{"metrics": [rows], "iterations": [{"meta": {...}, "episodes": [Trajectory]}],
    "config": {...}}`` of a run directory (missing parts are empty)."""
    import yaml

    from agents.trajectory import Trajectory

    run = Path(run_dir)
    if not run.is_dir():
        raise FileNotFoundError(f"run directory {str(run)!r} does not exist")
    metrics_path = run / "metrics.jsonl"
    metrics = (
        [
            json.loads(line)
            for line in metrics_path.read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
        if metrics_path.is_file()
        else []
    )
    config_path = run / "config.yaml"
    config = (
        yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}
        if config_path.is_file()
        else {}
    )
    iterations = []
    for path in sorted((run / EPISODES_DIR).glob("iter-*.jsonl")):
        meta_path = path.with_name(path.stem + ".meta.json")
        meta = (
            json.loads(meta_path.read_text(encoding="utf-8"))
            if meta_path.is_file()
            else {"iteration": int(path.stem.split("-")[1])}
        )
        iterations.append({"meta": meta, "episodes": Trajectory.load_jsonl(path)})
    return {"metrics": metrics, "iterations": iterations, "config": config, "name": run.name}


def write_report(run_dir: str | os.PathLike, out: str | os.PathLike | None = None) -> Path:
    """Render ``RUN_DIR/report.html`` (or ``out``); returns its path."""
    from algos.report_html import render_report

    run = load_run(run_dir)
    path = Path(out) if out is not None else Path(run_dir) / REPORT_FILE
    path.write_text(render_report(run), encoding="utf-8")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m algos.report",
        description="Write a static HTML report of an RL run (curves and saved episodes).",
    )
    parser.add_argument("run_dir", help="a run directory written by algos.grpo / algos.dapo")
    parser.add_argument("--out", help=f"output file (default: RUN_DIR/{REPORT_FILE})")
    args = parser.parse_args(argv)
    try:
        path = write_report(args.run_dir, args.out)
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(f"error: {e}") from None
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
