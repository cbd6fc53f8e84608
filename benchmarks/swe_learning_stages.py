"""The learning benchmark's stages that run something: a held-out evaluation (``agents.evaluate``
as a subprocess), the oracle's runs (in this process, for token-exact trajectories), and what a
DAPO run left behind (its metrics rows, its row of the table).

Split from ``bench_swe_learning.py``, which orders the stages.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import yaml
from swe_learning_report import stage_stats
from swe_learning_runner import Runner

ENV = "SWEStarter-v0"
# the preset's env_kwargs that every stage shares -> agents.evaluate's flags for them
EVAL_ENV_FLAGS = {"prompt": "--prompt", "max_observation_chars": "--max-observation-chars"}
# the eval section's settings that agents.evaluate takes as flags of the same names
EVAL_KEYS = (
    "max_turns",
    "max_new_tokens",
    "max_context_tokens",
    "temperature",
    "concurrency",
    "max_consecutive_invalid",
)


def evaluate(
    cfg: dict, run: Runner, name: str, model: str, tasks: str, runs: int, out: Path, seed: int = 0
) -> dict[str, Any]:
    """pass@1 over ``runs`` runs: one ``agents.evaluate --runs R`` call (one engine; run ``j``
    is episode seed ``1000 * seed + j``, and every turn samples with its own derived seed)."""
    ev = cfg["eval"]
    flags = {  # in this order: a finished stage is reused while its command is unchanged
        "--env": ENV,
        "--tasks": tasks,
        "--model": model,
        "--runs": runs,
        "--out": out,
        **{f"--{k.replace('_', '-')}": ev[k] for k in EVAL_KEYS},
        "--seed": seed * 1000,
    }
    wall = run(
        name,
        *("-m", "agents.evaluate"),
        *[str(x) for kv in flags.items() for x in kv],
        "--no-progress",
        *[x for k, v in cfg["env_kwargs"].items() for x in (EVAL_ENV_FLAGS[k], str(v))],
    )
    return stage_stats(out, wall)


def oracle_runs(cfg: dict, tasks: str, out: Path, repos_dir: Path) -> dict[str, Any]:
    """The oracle's runs, in this process: it needs the policy's tokenizer object so that its
    trajectories are token-exact for the learner (the CLI cannot pass one)."""
    from transformers import AutoTokenizer

    from agents.evaluate import evaluate as run_eval
    from agents.models import OracleModel
    from agents.protocols import SamplingParams
    from agents.trajectory import Trajectory
    from swe_gym.tasks import load_tasks

    if (out / "summary.json").exists() and (out / "wall_s").exists():
        return stage_stats(out, float((out / "wall_s").read_text()))
    os.environ["SWE_GYM_REPOS"] = str(repos_dir)
    ev = cfg["eval"]
    rows = load_tasks(tasks)
    model = OracleModel(
        tasks=rows,
        tokenizer=AutoTokenizer.from_pretrained(cfg["_tokenizer"]),
        explore=cfg["oracle"].get("explore", True),
    )
    t0 = time.perf_counter()
    print(f"[{time.strftime('%H:%M:%S')}] oracle-runs: {len(rows)} tasks", flush=True)
    trajs, summary = run_eval(
        ENV,
        model,
        [t.instance_id for t in rows],
        1,
        env_kwargs={**cfg["env_kwargs"], "tasks": tasks, "max_turns": ev["max_turns"]},
        agent_kwargs={
            "params": SamplingParams(max_new_tokens=ev["max_new_tokens"]),
            "max_context_tokens": ev["max_context_tokens"],
        },
        concurrency=ev["concurrency"],
        progress_bar=False,
    )
    out.mkdir(parents=True, exist_ok=True)
    Trajectory.save_jsonl(trajs, out / "trajectories.jsonl")
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    (out / "wall_s").write_text(str(time.perf_counter() - t0))
    return stage_stats(out, time.perf_counter() - t0)


def engine_spec(cfg: dict, folder: str) -> str:
    return f"hf:{folder}" if cfg["dapo"].get("engine") == "transformers" else f"vllm:{folder}"


def write_config(section: dict, path: Path, **extra: Any) -> str:
    path.write_text(yaml.safe_dump({**section, **extra}, sort_keys=False), encoding="utf-8")
    return str(path)


def metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return (
        [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
    )


def dapo_stage(label: str, seed: int, wall: float, rows: list[dict]) -> dict[str, Any]:
    """One DAPO run's row of the table, from its metrics (the held-out figures join later)."""
    rates = [r.get("resolved_rate") for r in rows if r.get("resolved_rate") is not None]
    val = [r for r in rows if r.get("val_pass1") is not None]
    return {
        "stage": label,
        "seed": seed,
        # the first iteration samples before any update: the RFT policy's rate on these tasks
        "first_resolve_rate": rates[0] if rates else None,
        "train_resolve_rate": rates[-1] if rates else None,
        "episodes": int(sum(r.get("episodes", 0) for r in rows)),
        "steps": int(sum(r.get("steps", 0) or 0 for r in rows)),
        "wall_s": wall,
        # pass@1 on its own tasks before and after (val_runs), paired over tasks
        "validation": [
            {k: r[k] for k in ("iteration", "val_pass1", "val_pass1_se", "val_gain", "val_gain_se")}
            for r in (val[0], val[-1])
        ]
        if len(val) >= 2
        else None,
    }


__all__ = [
    "EVAL_ENV_FLAGS",
    "dapo_stage",
    "engine_spec",
    "evaluate",
    "metrics",
    "oracle_runs",
    "write_config",
]
