"""A warm start built once and reused: synthetic tasks, the oracle's runs on them, an RFT model.

RL needs episodes that resolve; a 135M base model resolves none, so a run from it learns only
from the length penalty. ``warm_start: NAME`` (DAPO; a recipe ``algos/presets/warm_start_NAME.yaml``
or a YAML path) first builds, under ``$SWE_GYM_CACHE/warm_start/NAME-<key>/``:

1. tasks: ``swe_gym.synth`` on the recipe's repositories at its tier (``guided``: the issue
   states the edit), concatenated, at most ``max_tasks``;
2. the oracle's trajectories on them (``explore=False``: edit, submit), token-exact for the
   policy's tokenizer, with the recipe's ``env_kwargs`` (e.g. the compact prompt);
3. RFT (``algos.rft``) on the resolved ones, with the recipe's ``rft`` fields (e.g. the format
   probe and ``format_patience``).

The run then trains the RFT checkpoint with those env options, on those tasks or, when the recipe
has an ``rl`` block (same fields as ``synth``), on tasks synthesised from it: other repositories,
where the warm-started policy resolves some episodes and not others, so that rewards differ within
a group and RL has something to learn (on its own tasks it resolves nearly all). The key hashes
the recipe and the policy, so a changed recipe builds anew and an unchanged one is reused (the
second run starts training at once). A lock keeps two runs from building the same one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from algos.config import PRESET_DIR, ConfigError
from algos.config.dapo import DAPOConfig
from algos.config.rft import RFTConfig
from swe_gym.paths import cache_root

DONE = "warm_start.json"


def recipe_path(name: str) -> Path:
    """A recipe's file: ``algos/presets/warm_start_NAME.yaml``, or ``name`` as a path."""
    bundled = PRESET_DIR / f"warm_start_{name}.yaml"
    if bundled.is_file():
        return bundled
    if Path(name).is_file():
        return Path(name)
    names = sorted(p.stem.removeprefix("warm_start_") for p in PRESET_DIR.glob("warm_start_*.yaml"))
    raise ConfigError(
        f"warm_start {name!r}: no recipe algos/presets/warm_start_{name}.yaml and no "
        f"such file; bundled: {', '.join(names)}"
    )


def _tokenizer_folder(policy: str) -> str:
    from agents.models.smollm2 import smollm2_path, smollm2_tokenizer_path

    if policy == "smollm2":
        return str(smollm2_path())
    if policy == "tiny-random":
        return str(smollm2_tokenizer_path())
    return policy


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def _repos_env(repos_dir: Path) -> Iterator[None]:
    """The oracle reads base files through ``SWE_GYM_REPOS`` (swe_gym.repos.local_repo)."""
    old = os.environ.get("SWE_GYM_REPOS")
    os.environ["SWE_GYM_REPOS"] = str(repos_dir)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("SWE_GYM_REPOS", None)
        else:
            os.environ["SWE_GYM_REPOS"] = old


def ensure(name: str, policy: str, seed: int = 0) -> dict[str, Any]:
    """The warm start's record (``tasks``, ``repos_dir``, ``checkpoint``, ``env_kwargs`` and
    what building it measured), built on the first call and read back on later ones."""
    path = recipe_path(name)
    recipe = yaml.safe_load(path.read_text(encoding="utf-8"))
    key = hashlib.sha256(json.dumps([recipe, policy, seed], sort_keys=True).encode()).hexdigest()
    root = cache_root() / "warm_start" / f"{Path(name).stem}-{key[:12]}"
    with _locked(root.with_suffix(".lock")):
        if (root / DONE).exists():
            record = json.loads((root / DONE).read_text())
            print(f"warm start: reusing {root}", file=sys.stderr)
            return record
        record = _build(recipe, policy, seed, root)
        (root / DONE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record


def _build(recipe: dict, policy: str, seed: int, root: Path) -> dict[str, Any]:
    from agents.trajectory import Trajectory
    from algos.loop.rft_loop import train_rft

    t0 = time.perf_counter()
    repos_dir = root / "repos"
    tasks = root / "tasks.jsonl"
    rows = _synthesise(recipe["synth"], tasks, repos_dir, seed)
    rl_tasks = root / "rl_tasks.jsonl"
    n_rl = len(_synthesise(recipe["rl"], rl_tasks, repos_dir, seed)) if "rl" in recipe else None
    t_synth = time.perf_counter() - t0
    env_kwargs = {
        **recipe.get("env_kwargs", {}),
        "tasks": str(tasks),
        "max_turns": recipe["max_turns"],
        "sandbox_options": {"repos_dir": str(repos_dir)},
    }
    trajs = _oracle_runs(rows, env_kwargs, policy, recipe, repos_dir)
    oracle_file = root / "oracle.jsonl"
    Trajectory.save_jsonl(trajs, oracle_file)
    t_oracle = time.perf_counter() - t0 - t_synth
    print(
        f"warm start: the oracle resolved {sum(t.resolved for t in trajs)} of {len(trajs)} "
        f"tasks; RFT on them",
        file=sys.stderr,
    )
    cfg = RFTConfig(
        **{
            **recipe.get("rft", {}),
            "policy": policy,
            "seed": seed,
            "trajectories": [str(oracle_file)],
            "run_dir": str(root / "rft"),
            "progress": False,
            "save_episodes": 0,
        }
    )
    rft_rows = train_rft(cfg)
    tokens = [t.num_tokens for t in trajs if t.token_exact]
    return {
        "tasks": str(tasks),
        "repos_dir": str(repos_dir),
        "rl_tasks": str(rl_tasks) if n_rl is not None else None,
        "n_rl_tasks": n_rl,
        "checkpoint": str(root / "rft" / "checkpoint"),
        "env_kwargs": {k: v for k, v in env_kwargs.items() if k != "tasks"},
        "n_tasks": len(rows),
        "oracle_resolved": sum(t.resolved for t in trajs),
        "tokens_per_trajectory": sum(tokens) / len(tokens) if tokens else None,
        "rft_steps": max((r["step"] for r in rft_rows), default=0),
        "format_valid": [[r["epoch"], r["format_valid"]] for r in rft_rows if "format_valid" in r],
        "wall_s": {
            "synth": t_synth,
            "oracle": t_oracle,
            "rft": time.perf_counter() - t0 - t_synth - t_oracle,
        },
    }


def _synthesise(spec: dict, out: Path, repos_dir: Path, seed: int) -> list[str]:
    """``spec``'s tasks (``repos``, ``tier``, ``max_candidates``, ``max_tasks``, ``audit``:
    reject candidates the hackability audit's exploits pass, ``hidden_tests``: write a strict
    hidden test per task; both default on) written to ``out``,
    their repositories under ``repos_dir``; the rows."""
    from swe_gym.starter import repo_path
    from swe_gym.synth import SynthConfig, synthesize

    rows: list[str] = []
    for repo in spec["repos"]:
        part = out.parent / out.stem / f"{repo.split('/')[-1]}.jsonl"
        print(f"warm start: synthesising {spec['tier']} tasks from {repo}", file=sys.stderr)
        synthesize(
            SynthConfig(
                source=repo_path(repo),
                out=part,
                repos_dir=repos_dir,
                tier=spec["tier"],
                max_candidates=spec["max_candidates"],
                seed=seed,
                progress=False,
                audit=bool(spec.get("audit", True)),
                hidden_tests=bool(spec.get("hidden_tests", True)),
            ),
            log=lambda _: None,
        )
        rows += [x for x in part.read_text(encoding="utf-8").splitlines() if x.strip()]
    rows = rows[: spec.get("max_tasks", len(rows))]
    if not rows:
        raise ConfigError(f"warm start: the recipe's synthesis accepted no task ({spec})")
    out.write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    return rows


def _oracle_runs(
    rows: list[str], env_kwargs: dict, policy: str, recipe: dict, repos_dir: Path
) -> list[Any]:
    from transformers import AutoTokenizer

    from agents.models import OracleModel
    from agents.protocols import SamplingParams
    from agents.rollout import rollout
    from swe_gym.tasks import load_tasks

    tasks = load_tasks(env_kwargs["tasks"])
    tok = AutoTokenizer.from_pretrained(_tokenizer_folder(policy))
    model = OracleModel(tasks=tasks, tokenizer=tok, explore=False)
    with _repos_env(repos_dir):
        return rollout(
            "SWEStarter-v0",
            model,
            [t.instance_id for t in tasks],
            n_per_task=1,
            concurrency=2,
            env_kwargs=env_kwargs,
            agent_kwargs={"params": SamplingParams(max_new_tokens=recipe["max_new_tokens"])},
        )


def apply(cfg: DAPOConfig) -> DAPOConfig:
    """``cfg`` with its ``warm_start`` built (or reused) and put in place: the policy is the RFT
    checkpoint, the env serves the warm start's tasks with its options (``cfg.env_kwargs``
    given by the user win), and ``warm_start`` is cleared (the saved config stands alone)."""
    if not cfg.warm_start:
        raise ValueError("apply needs a config with a warm_start recipe; got warm_start=None")
    warm_start = cfg.warm_start
    record = ensure(warm_start, cfg.policy, cfg.seed)
    steps = ", ".join(f"{e}: {v:.2f}" for e, v in record["format_valid"])
    wall = sum(record["wall_s"].values())
    print(
        f"warm start {warm_start!r}: {record['n_tasks']} tasks, the oracle resolved "
        f"{record['oracle_resolved']}, RFT {record['rft_steps']} steps (format-valid per "
        f"epoch {steps or '-'}), built in {wall / 60:.1f} min",
        file=sys.stderr,
    )
    if record.get("rl_tasks"):
        print(
            f"warm start {warm_start!r}: RL trains on {record['n_rl_tasks']} other tasks "
            f"({record['rl_tasks']})",
            file=sys.stderr,
        )
    env_kwargs = {
        **record["env_kwargs"],
        **cfg.env_kwargs,
        "tasks": record.get("rl_tasks") or record["tasks"],
    }
    return dataclasses.replace(
        cfg, policy=record["checkpoint"], env_kwargs=env_kwargs, warm_start=None
    )


__all__ = ["apply", "ensure", "recipe_path"]
