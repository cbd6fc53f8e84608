"""Gateway overhead per request against calling the engine in-process (target <= 2 ms median),
and sessions per second.

    python benchmarks/bench_gateway.py [--requests 200] [--sessions 64] [--threads 16]

The engine is instant (it returns a fixed reply with SmolLM2's tokenizer), so what is measured
is the gateway: HTTP, JSON, request checks, the session's prefix check (text renders of the
history) and the delta ids. Rows: the engine alone, ``SessionRecorder.complete`` in-process
(bookkeeping without HTTP), the round trip with a plain ``httpx`` client (the overhead figure),
and with the ``openai`` client (which adds its own request building, a few ms at 10 turns).
Each session runs ``--turns`` turns, so the history grows like an agent's. Then sessions per
second: ``--sessions`` from ``--threads`` client threads (popped in-process), 32 at once
fetched and deleted over HTTP (``/v1/sessions/{id}``), and 32 conversations at once under one
API key with no session header (each must get its own session, with no prefix failure).
Writes benchmarks/results/bench_gateway.json.

    python benchmarks/bench_gateway.py --mini-swe-agent 1 [--max-new-tokens 64]   # ~7 min on a shared 2-core CPU

instead measures the fraction of recorded turns trained for mini-swe-agent
(examples/mini_swe_agent.py) + SmolLM2 on a starter task: each format error of the harness
rewrites the history and starts a segment; before, training kept the first segment only, now
every segment. Merged into the same JSON under ``mini_swe_agent_smollm2``.

    python benchmarks/bench_gateway.py --agent-cmd 8 [--backend local|docker] [--turns 10]

measures ``--agent-cmd``'s route (benchmarks/bench_agent_cmd.py): the overhead per turn of a
harness inside the sandbox against ``--agent module:factory``, and 8 harness episodes at once;
merged under ``agent_cmd_<backend>``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx
import openai

from agents.gateway import Gateway, SessionRecorder
from agents.protocols import Conversation, Generation, SamplingParams

TARGET_MS = 2.0


class InstantEngine:
    """A token backend that answers at once with the same sampled ids."""

    name = "instant"

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.reply = tokenizer.encode("ls -la", add_special_tokens=False) + [tokenizer.eos_token_id]

    def generate(self, conversation: Conversation, params: SamplingParams) -> Generation:
        return Generation("ls -la", list(self.reply), [-0.1] * len(self.reply), "stop")


def _observation(i: int) -> str:
    return "\n".join(f"file_{i}_{k}.py  {k * 37} bytes" for k in range(20))  # ~0.5 KB


def _median_ms(xs: list[float]) -> float:
    return 1000 * statistics.median(xs)


def measure(tokenizer, requests: int, turns: int, sessions: int, threads: int) -> dict:
    engine = InstantEngine(tokenizer)
    params = SamplingParams(max_new_tokens=8)
    conversation = Conversation(token_ids=tokenizer.encode("hello"))
    engine_s = []
    for _ in range(requests):
        t0 = time.perf_counter()
        engine.generate(conversation, params)
        engine_s.append(time.perf_counter() - t0)

    def episode(call, sid: str) -> list[float]:
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Fix."}]
        times = []
        for t in range(turns):
            t0 = time.perf_counter()
            reply = call(sid, messages)
            times.append(time.perf_counter() - t0)
            messages += [
                {"role": "assistant", "content": reply},
                {"role": "user", "content": _observation(t)},
            ]
        return times

    recorder = SessionRecorder(engine)
    recorder_s = []
    for e in range(max(1, requests // turns)):
        recorder_s += episode(lambda s, m: recorder.complete(s, m, params).text, f"r{e}")

    gateway = Gateway(engine)
    url = gateway.start()
    client = openai.OpenAI(base_url=url, api_key="bench", max_retries=0)

    def http_call(sid: str, messages: list) -> str:
        response = client.chat.completions.create(
            model="instant", messages=messages, max_tokens=8, extra_headers={"X-Session-Id": sid}
        )
        return response.choices[0].message.content

    raw = httpx.Client()

    def raw_call(sid: str, messages: list) -> str:
        body = {"model": "instant", "messages": messages, "max_tokens": 8}
        response = raw.post(url + "/chat/completions", json=body, headers={"X-Session-Id": sid})
        return response.json()["choices"][0]["message"]["content"]

    episode(http_call, "warmup")
    http_s, raw_s = [], []
    for e in range(max(1, requests // turns)):
        raw_s += episode(raw_call, f"x{e}")
        http_s += episode(http_call, f"h{e}")

    # Sessions per second: whole sessions from several client threads at once.
    todo = list(range(sessions))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop()
            episode(http_call, f"p{i}")
            gateway.pop_session(f"p{i}")

    wall = _run_threads(worker, threads)
    failures = gateway.prefix_failures

    # The same through HTTP only, as an agent in its own process is trained: 32 sessions at
    # once, each fetched and deleted over HTTP (GET/DELETE /v1/sessions/{id}).
    fetch_todo = list(range(32))
    fetched: list[int] = []

    def http_worker() -> None:
        while True:
            with lock:
                if not fetch_todo:
                    return
                i = fetch_todo.pop()
            episode(raw_call, f"f{i}")
            body = raw.delete(f"{url}/sessions/f{i}").json()
            with lock:
                fetched.append(len(body["turns"]))

    http_wall = _run_threads(http_worker, 32)

    # 32 conversations at once under ONE API key and no session header: the gateway gives each
    # its own session (split by history) instead of queueing them into one.
    before = gateway.prefix_failures
    shared = openai.OpenAI(base_url=url, api_key="one-shared-key", max_retries=0)

    def shared_call(_sid: str, messages: list) -> str:
        response = shared.chat.completions.create(model="instant", messages=messages, max_tokens=8)
        return response.choices[0].message.content

    shared_todo = list(range(32))

    def shared_worker() -> None:
        while True:
            with lock:
                if not shared_todo:
                    return
                shared_todo.pop()
            episode(shared_call, "")

    shared_wall = _run_threads(shared_worker, 32)
    shared_sessions = sum(1 for s in gateway.session_ids() if s.startswith("key-"))
    shared_failures = gateway.prefix_failures - before
    gateway.close()
    raw.close()
    overhead = _median_ms(raw_s) - _median_ms(engine_s)
    return {
        "requests": len(http_s),
        "turns_per_session": turns,
        "engine_median_ms": round(_median_ms(engine_s), 4),
        "recorder_median_ms": round(_median_ms(recorder_s), 3),
        "http_median_ms": round(_median_ms(raw_s), 3),
        "openai_client_median_ms": round(_median_ms(http_s), 3),
        "overhead_median_ms": round(overhead, 3),
        "target_ms": TARGET_MS,
        "sessions": sessions,
        "client_threads": threads,
        "sessions_per_s": round(sessions / wall, 1),
        "requests_per_s": round(sessions * turns / wall, 1),
        "prefix_failures": failures,
        "http_fetch_sessions": len(fetched),
        "http_fetch_sessions_per_s": round(len(fetched) / http_wall, 1),
        "http_fetch_requests_per_s": round(len(fetched) * turns / http_wall, 1),
        "http_fetch_turns_recorded": sum(fetched),
        "shared_key_conversations": 32,
        "shared_key_sessions": shared_sessions,
        "shared_key_sessions_per_s": round(32 / shared_wall, 1),
        "shared_key_prefix_failures": shared_failures,
    }


def _run_threads(target, n: int) -> float:
    """Wall seconds of ``n`` threads running ``target`` to the end."""
    t0 = time.perf_counter()
    pool = [threading.Thread(target=target) for _ in range(n)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return time.perf_counter() - t0


def mini_swe_agent_turns_trained(
    episodes: int, max_new_tokens: int, max_turns: int = 4, task: str = "starter__tinystats-2"
) -> dict:
    """mini-swe-agent + SmolLM2 (sampling) through the gateway: recorded turns, and the turns
    trained with the first segment only (before) and with every segment (now)."""
    from types import SimpleNamespace

    from agents.models import load_model
    from algos.rollout.agent_programs import run_agent_rollouts
    from algos.rollout.scoring import Counters, segments, to_sample

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/ importable

    spec = SimpleNamespace(
        agent="examples.mini_swe_agent:make_agent",
        env="SWEStarter-v0",
        env_kwargs={"max_turns": max_turns, "command_timeout": 30},
        concurrency=1,
        episode_timeout_s=None,
        agent_kwargs={
            "params": SamplingParams(temperature=0.7, max_new_tokens=max_new_tokens),
            "max_context_tokens": 8192,
        },
    )
    t0 = time.perf_counter()
    trajs = run_agent_rollouts(spec, load_model("smollm2"), [task], episodes, 0)
    recorded = before = after = segs = 0
    for traj in trajs:
        parts = segments(traj)
        trained = [p for p in parts if to_sample(p, 1.0, 1 << 20, True, Counters(), "x")]
        recorded += len(traj.turns)
        before += len(parts[0].turns) if any(p is parts[0] for p in trained) else 0
        after += sum(len(p.turns) for p in trained)
        segs += len(parts)
    return {
        "task": task,
        "episodes": len(trajs),
        "max_new_tokens": max_new_tokens,
        "env_max_turns": max_turns,
        "finish_reasons": sorted(t.finish_reason for t in trajs),
        "recorded_turns": recorded,
        "segments": segs,
        "turns_trained_before": before,
        "turns_trained_now": after,
        "fraction_trained_before": round(before / max(recorded, 1), 3),
        "fraction_trained_now": round(after / max(recorded, 1), 3),
        "wall_s": round(time.perf_counter() - t0, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument(
        "--mini-swe-agent",
        type=int,
        default=0,
        metavar="EPISODES",
        help="measure the turns trained for mini-swe-agent + SmolLM2 instead",
    )
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument(
        "--agent-cmd",
        type=int,
        default=0,
        metavar="EPISODES",
        help="measure --agent-cmd's route and EPISODES harnesses at once instead "
        "(benchmarks/bench_agent_cmd.py)",
    )
    parser.add_argument("--backend", default="local", help="with --agent-cmd: local or docker")
    args = parser.parse_args()
    out = Path(__file__).parent / "results" / "bench_gateway.json"
    if args.agent_cmd:
        sys.path.insert(0, str(Path(__file__).parent))
        from bench_agent_cmd import measure as measure_cmd
        from bench_agent_cmd import print_table

        cmd = measure_cmd(args.agent_cmd, args.turns, args.backend)
        print_table(cmd)
        result = json.loads(out.read_text()) if out.exists() else {}
        out.parent.mkdir(exist_ok=True)
        key = f"agent_cmd_{args.backend}"
        out.write_text(json.dumps({**result, key: cmd}, indent=2) + "\n")
        return
    if args.mini_swe_agent:
        turns = mini_swe_agent_turns_trained(args.mini_swe_agent, args.max_new_tokens)
        print(json.dumps(turns, indent=2))
        result = json.loads(out.read_text()) if out.exists() else {}
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps({**result, "mini_swe_agent_smollm2": turns}, indent=2) + "\n")
        return
    from transformers import AutoTokenizer

    from agents.models.smollm2 import smollm2_tokenizer_path

    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_tokenizer_path()))
    result = measure(tokenizer, args.requests, args.turns, args.sessions, args.threads)
    for key, value in result.items():
        print(f"{key:>22}: {value}")
    verdict = "OK" if result["overhead_median_ms"] <= TARGET_MS else "ABOVE TARGET"
    print(f"overhead {result['overhead_median_ms']} ms median (target {TARGET_MS} ms): {verdict}")
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
