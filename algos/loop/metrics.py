"""Run metrics: metrics.jsonl (and TensorBoard / W&B), an iteration's row, tables, progress bar."""

from __future__ import annotations

import json
import logging
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from algos.distributed.fsdp import DistContext
from algos.learner.learner_config import PolicyLearner
from algos.learner.samples import Sample
from algos.loop.run_state import set_aside
from algos.rollout.scoring import Counters

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"


class MetricsLogger:
    """``metrics.jsonl`` always; TensorBoard / W&B when asked for and installed."""

    def __init__(
        self,
        run_dir: Path,
        sinks: Sequence[str],
        config: dict[str, Any],
        project: str = "swe-gym-rl",
        resume_from: int | None = None,
        key: str = "iteration",
    ):
        self.path = run_dir / METRICS_FILE
        self.key = key
        if resume_from is not None and self.path.exists():
            # rows logged after the checkpoint belong to work that will be redone
            rows = [json.loads(line) for line in self.path.read_text().splitlines() if line]
            keep = [r for r in rows if r.get(key, 0) <= resume_from]
            self.path.write_text("".join(json.dumps(r) + "\n" for r in keep))
        elif resume_from is None:
            set_aside(self.path)  # a new run: its rows alone
        self.tb = None
        self.wandb = None
        if "tensorboard" in sinks:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(run_dir / "tensorboard"))
            except ImportError:
                log.warning(
                    "tensorboard logging asked for but not installed "
                    "(pip install tensorboard); logging to %s only",
                    self.path,
                )
        if "wandb" in sinks:
            try:
                import wandb

                self.wandb = wandb.init(
                    project=project,
                    dir=str(run_dir),
                    config=config,
                    name=run_dir.name,
                    resume="allow",
                )
            except ImportError:
                log.warning(
                    "wandb logging asked for but not installed (pip install wandb); "
                    "logging to %s only",
                    self.path,
                )

    def log(self, row: dict[str, Any]) -> None:
        row = {
            k: (float(v) if isinstance(v, int | float) and not isinstance(v, bool) else v)
            for k, v in row.items()
        }
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        step = int(row.get(self.key, 0))
        scalars = {k: v for k, v in row.items() if isinstance(v, float) and math.isfinite(v)}
        if self.tb is not None:
            for k, v in scalars.items():
                self.tb.add_scalar(k, v, step)
            self.tb.flush()
        if self.wandb is not None:
            self.wandb.log(scalars, step=step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / METRICS_FILE
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str, str]]) -> str:
    """A plain-text table; ``columns`` = (header, key, format spec)."""
    cells = [[h for h, _, _ in columns]]
    for row in rows:
        line = []
        for _, key, spec in columns:
            v = row.get(key)
            line.append(
                "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)
            )
        cells.append(line)
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    out = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


RESULT_COLUMNS = (
    ("iter", "iteration", ".0f"),
    ("reward", "reward_mean", ".3f"),
    ("resolved", "resolved_rate", ".2f"),
    ("turns", "turns_mean", ".1f"),
    ("filtered", "filtered_frac", ".2f"),
    ("hack", "hack_rate", ".2f"),  # flagged share of the rewarded episodes (hack_monitor.py)
    ("kept", "kept", ".0f"),
    ("seqs", "segments", ".0f"),  # sequences trained: more than kept when histories were rewritten
    ("prefix_fail", "prefix_failures", ".0f"),
    ("steps", "optimizer_steps", ".0f"),
    ("loss", "loss", ".4f"),
    ("kl", "kl", ".4f"),
    ("time_s", "time_s", ".1f"),
)
# added to the table when the run validates (algos.loop.validation)
VAL_COLUMNS = (
    ("val_pass1", "val_pass1", ".3f"),
    ("+-", "val_pass1_se", ".3f"),
    ("val_gain", "val_gain", "+.3f"),
)


_GLOBAL_METRICS = (
    "grad_norm",
    "lr",
    "step",
    "skipped",
    "skipped_steps",
    "loss_tokens",
    "sequences",
    "tokens",
    "padded_tokens",
    "micro_batches",
    "time_s",
    "tokens_per_s",
    "tokens_computed",
    "tokens_plain",
)


def reduce_step_metrics(
    metrics: dict[str, float], samples: Sequence[Sample], ctx: DistContext
) -> dict[str, float]:
    """One process's view of a DistributedLearner step: its metrics are rank-local (each rank
    saw its DP share), so ``loss`` (already divided by the global token count) is summed over
    the DP ranks, ``*_max``/``*_min`` take the max/min, and the other per-token means are
    weighted by each rank's loss tokens (collective: every rank calls it)."""
    from algos.distributed.fsdp import all_reduce_sum

    weight = float(sum(s.num_loss_tokens for s in ctx.split_for_dp(samples)))
    local = {k: v for k, v in metrics.items() if k not in _GLOBAL_METRICS}
    sums = {
        f"sum:{k}": v * (1.0 if k == "loss" else weight)
        for k, v in local.items()
        if not k.endswith(("_max", "_min"))
    }
    sums = all_reduce_sum({**sums, "weight": weight}, ctx)
    out = dict(metrics)
    for k in local:
        if k == "loss":  # every CP rank of a DP group holds the same loss
            out[k] = sums["sum:loss"] / ctx.cp
        elif k.endswith(("_max", "_min")):
            sign = 1.0 if k.endswith("_max") else -1.0
            t = torch.tensor(sign * metrics[k], dtype=torch.float64)
            torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
            out[k] = sign * float(t)
        else:
            out[k] = sums[f"sum:{k}"] / max(sums["weight"], 1.0)
    return out


@dataclass
class EpisodeStats:
    """Running totals of an iteration's episodes (the progress bar, the metrics row)."""

    n: int = 0
    resolved: int = 0
    turns: int = 0
    tokens: int = 0
    completion_tokens: int = 0
    sampled_tokens: int = 0
    env_reward: float = 0.0

    def add(self, traj: Any) -> None:
        self.n += 1
        self.resolved += int(bool(traj.resolved))
        self.turns += traj.num_turns
        self.env_reward += float(traj.reward)
        self.tokens += sum(len(t.prompt_delta_ids) + len(t.completion_ids) for t in traj.turns)
        self.completion_tokens += sum(len(t.completion_ids) for t in traj.turns)
        # a branched group's trunk was sampled once: its first branch counts it, the others not
        k = traj.branch_turn or 0
        first = not k or int((traj.branch or {}).get("branch_index", 0)) == 0
        self.sampled_tokens += sum(len(t.completion_ids) for t in traj.turns[0 if first else k :])

    def summary(self) -> dict[str, float]:
        n = max(1, self.n)
        return {
            "resolved_rate": self.resolved / n,
            "turns_mean": self.turns / n,
            "seq_tokens_mean": self.tokens / n,
            "response_tokens_mean": self.completion_tokens / n,
            "tokens_sampled": float(self.sampled_tokens),
            "env_reward_mean": self.env_reward / n,
        }


def mean_metrics(step_metrics: list[dict[str, float]]) -> dict[str, float]:
    """Mean over the iteration's optimiser steps of the learner's metrics (skipped steps'
    NaN loss excluded)."""
    if not step_metrics:
        return {"loss": float("nan")}
    keys = (
        "loss",
        "pg_loss",
        "nll",
        "kl",
        "entropy",
        "clip_frac_low",
        "clip_frac_high",
        "approx_kl",
        "ratio_mean",
        "grad_norm",
        "lr",
        "loss_tokens",
        "tokens_per_s",
        "mismatch_kl",
        "mismatch_ratio_mean",
        "is_weight_mean",
        "is_capped_frac",
        "tokens_computed",
        "tokens_plain",
    )
    out: dict[str, float] = {}
    for k in keys:
        vals = [m[k] for m in step_metrics if k in m and math.isfinite(m[k])]
        if vals:
            out[k] = sum(vals) / len(vals)
    if "loss" not in out:
        out["loss"] = float("nan")
    out["clip_frac"] = out.get("clip_frac_low", 0.0) + out.get("clip_frac_high", 0.0)
    out["ratio_max"] = max((m.get("ratio_max", 1.0) for m in step_metrics), default=1.0)
    if any("mismatch_ratio_max" in m for m in step_metrics):
        out["mismatch_ratio_max"] = max(m.get("mismatch_ratio_max", 1.0) for m in step_metrics)
        out["mismatch_ratio_min"] = min(m.get("mismatch_ratio_min", 1.0) for m in step_metrics)
    return out


def iteration_row(
    iteration: int,
    counters: Counters,
    *,
    rounds: int,
    rewards: Sequence[float],
    advantages: Sequence[float],
    n_samples: int,
    step_metrics: list[dict[str, float]],
    learner: PolicyLearner,
    skipped_iterations: int,
    times: dict[str, float],
) -> dict[str, Any]:
    """An RL iteration's metrics row: its counts, rewards (every scored episode), advantages
    (the kept ones), steps and timings, then the mean of the learner's step metrics."""
    rewards_t = torch.tensor(list(rewards)) if rewards else torch.zeros(0)
    row: dict[str, Any] = {"iteration": iteration, "refill_rounds": rounds}
    row.update(counters.row())
    row["hack_rate"] = counters.hack_rate
    row.update(
        {
            "reward_mean": float(rewards_t.mean()) if rewards else float("nan"),
            "reward_std": float(rewards_t.std()) if len(rewards) > 1 else 0.0,
            "kept": n_samples,
            "filtered_frac": counters.filtered / max(1, counters.episodes),
            "optimizer_steps": sum(1 for m in step_metrics if not m.get("skipped")),
            "skipped_steps": float(learner.skipped_steps),
            "skipped_iterations": skipped_iterations,
            "step": float(learner.step),
            **times,
            "adv_abs_mean": sum(abs(a) for a in advantages) / max(1, len(advantages)),
        }
    )
    row.update(mean_metrics(step_metrics))
    if counters.errors:
        row["errors"] = counters.errors[:10]
    return row


class ProgressBar:
    """The run's tqdm bar over iterations (a no-op when not ``enabled``): the current
    iteration's episode counts, then each finished row's reward, resolved and filtered share."""

    def __init__(self, enabled: bool, total: int, initial: int, desc: str):
        self.bar = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(
                total=total,
                initial=initial,
                desc=desc,
                unit="it",
                file=sys.stderr,
                dynamic_ncols=True,
            )

    def episodes(self, stats: EpisodeStats) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(
                f"episodes {stats.n}, resolved {stats.resolved}", refresh=False
            )

    def iteration(self, row: dict[str, Any]) -> None:
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(
                reward=f"{row['reward_mean']:.3f}",
                resolved=f"{row['resolved_rate']:.2f}",
                filtered=f"{row['filtered_frac']:.2f}",
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
