"""The gateway keeps serving: reads never wait for a generation, malformed fields are 4xx errors
that record nothing, the body cap holds before parsing, and SIGTERM / Ctrl-C answer the clients in
flight and exit 0.

Against the real server on localhost. The engine is a canned one (SmolLM2's tokenizer, no weights)
whose generation blocks on an event the test holds, so nothing here depends on how fast the
machine is; the batching case uses the tiny random transformers model, whose batcher is what a bad
seed used to break.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import httpx
import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("starlette")

from agents.gateway import Gateway, Limits  # noqa: E402
from agents.protocols import Generation  # noqa: E402

KEY = {"Authorization": "Bearer sk-serving"}


class _Held:
    """A canned token engine whose ``generate`` waits until the test sets ``release``."""

    name = "held"

    def __init__(self, tokenizer, inner=None, released: bool = True):
        self.tokenizer, self.inner = tokenizer, inner
        ids = tokenizer.encode("ls -la", add_special_tokens=False) + [tokenizer.eos_token_id]
        self.gen = Generation("ls -la", ids, [-0.5] * len(ids), "stop")
        self.entered, self.release = threading.Event(), threading.Event()
        if released:
            self.release.set()
        self.calls: list = []

    def generate(self, conversation, params):
        self.calls.append(params)
        self.entered.set()
        assert self.release.wait(60), "the test never released the generation"
        return self.inner.generate(conversation, params) if self.inner else self.gen


@pytest.fixture
def serve():
    """``serve(engine, **gateway_kw)``: a started gateway; closed after."""
    gateways = []

    def make(engine, **kw):
        g = Gateway(engine, **kw)
        g.start()
        gateways.append(g)
        return g

    yield make
    for g in gateways:
        g.close()


def _post(g, body, session="s", **kw):
    content = json.dumps(body) if isinstance(body, dict) else body  # else text, bytes or chunks
    headers = {**KEY, "Content-Type": "application/json", "X-Session-Id": session}
    return httpx.post(g.url + "/chat/completions", content=content, headers=headers, **kw)


def _body(**extra):
    return {"model": "held", "messages": [{"role": "user", "content": "go"}], **extra}


def test_models_and_sessions_answer_while_a_generation_is_held(serve, smollm2_tokenizer):
    engine = _Held(smollm2_tokenizer, released=False)
    g = serve(engine)
    answer: list[httpx.Response] = []
    t = threading.Thread(target=lambda: answer.append(_post(g, _body(), "slow", timeout=60)))
    t.start()
    try:
        assert engine.entered.wait(30)
        # The generation cannot end before release is set: any answer at all proves that these
        # reads did not wait for it (they used to block the whole server until it ended).
        models = httpx.get(g.url + "/models", timeout=10)
        sessions = httpx.get(g.url + "/sessions", timeout=10)
        refused = _post(g, _body(seed=2**64), "slow", timeout=10)  # same session, refused at once
    finally:
        engine.release.set()
        t.join(60)
    assert models.status_code == 200 and models.json()["data"][0]["id"] == "held"
    assert sessions.status_code == 200
    assert [s["turns"] for s in sessions.json()["data"] if s["id"] == "slow"] in ([], [0])
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "seed"
    assert answer[0].status_code == 200, answer[0].text
    listed = httpx.get(g.url + "/sessions").json()["data"]
    assert [(s["id"], s["turns"]) for s in listed] == [("slow", 1)]
    assert len(engine.calls) == 1


DEEP = {"type": "object", "properties": {}}
for _ in range(80):
    DEEP = {"type": "object", "properties": {"x": DEEP}}
TOOL_DEEP = [{"type": "function", "function": {"name": "f", "parameters": DEEP}}]


@pytest.mark.parametrize(
    "extra, param",
    [
        ({"seed": 2**64}, "seed"),
        ({"seed": -(2**63) - 1}, "seed"),
        ({"seed": 1.5}, "seed"),
        ({"stream": True, "stream_options": "x"}, "stream_options"),
        ({"stream": True, "stream_options": {"include_usage": "yes"}}, "stream_options"),
        ({"stream_options": {"nope": True}}, "stream_options"),
        ({"max_tokens": 10**12}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"max_completion_tokens": 2.0}, "max_completion_tokens"),
        ({"n": 0}, "n"),
        ({"n": True}, "n"),
        ({"temperature": float("nan")}, "temperature"),
        ({"stop": ["x" * 300]}, "stop"),
        ({"user": 5}, "user"),
        ({"metadata": "m"}, "metadata"),
        ({"parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]}, "tools"),
        ({"tools": TOOL_DEEP}, "tools"),
        ({"messages": [{"role": "user", "content": "x", "name": 7}]}, "messages"),
        ({"messages": [{"role": "user", "content": "x", "extra": DEEP}]}, "messages"),
        ({"messages": [{"role": "user", "content": "x"}] * 5000}, "messages"),
    ],
)
def test_a_malformed_field_is_a_4xx_naming_it_and_records_nothing(
    serve, smollm2_tokenizer, extra, param
):
    engine = _Held(smollm2_tokenizer)
    g = serve(engine, context_limit=400, default_max_tokens=8)
    assert _post(g, _body()).status_code == 200  # session "s" holds one turn
    before = g.trajectory("s").to_dict()
    r = _post(g, {**_body(), **extra})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error", error
    assert len(error["message"]) > 20  # says what is accepted, not only that it is wrong
    assert g.trajectory("s").to_dict() == before and g.session_ids() == ["s"]
    assert len(engine.calls) == 1  # the engine never saw the refused request


def test_nesting_past_what_the_parser_takes_is_a_400_naming_the_field(serve, smollm2_tokenizer):
    engine = _Held(smollm2_tokenizer)
    g = serve(engine)
    deep = '{"model": "held", "messages": [{"role": "user", "content": "x", "extra": '
    r = _post(g, deep + "[" * 100_000 + "]" * 100_000 + "}]}")
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    assert "64" in r.json()["error"]["message"]
    for bad in ('{"model": "held", "seed": 1' + "0" * 5000 + "}", "{not json", "[1, 2]"):
        r = _post(g, bad)
        assert r.status_code == 400 and r.json()["error"]["message"], bad
    assert g.session_ids() == [] and engine.calls == []


def test_a_message_longer_than_the_context_can_hold_is_refused_before_tokenizing(
    serve, smollm2_tokenizer
):
    engine = _Held(smollm2_tokenizer)
    g = serve(engine, context_limit=100)
    longest = g.recorder.max_token_chars  # no token covers more characters than this
    r = _post(g, _body(messages=[{"role": "user", "content": "a" * (100 * longest + 1)}]))
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "messages"
    assert g.session_ids() == [] and engine.calls == []


def test_a_refused_request_never_fails_the_one_batched_with_it(serve, tiny_engine):
    """Two requests reach the batching engine together: a bad seed used to reach it and fail
    the whole batch (the good request got a 500 as well)."""
    arrived, both = [], threading.Event()

    class _Together(_Held):
        def generate(self, conversation, params):
            arrived.append(params.seed)
            if len(arrived) == 2:
                both.set()
            both.wait(2)  # give a second request the chance to join the batch
            return tiny_engine.generate(conversation, params)

    g = serve(_Together(tiny_engine.tokenizer), default_max_tokens=4)
    out: dict[str, httpx.Response] = {}

    def send(name, seed):
        out[name] = _post(g, _body(model="held", seed=seed), name, timeout=60)

    threads = [threading.Thread(target=send, args=a) for a in (("good", 3), ("bad", 2**64))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert out["bad"].status_code == 400 and out["bad"].json()["error"]["param"] == "seed"
    assert out["good"].status_code == 200, out["good"].text
    assert arrived == [3] and g.session_ids() == ["good"]


def _chunks(total: int, size: int = 1 << 16):
    chunk = b" " * size
    for _ in range(total // size):
        yield chunk


def test_a_body_over_the_cap_is_a_413_read_no_further_than_the_cap(serve, smollm2_tokenizer):
    engine = _Held(smollm2_tokenizer)
    g = serve(engine)
    cap = Limits().max_body_bytes
    # Declared too long: refused from Content-Length alone.
    r = _post(g, b"{" + b" " * (cap + 1) + b"}")
    assert r.status_code == 413, r.text
    assert str(cap) in r.json()["error"]["message"]
    # Chunked (no Content-Length): refused while reading, the body never held whole.
    total = 16 * cap
    tracemalloc.start()
    try:
        r = _post(g, _chunks(total), timeout=60)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert r.status_code == 413, r.text
    assert peak < 2 * cap < total  # the server kept at most about one cap's worth
    assert _post(g, _body()).status_code == 200  # and it goes on serving
    assert g.session_ids() == ["s"] and len(engine.calls) == 1


def test_the_body_cap_is_configurable(serve, smollm2_tokenizer):
    g = serve(_Held(smollm2_tokenizer), limits=Limits(max_body_bytes=1000))
    r = _post(g, _body(messages=[{"role": "user", "content": "x" * 2000}]))
    assert r.status_code == 413 and "1000" in r.json()["error"]["message"]
    with pytest.raises(ValueError, match="max_body_bytes"):
        Limits(max_body_bytes=0)


def test_close_past_the_grace_answers_503_and_records_nothing(smollm2_tokenizer):
    engine = _Held(smollm2_tokenizer, released=False)
    g = Gateway(engine, shutdown_grace_s=0.2)
    g.start()
    answer: list[httpx.Response] = []
    t = threading.Thread(target=lambda: answer.append(_post(g, _body(), "late", timeout=60)))
    t.start()
    assert engine.entered.wait(30)
    g.close()
    t.join(30)
    assert answer[0].status_code == 503 and answer[0].headers["x-should-retry"] == "false"
    assert answer[0].json()["error"]["code"] == "gateway_shutting_down"
    assert g.running_generations == 1  # the engine call itself cannot be interrupted
    engine.release.set()
    deadline = time.monotonic() + 30
    while g.running_generations and time.monotonic() < deadline:
        time.sleep(0.01)
    assert g.running_generations == 0 and g.session_ids() == []  # its reply was not recorded


# -- the command under SIGTERM / Ctrl-C ------------------------------------------------------------
_HELD_CLI = """
import pathlib, sys, time
import agents.gateway.__main__ as cli

gate, build = pathlib.Path(sys.argv[1]), cli.build_model

class Held:
    def __init__(self, inner):
        self.inner, self.name, self.tokenizer = inner, inner.name, inner.tokenizer
    def generate(self, conversation, params):
        (gate / "started").touch()
        while not (gate / "release").exists():  # until the test releases it
            time.sleep(0.01)
        return self.inner.generate(conversation, params)

cli.build_model = lambda spec, dtype=None: Held(build(spec, dtype))
sys.exit(cli.main(sys.argv[2:]))
"""


def _held_cli(tmp_path: Path, *args: str):
    (tmp_path / "replies.json").write_text(json.dumps(["ls -la"]))
    (tmp_path / "held.py").write_text(_HELD_CLI)
    cmd = [sys.executable, str(tmp_path / "held.py"), str(tmp_path)]
    cmd += ["--model", f"scripted:{tmp_path / 'replies.json'}", "--port", "0", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()  # type: ignore[union-attr]
    assert line.startswith("gateway: http://"), (line, proc.stderr.read())  # type: ignore[union-attr]
    url = line.split()[1]
    name = httpx.get(f"{url}/models").json()["data"][0]["id"]
    answer: list = []

    def ask() -> None:
        body = {"model": name, "messages": [{"role": "user", "content": "go"}]}
        try:
            answer.append(httpx.post(f"{url}/chat/completions", json=body, headers=KEY, timeout=60))
        except httpx.HTTPError as e:
            answer.append(e)

    client = threading.Thread(target=ask)
    client.start()
    deadline = time.monotonic() + 30
    while not (tmp_path / "started").exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()  # type: ignore[union-attr]
        time.sleep(0.01)
    return proc, url, client, answer


def _refusing(url: str) -> bool:
    try:
        httpx.get(f"{url}/models", timeout=5)
    except httpx.ConnectError:
        return True
    return False


def test_sigterm_lets_the_running_generation_finish_and_exits_0(tmp_path):
    proc, url, client, answer = _held_cli(tmp_path)
    try:
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        while not _refusing(url):  # shutting down: no new connections, the generation held
            assert time.monotonic() < deadline
            time.sleep(0.05)
        (tmp_path / "release").touch()
        client.join(60)
        assert isinstance(answer[0], httpx.Response) and answer[0].status_code == 200, answer
        assert answer[0].json()["choices"][0]["message"]["content"] == "ls -la"
        assert proc.wait(timeout=30) == 0, proc.stderr.read()  # type: ignore[union-attr]
    finally:
        if proc.poll() is None:
            proc.kill()


def test_ctrl_c_past_the_grace_answers_a_clear_error_and_exits_0(tmp_path):
    proc, _, client, answer = _held_cli(tmp_path, "--shutdown-grace", "0.5")
    try:
        proc.send_signal(signal.SIGINT)  # the generation is never released
        client.join(60)
        assert isinstance(answer[0], httpx.Response), answer
        assert answer[0].status_code == 503 and answer[0].headers["x-should-retry"] == "false"
        error = answer[0].json()["error"]
        assert error["code"] == "gateway_shutting_down" and "not recorded" in error["message"]
        assert proc.wait(timeout=30) == 0, proc.stderr.read()  # type: ignore[union-attr]
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
