"""``--agent-cmd``'s route to the model against ``--agent module:factory``'s, and the episode
throughput of concurrent harness processes.

    python benchmarks/bench_gateway.py --agent-cmd 8 [--backend local|docker] [--turns 10]

Per turn: the same bash + curl + jq client makes ``--turns`` chat requests with a growing
history (an agent's shape) and times each (curl's ``time_total``), once inside the episode's
sandbox (``--agent-cmd``: loopback forwarder, unix socket, the session endpoint, then the
gateway) and once on the host straight to the gateway (what an ``--agent`` program does). The
engine answers at once, so the difference is the route. Throughput: EPISODES episodes of
``examples/harnesses/ask_once.sh`` (one turn, a gold patch applied, graded) at once, against
``examples/openai_agent.py`` through ``--agent`` on the same tasks (the oracle as its engine:
an edit and a submit, two turns, graded). Both spend most of an episode starting the sandbox
and grading, which the harness's route leaves as they are.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from agents.models import ScriptedModel
from agents.protocols import SamplingParams
from algos.rollout.agent_cmd import run_cmd_rollouts
from algos.rollout.agent_programs import run_agent_rollouts
from swe_gym.tasks import load_tasks

ROOT = Path(__file__).resolve().parents[1]
TIMED_TURNS = r"""
set -euo pipefail
msgs='[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Fix it."}]'
for i in $(seq TURNS); do
  body=$(jq -n --arg m "$OPENAI_MODEL" --argjson msgs "$msgs" '{model: $m, messages: $msgs}')
  reply=$(curl -sS --fail-with-body -w '\n%{time_total}' "$OPENAI_BASE_URL/chat/completions" \
    -H "Authorization: Bearer $OPENAI_API_KEY" -H 'Content-Type: application/json' -d "$body")
  echo "turn_s=$(tail -n 1 <<<"$reply")"
  text=$(head -n -1 <<<"$reply" | jq -r '.choices[0].message.content')
  obs=$(printf 'file_%d.py  %d bytes\n' $(seq 40))
  msgs=$(jq -n --argjson msgs "$msgs" --arg a "$text" --arg o "$obs" \
    '$msgs + [{role: "assistant", content: $a}, {role: "user", content: $o}]')
done
"""


def _spec(backend: str, concurrency: int, **kw: Any) -> SimpleNamespace:
    return SimpleNamespace(
        env="SWEStarter-v0",
        env_kwargs={"backend": backend, "max_turns": 50},
        concurrency=concurrency,
        episode_timeout_s=600,
        agent_kwargs={
            "params": SamplingParams(temperature=1.0, max_new_tokens=4096),
            "max_context_tokens": 16384,
            "max_turns": 100,
        },
        **kw,
    )


def _turn_times(stdout: str) -> list[float]:
    return [float(line[7:]) for line in stdout.splitlines() if line.startswith("turn_s=")]


def _host_route(turns: int, backend: str, tokenizer: Any, task: str) -> list[float]:
    """The same client on the host, as an ``--agent`` program, straight to the gateway."""
    times: list[float] = []
    script = TIMED_TURNS.replace("TURNS", str(turns))

    def factory(base_url: str, api_key: str, model: str) -> Any:
        def play(env: Any) -> None:
            env.reset()
            run_env = {**os.environ, "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": api_key}
            run_env["OPENAI_MODEL"] = model
            out = subprocess.run(
                ["bash", "-c", script], env=run_env, capture_output=True, text=True, timeout=600
            )
            times.extend(_turn_times(out.stdout))
            env.step("```\nsubmit\n```")

        return play

    import sys
    import types

    module = types.ModuleType("_bench_agent_cmd_host")
    module.factory = factory  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    engine = ScriptedModel(["ls"] * (turns + 1), tokenizer=tokenizer, name="policy")
    run_agent_rollouts(_spec(backend, 1, agent=f"{module.__name__}:factory"), engine, [task], 1, 0)
    return times


def _sandbox_route(turns: int, backend: str, tokenizer: Any, task: str, mount: str) -> list[float]:
    engine = ScriptedModel(["ls"] * (turns + 1), tokenizer=tokenizer, name="policy")
    script = Path(mount) / "timed.sh"
    script.write_text(TIMED_TURNS.replace("TURNS", str(turns)))
    spec = _spec(backend, 1, agent_cmd="bash /opt/harness/timed.sh", agent_mount=mount)
    (traj,) = run_cmd_rollouts(spec, engine, [task], 1, 0)
    if traj.agent["cmd"]["end"] != "exited":
        raise RuntimeError(f"the timed harness failed: {traj.agent['cmd']}")
    return _turn_times(traj.agent["cmd"]["stdout"])


def _throughput(route: str, n: int, backend: str, tokenizer: Any, mount: str) -> dict:
    tasks = load_tasks("starter")[:n]
    by_task = {t.instance_id: ["```diff\n" + t.patch + "```"] for t in tasks}
    engine = ScriptedModel(by_task, tokenizer=tokenizer, name="policy")
    ids = [t.instance_id for t in tasks]
    t0 = time.perf_counter()
    if route == "agent_cmd":
        spec = _spec(backend, n, agent_cmd="bash /opt/harness/ask_once.sh", agent_mount=mount)
        trajs = run_cmd_rollouts(spec, engine, ids, 1, 0)
    else:
        from agents.models import OracleModel

        spec = _spec(backend, n, agent="examples.openai_agent:make_agent")
        oracle = OracleModel(tokenizer=tokenizer, explore=False)
        trajs = run_agent_rollouts(spec, oracle, ids, 1, 0)
    wall = time.perf_counter() - t0
    return {
        "episodes": len(trajs),
        "resolved": sum(t.resolved for t in trajs),
        "wall_s": round(wall, 1),
        "episodes_per_min": round(60 * len(trajs) / wall, 1),
        "episode_s_median": round(statistics.median(t.wall_s for t in trajs), 2),
    }


def measure(episodes: int, turns: int, backend: str) -> dict:
    from transformers import AutoTokenizer

    from agents.models.smollm2 import smollm2_tokenizer_path
    from swe_gym.sandbox.harness_tools import bundle_tools

    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_tokenizer_path()))
    task = load_tasks("starter")[0].instance_id
    mount = tempfile.mkdtemp(prefix="bench_harness_")
    try:
        shutil.copy(ROOT / "examples" / "harnesses" / "ask_once.sh", mount)
        if backend == "docker":
            bundle_tools(mount, ["curl", "jq"])
        os.chmod(mount, 0o755)
        host = _host_route(turns, backend, tokenizer, task)
        inside = _sandbox_route(turns, backend, tokenizer, task, mount)
        agent = _throughput("agent", episodes, backend, tokenizer, mount)
        cmd = _throughput("agent_cmd", episodes, backend, tokenizer, mount)
    finally:
        shutil.rmtree(mount, ignore_errors=True)
    host_ms, inside_ms = 1000 * statistics.median(host), 1000 * statistics.median(inside)
    return {
        "backend": backend,
        "turns": turns,
        "turn_ms_median_agent": round(host_ms, 2),
        "turn_ms_median_agent_cmd": round(inside_ms, 2),
        "turn_overhead_ms": round(inside_ms - host_ms, 2),
        "concurrent_episodes": episodes,
        "throughput_agent": agent,
        "throughput_agent_cmd": cmd,
        "throughput_ratio": round(
            cmd["episodes_per_min"] / max(agent["episodes_per_min"], 1e-9), 2
        ),
    }


def print_table(r: dict) -> None:
    print(f"backend {r['backend']}, {r['turns']} turns per episode, instant engine")
    print(f"{'route':<28}{'turn ms (median)':>18}{'episodes/min':>14}{'resolved':>10}")
    for name, key in (
        ("--agent module:factory", "agent"),
        ("--agent-cmd (in sandbox)", "agent_cmd"),
    ):
        t = r[f"throughput_{key}"]
        print(
            f"{name:<28}{r[f'turn_ms_median_{key}']:>18}{t['episodes_per_min']:>14}"
            f"{t['resolved']:>6}/{t['episodes']}"
        )
    print(f"per-turn overhead of the in-sandbox route: {r['turn_overhead_ms']} ms; "
          f"throughput ratio (cmd / agent) at {r['concurrent_episodes']} at once: "
          f"{r['throughput_ratio']}")  # fmt: skip
