"""Validation during an RL run: the policy's pass@1 on a fixed set of tasks, before, during and
after training, so that a run shows whether it learnt (``val_runs``, ``val_every``).

The per-iteration ``resolved_rate`` of the training table is measured on whichever tasks the
iteration drew, so with a few problems per iteration it mostly shows which tasks were drawn.
A validation instead runs ``val_runs`` episodes on every task of the same set each time, with
the same episode seeds (``agents.rollout`` derives each turn's sampling seed from them), at the
training temperature, on the rollout engine holding the current weights. Two validations are
then a paired comparison: the gain over the first one and its standard error are computed over
tasks, from each task's difference, which is what a user needs to tell learning from noise
(the training runs of one task are not independent of each other, the tasks are).

Results go to ``RUN_DIR/validation.jsonl`` (one row per validation: ``iteration``, the
learner's ``policy_version``, ``pass1`` and ``pass1_se`` over tasks, ``gain``/``gain_se``
against the first validation of the run, ``format_valid``, per-task means) and into the
iteration's metrics row as ``val_pass1``/``val_gain``/...
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.eval_metrics import format_valid_rate
from algos.loop.run_state import set_aside

VAL_FILE = "validation.jsonl"
SEED_OFFSET = 7_000_000  # validation episodes never reuse a training episode's seed


def mean_se(xs: Sequence[float]) -> tuple[float, float]:
    """Mean and its standard error (sample std / sqrt(n); 0 for a single value)."""
    n = len(xs)
    if n == 0:
        return math.nan, math.nan
    m = sum(xs) / n
    if n == 1:
        return m, 0.0
    var = sum((x - m) ** 2 for x in xs) / (n - 1)
    return m, math.sqrt(var / n)


def per_task_rates(trajs: Sequence[Any]) -> dict[str, float]:
    """Each task's resolved fraction over its episodes."""
    runs: dict[str, list[float]] = {}
    for t in trajs:
        runs.setdefault(t.task_id, []).append(1.0 if t.resolved else 0.0)
    return {k: sum(v) / len(v) for k, v in runs.items()}


@dataclass
class Validator:
    """Runs validations on ``task_ids`` through ``run_episodes(task_ids, n, seed)`` and keeps the
    first one as the baseline of later gains."""

    task_ids: list[str]
    runs: int
    seed: int
    run_dir: Path
    upto: int = -1
    """A resumed run's iteration: validations up to it are kept (later ones belong to work that
    is redone); -1, a new run: none are."""
    baseline: dict[str, float] | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.runs < 1:
            raise ValueError(f"val_runs must be >= 1 to validate; got {self.runs}")
        if not self.task_ids:
            raise ValueError("validation needs at least one task; the task pool is empty")
        path = self.run_dir / VAL_FILE
        if self.upto < 0:
            set_aside(path)  # a new run: its validations alone
        elif path.is_file():  # a resumed run compares with its own first validation
            rows = [
                json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()
            ]
            self.rows = [r for r in rows if r["iteration"] <= self.upto]
            path.write_text("".join(json.dumps(r) + "\n" for r in self.rows), encoding="utf-8")
            if self.rows:
                self.baseline = self.rows[0]["per_task"]

    def validate(
        self,
        run_episodes: Callable[[list[str], int, int], list[Any]],
        iteration: int,
        policy_version: int,
    ) -> dict[str, Any]:
        """One validation; appends its row to ``validation.jsonl`` and returns it."""
        t0 = time.perf_counter()
        trajs = run_episodes(self.task_ids, self.runs, self.seed * 1_000_003 + SEED_OFFSET)
        rates = per_task_rates(trajs)
        missing = sorted(set(self.task_ids) - set(rates))
        if missing:
            raise RuntimeError(f"validation returned no episode for tasks {missing[:5]}")
        pass1, pass1_se = mean_se([rates[t] for t in self.task_ids])
        if self.baseline is None:
            self.baseline = rates
        gain, gain_se = mean_se([rates[t] - self.baseline.get(t, math.nan) for t in self.task_ids])
        row = {
            "iteration": iteration,
            "policy_version": policy_version,
            "pass1": pass1,
            "pass1_se": pass1_se,
            "gain": gain,
            "gain_se": gain_se,
            "format_valid": format_valid_rate(trajs),
            "episodes": len(trajs),
            "resolved": sum(1 for t in trajs if t.resolved),
            "tasks": len(self.task_ids),
            "runs": self.runs,
            "time_s": time.perf_counter() - t0,
            "per_task": rates,
        }
        self.rows.append(row)
        with (self.run_dir / VAL_FILE).open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
        return row

    def due(self, iteration: int, last: int, every: int) -> bool:
        """Whether to validate after ``iteration`` (0: before training): first, last, and every
        ``every`` iterations in between (0: first and last only)."""
        return iteration in (0, last) or (every > 0 and iteration % every == 0)

    def summary(self) -> str | None:
        """One line: the first and the last validation and the gain with its paired s.e."""
        if len(self.rows) < 1:
            return None
        first, last = self.rows[0], self.rows[-1]
        head = (
            f"validation pass@1 on {first['tasks']} tasks x {first['runs']} runs: "
            f"{first['pass1']:.3f} +- {first['pass1_se']:.3f} (iteration {first['iteration']})"
        )
        if len(self.rows) == 1:
            return head
        return (
            f"{head} -> {last['pass1']:.3f} +- {last['pass1_se']:.3f} (iteration "
            f"{last['iteration']}); gain {last['gain']:+.3f} +- {last['gain_se']:.3f} "
            "(paired over tasks)"
        )


def metrics_of(row: dict[str, Any]) -> dict[str, float]:
    """The keys a validation adds to its iteration's metrics row."""
    return {
        "val_pass1": row["pass1"],
        "val_pass1_se": row["pass1_se"],
        "val_gain": row["gain"],
        "val_gain_se": row["gain_se"],
        "val_format_valid": row["format_valid"],
        "time_val_s": row["time_s"],
    }


__all__ = ["VAL_FILE", "Validator", "mean_se", "metrics_of", "per_task_rates"]
