"""Which tasks a run draws from, read once when it starts: every task of an env, the solve-rate
filter of stage 2 (docs/methods.md#stages), and the audit's weights for tasks whose tests accept
wrong code (``hackable_weight``). ``TaskPool`` (``collect.py``) then samples from the result."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from algos.config import ConfigError
from swe_gym.errors import unknown_choice

log = logging.getLogger(__name__)


def env_tasks(env_id: str, env_kwargs: dict[str, Any]) -> list[Any]:
    """Every task of an env (its ``tasks`` attribute: ``Task`` objects for the SWE envs),
    without starting an episode."""
    import gymnasium

    import swe_gym  # noqa: F401 - registers the ids

    if env_id not in gymnasium.registry:
        raise unknown_choice(
            "env id",
            env_id,
            [k for k in gymnasium.registry if "-v" in k and not k.startswith(("ALE", "Gym"))][:40],
        )
    env = gymnasium.make(env_id, **env_kwargs)
    base: Any = env.unwrapped  # a task env (SWEEnv, SWERLEnv): its .tasks
    try:
        return list(base.tasks)
    finally:
        env.close()


def env_task_source(env_id: str, env_kwargs: dict[str, Any]) -> Any:
    """The task source an env reads (its ``tasks=`` argument or the id's default)."""
    import gymnasium

    return env_kwargs.get("tasks", (gymnasium.spec(env_id).kwargs or {}).get("tasks"))


def filter_pool_by_solve_rate(pool: list[str], path: str | Path, high: float = 2 / 3) -> list[str]:
    """Stage 2 pool: drop tasks solved >= ``high`` of the time and never solved
    (docs/methods.md#stages).

    ``path``: JSON ``{task_id: rate}`` or ``{task_id: {"attempts": n, "resolved": k}}`` (what a
    stage-1 run writes to ``solve_rates.json``). Tasks missing from the file are dropped.
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    rates: dict[str, float] = {}
    for tid, v in data.items():
        if isinstance(v, dict):
            rates[tid] = v["resolved"] / v["attempts"] if v.get("attempts") else 0.0
        else:
            rates[tid] = float(v)
    kept = [t for t in pool if t in rates and 0.0 < rates[t] < high]
    if not kept:
        raise ConfigError(
            f"solve-rate file {path} leaves no task with 0 < rate < {high:.3f} in the pool of "
            f"{len(pool)}; check the file or train stage 1 longer"
        )
    return kept


def weigh_hackable(
    pool: list[str], weight: float, source: Any, audit_file: str | None
) -> tuple[list[str], dict[str, float]]:
    """``(pool, weights)`` for ``hackable_weight``: the tasks the audit flags excluded (0) or
    weighted (between 0 and 1); 1 reads no audit. Every pool task must be in the audit."""
    if weight >= 1.0:
        return pool, {}
    from swe_gym.audit.select import audit_path_for, flagged, load_verdicts

    path = audit_file or audit_path_for(source)
    verdicts = load_verdicts(path)
    missing = [t for t in pool if t not in verdicts]
    if missing:
        raise ConfigError(
            f"{len(missing)} pool task(s) are not in the audit {path} (e.g. {missing[:3]}); "
            "audit them (python -m swe_gym.audit) or set hackable_weight: 1"
        )
    hack = [t for t in pool if flagged(verdicts[t])]
    log.info(
        "audit %s flags %d of %d pool tasks (hackable_weight %s)",
        path,
        len(hack),
        len(pool),
        weight,
    )
    if weight == 0:
        kept = [t for t in pool if t not in hack]
        if not kept:
            raise ConfigError(
                f"hackable_weight 0 leaves no task: the audit {path} flags all {len(pool)}"
            )
        return kept, {}
    return pool, dict.fromkeys(hack, weight)


__all__ = [
    "env_task_source",
    "env_tasks",
    "filter_pool_by_solve_rate",
    "weigh_hackable",
]
