"""DAPO arms of the learning benchmark: the same RFT checkpoint trained by more than one DAPO
configuration (e.g. plain groups against branched ones), each over the same seeds, and the
comparison per unit of cost.

An arm is a name and the ``dapo`` settings it overrides: the preset's ``dapo_arms`` mapping, or
``--arm NAME=JSON`` on the command line. The plain arm (``DAPO``, no overrides) always runs first,
and its run directories keep their names (``dapo``, ``dapo-seed1``), so that a work directory
from before arms resumes. Runs are interleaved by seed (plain seed 0, each arm's seed 0, plain
seed 1, ...) so that a machine's load drifting over the hour falls on every arm alike.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from typing import Any

PLAIN = "DAPO"


def parse_arms(preset: dict | None, flags: list[str]) -> dict[str, dict[str, Any]]:
    """``{name: dapo overrides}``, the plain arm first; a bad arm names itself and the form."""
    arms: dict[str, dict[str, Any]] = {PLAIN: {}}
    given = dict(preset or {})
    for flag in flags:
        name, sep, text = flag.partition("=")
        try:
            value = json.loads(text) if sep else None
        except json.JSONDecodeError as e:
            raise SystemExit(f"--arm {flag!r}: the part after '=' is not JSON ({e})") from None
        given[name.strip()] = value
    for name, overrides in given.items():
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", str(name)) or name == PLAIN:
            raise SystemExit(
                f"arm {name!r}: a name of letters, digits, '_' or '-' other than {PLAIN!r} "
                "(the plain arm, which always runs)"
            )
        if not isinstance(overrides, dict) or not overrides:
            raise SystemExit(
                f"arm {name!r}: {overrides!r} is not a mapping of dapo settings, e.g. "
                '--arm \'branched={"branch_at": "turn:1"}\''
            )
        arms[str(name)] = overrides
    return arms


def run_name(arm: str, seed_index: int, seed: int) -> str:
    """The run directory: ``dapo`` / ``dapo-seed1`` for the plain arm, ``dapo-ARM[-seedS]``."""
    base = "dapo" if arm == PLAIN else f"dapo-{arm}"
    return base if seed_index == 0 else f"{base}-seed{seed}"


def stage_label(arm: str, seed_index: int, seed: int) -> str:
    base = PLAIN if arm == PLAIN else f"{PLAIN} {arm}"
    return base if seed_index == 0 else f"{base} seed {seed}"


def run_costs(rows: list[dict]) -> dict[str, Any]:
    """What one DAPO run spent, from its metrics rows: completion tokens the engine sampled (a
    branched trunk once), the iterations' own wall time (rollout + train + push; not the engine's
    start or the validation passes), and its groups' tool calls and env seconds where logged."""
    it = [r for r in rows if r.get("iteration", 0) >= 1 and "time_s" in r]
    sampled = [r["tokens_sampled"] for r in it if "tokens_sampled" in r]
    return {
        "tokens_sampled": sum(sampled) if len(sampled) == len(it) and it else None,
        "train_wall_s": sum(r["time_s"] for r in it),
        "branched_groups": sum(r.get("branched_groups", 0) for r in it),
        "branch_fallbacks": sum(r.get("branch_fallbacks", 0) for r in it),
        "filtered": sum(r.get("filtered", 0) for r in it),
        "optimizer_steps": sum(r.get("optimizer_steps", 0) for r in it),
    }


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def compare_arms(stages: list[dict], rft_pass1: float) -> dict[str, dict[str, Any]]:
    """Per arm, over its seeds: held-out pass@1 (mean, s.e. over seeds), the gain over RFT, the
    mean cost of a run, and the gain per 1k sampled tokens and per minute of iteration time."""
    out: dict[str, dict[str, Any]] = {}
    for arm in dict.fromkeys(s["arm"] for s in stages):
        runs = [s for s in stages if s["arm"] == arm]
        p = [s["held_out"]["pass@1"] for s in runs]
        tokens = [s["costs"]["tokens_sampled"] for s in runs]
        wall = [s["costs"]["train_wall_s"] for s in runs]
        g = statistics.fmean(p) - rft_pass1
        tok = None if None in tokens else statistics.fmean(tokens)
        minutes = statistics.fmean(wall) / 60
        out[arm] = {
            "seeds": [s["seed"] for s in runs],
            "pass@1": statistics.fmean(p),
            "pass@1_se_over_seeds": statistics.stdev(p) / math.sqrt(len(p)) if len(p) > 1 else None,
            "gain_vs_rft": g,
            "tokens_sampled": tok,
            "train_wall_min": minutes,
            "gain_per_1k_tokens": g / (tok / 1000) if tok else None,
            "gain_per_min": g / minutes if minutes else None,
            "filtered": _mean([s["costs"]["filtered"] for s in runs]),
            "optimizer_steps": _mean([s["costs"]["optimizer_steps"] for s in runs]),
            "branch_fallbacks": _mean([s["costs"]["branch_fallbacks"] for s in runs]),
        }
    return out


def print_arms(arms: dict[str, dict[str, Any]]) -> None:
    def f(x: Any, spec: str) -> str:
        return "-" if x is None else format(x, spec)

    head = ("arm", "seeds", "held-out pass@1", "gain vs RFT", "tokens sampled", "iter. wall",
            "gain / 1k tok", "gain / min", "filtered", "steps")  # fmt: skip
    lines = [head]
    for name, a in arms.items():
        lines.append(
            (
                name,
                ",".join(map(str, a["seeds"])),
                f"{a['pass@1']:.3f} ± {f(a['pass@1_se_over_seeds'], '.3f')}",
                f"{a['gain_vs_rft']:+.3f}",
                f(a["tokens_sampled"], ".0f"),
                f"{a['train_wall_min']:.1f} min",
                f(a["gain_per_1k_tokens"], "+.4f"),
                f(a["gain_per_min"], "+.4f"),
                f(a["filtered"], ".1f"),
                f(a["optimizer_steps"], ".1f"),
            )
        )
    widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
    print("arms (means over seeds; ± is the s.e. over seeds; costs are one run's):")
    for r in lines:
        print("  " + "  ".join(x.ljust(w) for x, w in zip(r, widths, strict=True)))


__all__ = ["PLAIN", "compare_arms", "parse_arms", "print_arms", "run_costs", "run_name"]
