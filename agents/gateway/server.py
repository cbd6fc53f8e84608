"""The gateway's HTTP side: an OpenAI-compatible Starlette app served by uvicorn.

``/v1/chat/completions`` (``n=1``, text messages; ``temperature``, ``top_p``,
``max_tokens``/``max_completion_tokens``, ``seed`` and ``stop`` honoured; ``tools`` in the chat
template's form, see ``agents.gateway.tools``; ``stream`` as server-sent events), ``/v1/models``,
and the recorded sessions: ``GET /v1/sessions`` (ids and counts), ``GET /v1/sessions/{id}``
(the saved ``Trajectory`` form), ``DELETE /v1/sessions/{id}`` (returns it and forgets it). A streamed reply is generated and recorded whole before its first event goes out
(the engines return whole generations), so a client that leaves mid-stream loses nothing
already recorded; the events carry the content, then the tool calls, then the finish reason.
Errors come back in OpenAI's form, ``{"error": {"message", "type", "param", "code"}}`` with a
4xx status, so the ``openai`` client raises its usual exceptions. The session is the
``X-Session-Id`` header, else a hash of the API key; the key itself is never logged or stored.
"""

from __future__ import annotations

import json
import logging
import secrets
import socket
import threading
import time
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from agents.gateway.sessions import ContextTooLong, Reply, SessionRecorder, key_session_id
from agents.gateway.tools import ToolSupportError, normalize_tool_calls
from agents.protocols import Model, SamplingParams

log = logging.getLogger(__name__)

SESSION_HEADER = "x-session-id"
ROLES = ("system", "user", "assistant", "tool")
# Accepted only at their no-op values: anything else would change sampling without being honoured.
_NOOP_PARAMS: dict[str, tuple[Any, ...]] = {
    "frequency_penalty": (0, 0.0, None),
    "presence_penalty": (0, 0.0, None),
    "logit_bias": (None, {}),
    "tool_choice": (None, "none", "auto"),
    "functions": (None, []),
    "response_format": (None, {"type": "text"}),
    "logprobs": (None, False),
    "top_logprobs": (None, 0),
}
_IGNORED = {
    "model",
    "messages",
    "user",
    "metadata",
    "store",
    "parallel_tool_calls",
    "tools",
    "stream",
    "stream_options",
}
_SAMPLING = {"temperature", "top_p", "max_tokens", "max_completion_tokens", "seed", "stop", "n"}


class APIError(Exception):
    """An OpenAI-style error response."""

    def __init__(
        self, status: int, message: str, param: str | None = None, code: str | None = None
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type = "invalid_request_error" if status < 500 else "server_error"

    def response(self) -> JSONResponse:
        body = {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        return JSONResponse({"error": body}, status_code=self.status)


def _number(body: dict, name: str, low: float, high: float, default: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise APIError(400, f"{name} must be a number in [{low}, {high}], got {value!r}", name)
    return float(value)


def sampling_params(body: dict[str, Any], default_max_tokens: int) -> SamplingParams:
    """The request's sampling settings, or an ``APIError`` naming the bad field."""
    for name, allowed in _NOOP_PARAMS.items():
        if body.get(name) not in allowed:
            hint = " (the model decides: use 'auto')" if name == "tool_choice" else ""
            raise APIError(400, f"{name}={body[name]!r} is not supported{hint}", name)
    unknown = sorted(set(body) - set(_NOOP_PARAMS) - _IGNORED - _SAMPLING)
    if unknown:
        raise APIError(400, f"unsupported parameters {unknown}", unknown[0])
    if body.get("n", 1) != 1:
        raise APIError(400, f"n must be 1 (one sample per request), got {body['n']!r}", "n")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    max_tokens = default_max_tokens if max_tokens is None else max_tokens  # 0 is an error
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise APIError(
            400, f"max_tokens must be a positive integer, got {max_tokens!r}", "max_tokens"
        )
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise APIError(400, f"seed must be an integer, got {seed!r}", "seed")
    stop = body.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    if (
        not isinstance(stop, list)
        or not all(isinstance(s, str) and s for s in stop)
        or len(stop) > 4
    ):
        raise APIError(
            400, f"stop must be a string or up to 4 strings, got {body['stop']!r}", "stop"
        )
    top_p = _number(body, "top_p", 0.0, 1.0, 1.0)
    if top_p == 0:
        raise APIError(400, "top_p must be > 0", "top_p")
    return SamplingParams(
        temperature=_number(body, "temperature", 0.0, 2.0, 1.0),
        top_p=top_p,
        max_new_tokens=max_tokens,
        seed=seed,
        stop=stop,
    )


def _content(message: dict[str, Any], index: int) -> str:
    content = message.get("content")
    if content is None and message.get("role") == "assistant":
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        for p in content
    ):
        return "".join(p["text"] for p in content)
    raise APIError(400, f"messages[{index}].content must be text, got {content!r:.80}", "messages")


def parse_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise APIError(400, "messages must be a non-empty list of messages", "messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise APIError(400, f"messages[{i}] must have a role in {list(ROLES)}", "messages")
        if m.get("function_call"):
            raise APIError(400, f"messages[{i}]: use tool_calls, not function_call", "messages")
        if m.get("tool_calls"):
            try:
                normalize_tool_calls(m["tool_calls"], f"messages[{i}]")
            except ValueError as e:
                raise APIError(400, str(e), "messages") from None
        out.append({**m, "content": _content(m, i)})
    if out[-1]["role"] == "assistant":
        raise APIError(400, "the last message must not be an assistant message", "messages")
    return out


def parse_tools(body: dict[str, Any]) -> list[dict[str, Any]] | None:
    tools = body.get("tools")
    if not tools:
        return None
    ok = isinstance(tools, list) and all(
        isinstance(t, dict)
        and t.get("type") == "function"
        and isinstance(t.get("function"), dict)
        and isinstance(t["function"].get("name"), str)
        for t in tools
    )
    if not ok:
        raise APIError(
            400, 'tools must be a list of {"type": "function", "function": {"name": ...}}', "tools"
        )
    return tools


def _stream_flag(body: dict[str, Any]) -> bool:
    stream = body.get("stream")
    if stream not in (None, True, False):
        raise APIError(400, f"stream must be true or false, got {stream!r}", "stream")
    return bool(stream)


def _stream_events(head: dict, reply: Reply, finish: str, usage: dict | None):
    """Server-sent events in OpenAI's chunk form, ending with ``data: [DONE]``."""

    def event(delta: dict, finish_reason: str | None = None, **extra: Any) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
        chunk = {**head, "object": "chat.completion.chunk", "choices": [choice], **extra}
        return f"data: {json.dumps(chunk)}\n\n"

    yield event({"role": "assistant", "content": ""})
    if reply.content:
        yield event({"content": reply.content})
    for i, call in enumerate(reply.tool_calls):
        yield event({"tool_calls": [{"index": i, **call}]})
    yield event({}, finish)
    if usage is not None:
        chunk = {**head, "object": "chat.completion.chunk", "choices": [], "usage": usage}
        yield f"data: {json.dumps(chunk)}\n\n"
    yield "data: [DONE]\n\n"


def model_context_limit(model: Model) -> int | None:
    """Tokens the model attends to: its config's ``max_position_embeddings``, else the
    tokenizer's ``model_max_length`` when it is a real limit (tokenizers without one say 1e30)."""
    for holder in (getattr(model, "model", None), getattr(model, "module", None)):
        n = getattr(getattr(holder, "config", None), "max_position_embeddings", None)
        if isinstance(n, int) and n > 0:
            return n
    n = getattr(getattr(model, "tokenizer", None), "model_max_length", None)
    return n if isinstance(n, int) and 0 < n < 10**7 else None


class Gateway:
    """OpenAI-compatible server in front of a token ``Model`` that records each session.

    Args:
        model: a token backend (``TransformersModel``, ``VLLMModel``) with a chat template.
        name: the model id clients must ask for (default: ``model.name``).
        default_max_tokens: ``max_tokens`` when a request sets none.
        context_limit: prompt + ``max_tokens`` allowed per request, checked before the engine
            runs (a 400 naming it); default: the model's own (``model_context_limit``).
    """

    def __init__(
        self,
        model: Model,
        name: str | None = None,
        default_max_tokens: int = 1024,
        context_limit: int | None = None,
    ):
        if default_max_tokens < 1:
            raise ValueError(f"default_max_tokens must be >= 1, got {default_max_tokens!r}")
        limit = context_limit if context_limit is not None else model_context_limit(model)
        self.recorder = SessionRecorder(model, name, context_limit=limit)
        self.name = self.recorder.name
        self.default_max_tokens = default_max_tokens
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/v1/sessions", self._sessions, methods=["GET"]),
                Route("/v1/sessions/{sid:path}", self._one_session, methods=["GET", "DELETE"]),
            ]
        )
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.url: str | None = None

    # recorded sessions ---------------------------------------------------------------------
    def trajectory(self, session_id: str):
        return self.recorder.trajectory(session_id)

    def pop_session(self, session_id: str):
        return self.recorder.pop_session(session_id)

    def session_ids(self) -> list[str]:
        return self.recorder.session_ids()

    def open_session(self, session_id: str, **metadata: Any) -> None:
        """Start a session ahead of its first request; ``metadata`` reaches the engine."""
        self.recorder.open_session(session_id, **metadata)

    @property
    def prefix_failures(self) -> int:
        return self.recorder.prefix_failures

    # HTTP -----------------------------------------------------------------------------------
    async def _models(self, request: Request) -> JSONResponse:
        model = {"id": self.name, "object": "model", "created": 0, "owned_by": "swe-gym-rl"}
        return JSONResponse({"object": "list", "data": [model]})

    async def _sessions(self, request: Request) -> JSONResponse:
        data = []
        for sid in self.session_ids():
            try:
                traj = self.recorder.trajectory(sid)
            except KeyError:  # deleted meanwhile
                continue
            data.append(
                {
                    "id": sid,
                    "object": "session",
                    "turns": len(traj.turns),
                    "segments": len(traj.agent.get("segment_starts") or []),
                    "prefix_failures": traj.agent.get("prefix_failures", 0),
                }
            )
        return JSONResponse({"object": "list", "data": data})

    async def _one_session(self, request: Request) -> JSONResponse:
        """The session's Trajectory in its saved form (``Trajectory.from_dict`` reads it);
        DELETE also removes it."""
        sid = request.path_params["sid"]
        try:
            get = self.pop_session if request.method == "DELETE" else self.trajectory
            traj = await run_in_threadpool(get, sid)
        except KeyError:
            return APIError(404, f"no session {sid!r}", "session", "session_not_found").response()
        return JSONResponse(traj.to_dict())

    def _session_id(self, request: Request, messages: list[dict[str, Any]]) -> str:
        """The ``X-Session-Id`` header names one session (its requests are served one at a
        time, in order). Without it the API key names a family of sessions: each concurrent
        conversation under the key gets its own (``SessionRecorder.route``)."""
        sid = request.headers.get(SESSION_HEADER)
        if sid:
            return sid
        auth = request.headers.get("authorization", "")
        key = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        if not key:
            raise APIError(
                401, f"send an {SESSION_HEADER!r} header or an API key to name the session"
            )
        return self.recorder.route(key_session_id(key), messages)

    async def _chat(self, request: Request) -> JSONResponse | StreamingResponse:
        try:
            try:
                body = json.loads(await request.body())
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise APIError(400, f"request body is not valid JSON: {e}") from None
            if not isinstance(body, dict):
                raise APIError(400, "request body must be a JSON object")
            if body.get("model") != self.name:
                raise APIError(
                    404,
                    f"model {body.get('model')!r} is not served here; use {self.name!r}",
                    "model",
                    "model_not_found",
                )
            messages = parse_messages(body)
            params = sampling_params(body, self.default_max_tokens)
            tools = parse_tools(body)
            stream = _stream_flag(body)
            sid = self._session_id(request, messages)
            try:
                reply = await run_in_threadpool(
                    self.recorder.complete_turn, sid, messages, params, tools
                )
            except ToolSupportError as e:
                raise APIError(400, str(e), "tools", "tools_not_supported") from None
            except ContextTooLong as e:
                raise APIError(400, str(e), "messages", "context_length_exceeded") from None
        except APIError as e:
            return e.response()
        except Exception:
            log.exception("gateway request failed")  # the traceback, never the headers
            return APIError(500, "the rollout engine failed; see the gateway's log").response()
        gen = reply.generation
        usage = {k: gen.usage[k] for k in ("prompt_tokens", "completion_tokens")}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        head = {
            "id": "chatcmpl-" + secrets.token_hex(12),
            "created": int(time.time()),
            "model": self.name,
        }
        finish = "tool_calls" if reply.tool_calls else gen.finish_reason
        if stream:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            events = _stream_events(head, reply, finish, usage if include_usage else None)
            return StreamingResponse(events, media_type="text/event-stream")
        message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
        if reply.tool_calls:
            message["tool_calls"] = reply.tool_calls
        else:
            message["content"] = reply.content
        choice = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
        return JSONResponse(
            {**head, "object": "chat.completion", "choices": [choice], "usage": usage}
        )

    # serving ----------------------------------------------------------------------------------
    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve in a background thread; returns the base URL (``http://host:port/v1``).
        ``port=0`` picks a free port."""
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="gateway", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"gateway server did not start on {host}:{port}")
            time.sleep(0.01)
        self.url = f"http://{host}:{sock.getsockname()[1]}/v1"
        return self.url

    def close(self) -> None:
        """Stop serving (idempotent)."""
        if self._server is not None:
            self._server.should_exit = True
            if self._thread is not None:
                self._thread.join(timeout=10)
        self._server = self._thread = None

    def __enter__(self) -> Gateway:
        if self.url is None:
            self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
