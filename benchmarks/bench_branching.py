"""Branched groups against plain ones: what one group of G episodes costs to roll out.

    python benchmarks/bench_branching.py [--tasks 2] [--group-size 4] [--branch-turn 3]

On bundled starter tasks (local bubblewrap sandboxes) with a seed-driven scripted model (no
weights: the costs are the env's and the sandbox's, not a model's), each task's group is rolled
out twice: plain (G independent episodes, ``agents.rollout.rollout``) and branched (one trunk
played ``--branch-turn`` turns, forked into G branches, ``agents.branching.branched_rollout``).
Per group: completion tokens sampled, tool calls, env step seconds (grading included, plus the
fork's) as the trainers' metrics row counts them (``algos.rollout.branching.group_costs``), and
the group's wall time. The scripted replies echo their seed until turn ``--branch-turn + 1`` and
then submit at a seed-dependent turn, so both kinds play the same turn counts in distribution.
Prints a table and writes ``benchmarks/results/branching.json`` (no absolute paths).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import gymnasium
from transformers import AutoTokenizer

import swe_gym  # noqa: F401 - registers the ids
from agents.branching import branched_rollout
from agents.models.smollm2 import smollm2_tokenizer_path
from agents.react import ReActAgent
from agents.rollout import rollout
from algos.rollout.branching import group_costs
from swe_gym.tasks import load_tasks

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.branch_script import SeededScript  # noqa: E402 - the tests' scripted model

MAX_TURNS = 8


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=2)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--branch-turn", type=int, default=3)
    args = ap.parse_args()
    g, k = args.group_size, args.branch_turn
    tok = AutoTokenizer.from_pretrained(str(smollm2_tokenizer_path()))
    model = SeededScript(tok, min_submit=k + 1, max_submit=k + 3)
    tasks = [t.instance_id for t in load_tasks("starter")][: args.tasks]

    def make_env():
        return gymnasium.make("SWEStarter-v0", max_turns=MAX_TURNS, command_timeout=30)

    rows = {}
    for kind in ("plain", "branched"):
        walls, costs = [], []
        for task in tasks:
            t0 = time.perf_counter()
            if kind == "plain":
                trajs = rollout(make_env, model, [task], n_per_task=g, concurrency=g,
                                agent_kwargs={"max_turns": MAX_TURNS}, seed=0)  # fmt: skip
            else:
                trajs = branched_rollout(make_env, lambda: ReActAgent(model, max_turns=MAX_TURNS),
                                         [task], g, [k], concurrency=g, seed=0)  # fmt: skip
            walls.append(time.perf_counter() - t0)
            costs.append(group_costs(trajs))
            bad = [t.error for t in trajs if t.finish_reason != "submitted"]
            assert not bad, bad
        rows[kind] = {
            "tokens_sampled": statistics.mean(c[0] for c in costs),
            "tool_calls": statistics.mean(c[1] for c in costs),
            "env_s": statistics.mean(c[2] for c in costs),
            "wall_s": statistics.mean(walls),
        }
    print(f"{len(tasks)} starter tasks, G={g}, branch turn {k}, per group (means)")
    print(f"{'':10}{'tokens':>10}{'tool calls':>12}{'env s':>10}{'wall s':>10}")
    for kind, r in rows.items():
        print(f"{kind:10}{r['tokens_sampled']:>10.1f}{r['tool_calls']:>12.1f}"
              f"{r['env_s']:>10.2f}{r['wall_s']:>10.2f}")  # fmt: skip
    ratio = {m: rows["branched"][m] / rows["plain"][m] for m in rows["plain"]}
    print("branched / plain: " + ", ".join(f"{m} {v:.2f}" for m, v in ratio.items()))
    out = Path(__file__).resolve().parent / "results" / "branching.json"
    out.write_text(json.dumps({"tasks": tasks, "group_size": g, "branch_turn": k,
                               "max_turns": MAX_TURNS, "rows": rows, "ratio": ratio}, indent=1))  # fmt: skip
    print(f"wrote benchmarks/results/{out.name}")


if __name__ == "__main__":
    main()
