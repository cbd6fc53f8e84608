"""OpenAIModel against a small local HTTP server (http.server on 127.0.0.1) that misbehaves."""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agents.models.openai import EndpointError, OpenAIModel
from agents.protocols import Conversation, Model, SamplingParams

SECRET = "sk-test-DO-NOT-LEAK-4f9a2c"
MESSAGES = [{"role": "user", "content": "hi"}]
REPLY = {
    "choices": [{"message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1},
}

# A behaviour answers (status, headers, body) or None to hang without answering.
Behaviour = Callable[[int, dict], "tuple[int, dict, object] | None"]


class FakeServer:
    """Records each request (path, headers, JSON body) and answers with ``behaviour``."""

    def __init__(self, behaviour: Behaviour):
        self.behaviour = behaviour
        self.requests: list[dict] = []
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                server.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": body}
                )
                answer = server.behaviour(len(server.requests), body)
                if answer is None:  # never answer (until the test ends)
                    server.release.wait(30)
                    return
                status, headers, payload = answer
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # keep pytest output clean
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[[Behaviour], FakeServer]]:
    servers: list[FakeServer] = []

    def start(behaviour: Behaviour) -> FakeServer:
        servers.append(FakeServer(behaviour))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def fast_model(url: str, **kw) -> OpenAIModel:
    kw.setdefault("timeout_s", 5.0)
    kw.setdefault("backoff_s", (0.01, 0.05))
    return OpenAIModel(url, "m", **kw)


def conv() -> Conversation:
    return Conversation(messages=list(MESSAGES))


def test_sends_messages_and_params(serve, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    server = serve(lambda n, body: (200, {}, REPLY))
    model = fast_model(server.url)
    assert isinstance(model, Model)
    params = SamplingParams(temperature=0.5, top_p=0.9, top_k=5, max_new_tokens=7, seed=3)
    gen = model.generate(Conversation(messages=list(MESSAGES), token_ids=[1, 2]), params)
    assert (gen.text, gen.finish_reason, gen.token_exact) == ("hello", "stop", False)
    assert gen.token_ids == [] and gen.logprobs == []
    request = server.requests[0]
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == f"Bearer {SECRET}"  # the key is used...
    body = request["body"]
    assert body["messages"] == MESSAGES and body["model"] == "m"
    assert (body["temperature"], body["top_p"], body["top_k"]) == (0.5, 0.9, 5)
    assert (body["max_tokens"], body["seed"]) == (7, 3)


def test_key_never_in_repr_logs_errors_or_generation(serve, monkeypatch, caplog):
    """...but never shows up anywhere a user or a trajectory file could see it."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    answers = {1: (500, {}, {"error": "boom"}), 2: (200, {}, REPLY), 3: (401, {}, {"error": "no"})}
    server = serve(lambda n, body: answers[n])
    caplog.set_level(logging.DEBUG)
    model = fast_model(server.url)
    gen = model.generate(conv(), SamplingParams())
    with pytest.raises(EndpointError) as err:
        model.generate(conv(), SamplingParams())
    assert "OPENAI_API_KEY" in str(err.value)  # says which variable to check
    seen = [repr(model), str(vars(model)), json.dumps(dataclasses.asdict(gen)), str(err.value)]
    seen += [record.getMessage() for record in caplog.records]
    assert caplog.records  # the retry was logged
    assert not [text for text in seen if SECRET in text]


def test_500_twice_then_success_is_retried(serve):
    server = serve(lambda n, body: (500, {}, {"error": "busy"}) if n <= 2 else (200, {}, REPLY))
    gen = fast_model(server.url, max_retries=3).generate(conv(), SamplingParams())
    assert gen.text == "hello"
    assert len(server.requests) == 3


def test_retries_are_bounded(serve):
    server = serve(lambda n, body: (503, {}, {"error": "down"}))
    with pytest.raises(EndpointError, match=r"failed after 3 attempts.*HTTP 503"):
        fast_model(server.url, max_retries=2).generate(conv(), SamplingParams())
    assert len(server.requests) == 3


def test_a_silent_endpoint_times_out_with_a_clear_error(serve):
    server = serve(lambda n, body: None)
    started = time.monotonic()
    with pytest.raises(EndpointError, match=r"failed after 3 attempts.*ReadTimeout"):
        fast_model(server.url, timeout_s=0.3, max_retries=2).generate(conv(), SamplingParams())
    # 3 x 0.3 s plus short backoff; the point is that it does not hang for the 30 s the
    # server would wait.
    assert time.monotonic() - started < 15
    assert len(server.requests) == 3


def test_429_retry_after_is_honoured(serve):
    server = serve(
        lambda n, body: (
            (429, {"Retry-After": "1"}, {"error": "slow down"}) if n == 1 else (200, {}, REPLY)
        )
    )
    started = time.monotonic()
    gen = fast_model(server.url).generate(conv(), SamplingParams())
    assert gen.text == "hello" and len(server.requests) == 2
    assert time.monotonic() - started >= 0.9  # waited as told, not the 0.01 s backoff


def test_client_errors_are_not_retried(serve):
    server = serve(lambda n, body: (400, {}, {"error": "bad max_tokens"}))
    with pytest.raises(EndpointError, match="HTTP 400.*bad max_tokens"):
        fast_model(server.url).generate(conv(), SamplingParams())
    assert len(server.requests) == 1


def test_malformed_answers_are_clear_errors(serve):
    answers = {1: (200, {}, b"<html>proxy</html>"), 2: (200, {}, {"choices": []})}
    server = serve(lambda n, body: answers[n])
    model = fast_model(server.url)
    with pytest.raises(EndpointError, match="not JSON"):
        model.generate(conv(), SamplingParams())
    with pytest.raises(EndpointError, match="no choices"):
        model.generate(conv(), SamplingParams())


def test_token_mode_uses_completions_with_prompt_ids(serve):
    answer = {
        "choices": [
            {
                "text": "ok",
                "token_ids": [5, 2],
                "logprobs": {"token_logprobs": [-0.5, -0.1]},
                "finish_reason": "stop",
            }
        ]
    }
    server = serve(lambda n, body: (200, {}, answer))
    model = fast_model(server.url, token_ids=True)
    gen = model.generate(
        Conversation(messages=list(MESSAGES), token_ids=[1, 9, 4]), SamplingParams()
    )
    body = server.requests[0]["body"]
    assert server.requests[0]["path"] == "/v1/completions"
    assert body["prompt"] == [1, 9, 4] and body["return_token_ids"] is True
    assert "messages" not in body
    assert (gen.token_ids, gen.logprobs, gen.token_exact) == ([5, 2], [-0.5, -0.1], True)
