"""The learning benchmark's numbers: per-stage statistics, the table, the gains, the plot.

Split from ``bench_swe_learning.py`` (which runs the stages) so that each reads on its own.
Every path written into the result is relative to the repository root: the saved JSON is
committed, and a machine's own paths mean nothing elsewhere.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def rel(path: str | Path) -> str:
    """``path`` relative to the repository root when it lies inside it, else its name only."""
    p = Path(path).resolve()
    try:
        return p.relative_to(ROOT).as_posix()
    except ValueError:
        return p.name


def shared_prefix(trajs: list[Any]) -> int:
    """Tokens every trajectory starts with (the system prompt and template filler)."""
    seqs = [t.turns[0].prompt_delta_ids for t in trajs if t.token_exact and t.turns]
    if not seqs:
        return 0
    n = min(len(s) for s in seqs)
    for i in range(n):
        if any(s[i] != seqs[0][i] for s in seqs):
            return i
    return n


def stage_stats(out: Path, wall: float) -> dict[str, Any]:
    """One evaluation's figures from its ``summary.json`` and ``trajectories.jsonl``."""
    from agents.trajectory import Trajectory

    s = json.loads((out / "summary.json").read_text())
    trajs = Trajectory.load_jsonl(out / "trajectories.jsonl")
    tokens = [t.num_tokens for t in trajs if t.token_exact]
    mean_tokens = statistics.fmean(tokens) if tokens else None
    prefix = shared_prefix(trajs)
    reasons: dict[str, int] = {}
    for t in trajs:
        reasons[t.finish_reason] = reasons.get(t.finish_reason, 0) + 1
    return {
        "pass@1": s["pass@1"],
        "stderr": s["pass@1_stderr"],
        "per_run": s["pass@1_per_run"],
        # each task's resolved share over its runs: the paired comparison of two stages
        "per_task": {iid: t["resolved"] / t["n"] for iid, t in s["per_task"].items()},
        "episodes": s["num_tasks"] * s["runs"],
        "wall_s": wall,
        "resolved": sum(p["resolved"] for p in s["per_task"].values()),
        "format_valid_rate": s.get("format_valid_rate"),
        "turns": s.get("turns"),
        "tokens_per_trajectory": mean_tokens,
        "shared_prompt_tokens": prefix,
        "shared_prompt_share": (prefix / mean_tokens) if mean_tokens else None,
        "finish_reasons": reasons,
        "trajectories": rel(out / "trajectories.jsonl"),
    }


def gain(a: dict, b: dict) -> dict[str, Any]:
    """``b - a`` in pass@1 with the standard error of the difference (independent runs), and,
    where both stages ran the same tasks, the paired one: the s.e. of the mean of the tasks'
    differences, which also counts how much the result depends on which tasks were drawn."""
    diff = b["pass@1"] - a["pass@1"]
    se = math.sqrt(a["stderr"] ** 2 + b["stderr"] ** 2)
    # non-overlapping 2-s.e. intervals: the bar for "RFT beats base"
    apart = b["pass@1"] - 2 * b["stderr"] > a["pass@1"] + 2 * a["stderr"]
    out: dict[str, Any] = {
        "gain": diff,
        "stderr": se,
        "above_2se": bool(diff > 2 * se and diff > 0),
        "intervals_apart": bool(apart),
    }
    ta, tb = a.get("per_task") or {}, b.get("per_task") or {}
    if len(ta) >= 2 and ta.keys() == tb.keys():
        d = [tb[k] - ta[k] for k in ta]
        out["paired_stderr"] = statistics.stdev(d) / math.sqrt(len(d))
        out["paired_tasks"] = len(d)
    return out


def _fmt(x: Any, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def report(
    cfg: dict,
    tasks: dict,
    stages: list[dict],
    rft_rows: list[dict],
    dapo_rows: list[dict],
    wall: float,
) -> dict[str, Any]:
    """Print the table and return the result to save."""
    head = (
        "stage",
        "held-out pass@1",
        "resolved",
        "format-valid",
        "tokens/traj",
        "shared prompt",
        "train resolve",
        "wall",
    )
    lines = [head]
    for s in stages:
        h = s["held_out"]
        tr = s["train_resolve_rate"]
        lines.append(
            (
                s["stage"],
                f"{h['pass@1']:.3f} ± {h['stderr']:.3f}",
                f"{h['resolved']}/{h['episodes']}",
                _fmt(h["format_valid_rate"], ".3f"),
                _fmt(h["tokens_per_trajectory"], ".0f"),
                _fmt(h["shared_prompt_share"], ".0%"),
                _fmt(tr, ".3f"),
                f"{s['wall_s'] / 60:.1f} min",
            )
        )
    widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
    for r in lines:
        print("  ".join(x.ljust(w) for x, w in zip(r, widths, strict=True)))
    gains = {
        "rft_vs_base": gain(stages[0]["held_out"], stages[1]["held_out"]),
        "dapo_vs_rft": gain(stages[1]["held_out"], stages[2]["held_out"]),
    }
    for st in stages[3:]:  # further seeds and arms, each against the same RFT; named by its run
        gains[f"{st['run'].replace('-', '_')}_vs_rft"] = gain(stages[1]["held_out"], st["held_out"])
    d = stages[1]["data"]
    print(
        f"RFT data: {d['source']}: {d['own_resolved']} passing of {d['own_episodes']} own runs"
        f", {d['oracle_resolved']} oracle runs; "
        f"{int(d.get('epochs_run', 0))} epochs, {int(d.get('steps', 0))} steps"
    )
    probe = [(int(r["epoch"]), r["format_valid"]) for r in rft_rows if "format_valid" in r]
    if probe:
        kind = cfg["rft"].get("probe", "greedy")
        print(
            f"RFT format-valid per epoch ({kind} probe, {cfg['rft'].get('probe_contexts')} "
            "training turns; epoch 0 = before training): "
            + ", ".join(f"{e}: {v:.3f}" for e, v in probe)
        )
    for k, g in gains.items():
        paired = (
            f"; paired over {g['paired_tasks']} tasks: s.e. {g['paired_stderr']:.3f}"
            if "paired_stderr" in g
            else ""
        )
        print(
            f"{k}: {g['gain']:+.3f} (s.e. {g['stderr']:.3f}): "
            f"{'above' if g['above_2se'] else 'not above'} two standard errors; 2-s.e. "
            f"intervals {'apart' if g['intervals_apart'] else 'overlap'}{paired}"
        )
    for st in stages[2:]:  # each DAPO run's validation on its own tasks (val_runs)
        if st.get("validation"):
            a, b = st["validation"]
            print(
                f"{st['stage']} on its {tasks.get('n_rl') or tasks['n_train']} training tasks "
                f"(validation, {cfg['dapo'].get('val_runs')} runs each): {a['val_pass1']:.3f} ± "
                f"{a['val_pass1_se']:.3f} (iteration {int(a['iteration'])}) -> {b['val_pass1']:.3f} ± "
                f"{b['val_pass1_se']:.3f} (iteration {int(b['iteration'])}); gain "
                f"{b['val_gain']:+.3f} ± {b['val_gain_se']:.3f} (paired over tasks)"
            )
    dapo = [st["held_out"]["pass@1"] for st in stages[2:] if st.get("arm", "DAPO") == "DAPO"]
    if len(dapo) >= 2:  # the spread over training seeds, which one run's s.e. does not show
        print(
            f"DAPO held-out pass@1 over {len(dapo)} seeds: mean {statistics.fmean(dapo):.3f}, "
            f"s.e. over seeds {statistics.stdev(dapo) / math.sqrt(len(dapo)):.3f}"
        )
    print(
        "wall: the stage's own cost (base: its held-out evaluation; RFT: own and oracle runs "
        "+ SFT; DAPO: its run); held-out evaluations of RFT and DAPO are listed apart"
    )
    print(
        f"tasks: {tasks['n_train']} train"
        + (f" + {tasks['n_rl']} DAPO-only" if tasks.get("n_rl") else "")
        + f" / {tasks['n_held_out']} held out; "
        f"R = {cfg['eval']['runs']} runs; total {wall / 60:.1f} min"
    )
    return {
        "config": {k: v for k, v in cfg.items() if not k.startswith("_")},
        "tasks": tasks,
        "stages": stages,
        "gains": gains,
        "rft_metrics": rft_rows,
        "dapo_metrics": dapo_rows,
        "wall_s": wall,
    }


def plot(result: dict, out: Path) -> Path:
    """Held-out pass@1 per stage (± 2 s.e.), RFT's NLL and format-valid rate, DAPO's curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12.6, 3.2))
    st = result["stages"]
    axes[0].errorbar(
        range(len(st)),
        [s["held_out"]["pass@1"] for s in st],
        yerr=[2 * s["held_out"]["stderr"] for s in st],
        marker="o",
        capsize=4,
        label="pass@1",
    )
    axes[0].plot(
        range(len(st)),
        [s["held_out"]["format_valid_rate"] or 0 for s in st],
        marker="s",
        ls="--",
        label="format-valid",
    )
    many = len(st) > 4  # seeds and arms: slanted labels, or they run into each other
    axes[0].set_xticks(
        range(len(st)),
        [s["stage"] for s in st],
        rotation=30 if many else 0,
        ha="right" if many else "center",
        fontsize=8 if many else None,
    )
    axes[0].set_ylim(-0.05, 1.05)
    axes[0].set_title("held-out (± 2 s.e.)", fontsize=9)
    axes[0].legend(fontsize=8)
    rft = result["rft_metrics"]
    nll = [(r["step"], r["nll"]) for r in rft if isinstance(r.get("nll"), int | float)]
    if nll:
        axes[1].plot(*zip(*nll, strict=True), marker=".", label="NLL per step")
    probe = [(r["step"], r["format_valid"]) for r in rft if "format_valid" in r]
    if probe:
        axes[1].plot(*zip(*probe, strict=True), marker="s", label="format-valid (epoch end)")
    axes[1].set_title("RFT", fontsize=9)
    axes[1].legend(fontsize=8)
    for key in ("reward_mean", "resolved_rate"):
        pts = [
            (r["iteration"], r[key])
            for r in result["dapo_metrics"]
            if isinstance(r.get(key), int | float)
        ]
        if pts:
            axes[2].plot(*zip(*pts, strict=True), marker="o", label=key)
    axes[2].set_title("DAPO per iteration (training tasks)", fontsize=9)
    axes[2].legend(fontsize=8)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


__all__ = ["gain", "plot", "rel", "report", "shared_prefix", "stage_stats"]
