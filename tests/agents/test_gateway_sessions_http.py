"""The gateway as a service: sessions over HTTP, its guards, and ``python -m agents.gateway``.

Against the real server on localhost: a tiny random transformers model for the in-process
cases, the command with a scripted model (SmolLM2's tokenizer, no weights) for the CLI case.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import httpx
import pytest

openai = pytest.importorskip("openai")

from agents.gateway import Gateway  # noqa: E402
from agents.trajectory import Trajectory  # noqa: E402


@pytest.fixture(scope="module")
def engine(tiny_engine):
    return tiny_engine


@pytest.fixture
def gateway(engine):
    g = Gateway(engine, default_max_tokens=4, context_limit=200)
    g.start()
    yield g
    g.close()


def _client(g, key="sk-shared", session=None):
    headers = {"X-Session-Id": session} if session else {}
    return openai.OpenAI(base_url=g.url, api_key=key, default_headers=headers, max_retries=0)


def _chat(c, messages, **kw):
    kw.setdefault("seed", 1)
    return c.chat.completions.create(model="tiny", messages=messages, max_tokens=4, **kw)


def test_sessions_are_listed_fetched_as_trajectories_and_deleted(gateway):
    c = _client(gateway, session="ep-7")
    msgs = [{"role": "user", "content": "hello"}]
    reply = _chat(c, msgs).choices[0].message.content
    _chat(c, [*msgs, {"role": "assistant", "content": reply}, {"role": "user", "content": "more"}])
    base = gateway.url
    listed = httpx.get(f"{base}/sessions").json()["data"]
    assert listed == [
        {"id": "ep-7", "object": "session", "turns": 2, "segments": 1, "prefix_failures": 0}
    ]
    fetched = Trajectory.from_dict(httpx.get(f"{base}/sessions/ep-7").json())
    assert fetched.num_turns == 2 and fetched.token_exact
    assert fetched.to_dict() == gateway.trajectory("ep-7").to_dict()
    deleted = httpx.delete(f"{base}/sessions/ep-7")
    assert Trajectory.from_dict(deleted.json()).num_turns == 2
    assert gateway.session_ids() == []
    missing = httpx.get(f"{base}/sessions/ep-7")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "session_not_found"


def test_a_prompt_past_the_context_is_refused_before_the_engine(gateway, engine):
    c = _client(gateway, session="long")
    with pytest.raises(openai.BadRequestError) as e:
        _chat(c, [{"role": "user", "content": "word " * 400}])
    assert e.value.code == "context_length_exceeded" and "200 tokens" in e.value.message
    assert gateway.session_ids() == []  # nothing recorded, not even an empty session
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        c.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "x"}], max_tokens=0
        )


def test_concurrent_conversations_under_one_key_become_separate_sessions(gateway):
    """Without a session header the key names a family: 8 conversations at once, 3 turns each,
    all starting alike, are 8 sessions of 3 turns with no prefix failure (not one session of 24
    serialised turns breaking each other's history)."""
    errors: list[BaseException] = []

    def conversation(i: int) -> None:
        try:
            c = _client(gateway)
            msgs = [{"role": "user", "content": "same start"}]
            for turn in range(3):
                reply = _chat(c, msgs, seed=i).choices[0].message.content
                msgs += [
                    {"role": "assistant", "content": reply},
                    {"role": "user", "content": f"conversation {i} turn {turn}"},
                ]
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=conversation, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    ids = gateway.session_ids()
    assert len(ids) == 8 and gateway.prefix_failures == 0
    assert sorted(gateway.trajectory(s).num_turns for s in ids) == [3] * 8


def test_the_gateway_command_serves_and_records(tmp_path):
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(["ls -la", "cat README.md"]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "agents.gateway", "--model", f"scripted:{script}", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("gateway: http://127.0.0.1:"), (line, proc.stderr.read())  # type: ignore[union-attr]
        url = line.split()[1]
        name = httpx.get(f"{url}/models").json()["data"][0]["id"]
        c = openai.OpenAI(base_url=url, api_key="k", max_retries=0)
        out = c.chat.completions.create(model=name, messages=[{"role": "user", "content": "go"}])
        assert out.choices[0].message.content == "ls -la"
        (sid,) = [s["id"] for s in httpx.get(f"{url}/sessions").json()["data"]]
        traj = Trajectory.from_dict(httpx.get(f"{url}/sessions/{sid}").json())
        assert traj.turns[0].action == "ls -la" and traj.token_exact
    finally:
        proc.terminate()
        t0 = time.monotonic()
        assert proc.wait(timeout=30) == 0 and time.monotonic() - t0 < 30


def test_a_bad_model_spec_fails_at_once_with_the_accepted_forms():
    p = subprocess.run(
        [sys.executable, "-m", "agents.gateway", "--model", "openai:http://x/v1#m"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and "scripted:FILE" in p.stderr and "Traceback" not in p.stderr
