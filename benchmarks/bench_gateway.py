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
"""

from __future__ import annotations

import argparse
import json
import statistics
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--threads", type=int, default=16)
    args = parser.parse_args()
    from transformers import AutoTokenizer

    from agents.models.smollm2 import smollm2_tokenizer_path

    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_tokenizer_path()))
    result = measure(tokenizer, args.requests, args.turns, args.sessions, args.threads)
    for key, value in result.items():
        print(f"{key:>22}: {value}")
    verdict = "OK" if result["overhead_median_ms"] <= TARGET_MS else "ABOVE TARGET"
    print(f"overhead {result['overhead_median_ms']} ms median (target {TARGET_MS} ms): {verdict}")
    out = Path(__file__).parent / "results" / "bench_gateway.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
