"""The gateway's HTTP side: an OpenAI-compatible Starlette app served by uvicorn.

``/v1/chat/completions`` (``n=1``, text messages; ``temperature``, ``top_p``,
``max_tokens``/``max_completion_tokens``, ``seed`` and ``stop`` honoured; ``tools`` in the chat
template's form, see ``agents.gateway.tools``; ``stream`` as server-sent events), ``/v1/models``,
and the recorded sessions: ``GET /v1/sessions`` (ids and counts), ``GET /v1/sessions/{id}``
(the saved ``Trajectory`` form), ``DELETE /v1/sessions/{id}`` (returns it and forgets it).
A streamed reply is generated and recorded whole before its first event goes out (the engines
return whole generations), so a client that leaves mid-stream loses nothing already recorded;
the events carry the content, then the tool calls, then the finish reason.

Errors come back in OpenAI's form, ``{"error": {"message", "type", "param", "code"}}`` with a
4xx status, so the ``openai`` client raises its usual exceptions; what is accepted, and the
limits on a request's size, are in ``agents.gateway.validation``. A request is checked whole
before the engine runs, so a refused one records nothing. The session is the ``X-Session-Id``
header, else a hash of the API key; the key itself is never logged or stored.

Generations run on threads of their own; the event loop never waits for one, so
``/v1/models`` and ``/v1/sessions`` (counts as of each session's last recorded turn) answer
while the engine works. :meth:`Gateway.close` is uvicorn's graceful shutdown: no new
connections, running requests get ``shutdown_grace_s`` to finish; past it each gets a 503
``gateway_shutting_down`` (not retried by the ``openai`` client) and its turn is not recorded.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from agents.gateway.sessions import (
    ContextTooLong,
    Reply,
    SessionRecorder,
    TurnCancelled,
    key_session_id,
)
from agents.gateway.tools import ToolSupportError
from agents.gateway.validation import (
    APIError,
    Limits,
    check_prompt_chars,
    parse_json,
    parse_messages,
    parse_tools,
    read_body,
    sampling_params,
    stream_flags,
)
from agents.protocols import Model, SamplingParams

log = logging.getLogger(__name__)

SESSION_HEADER = "x-session-id"
# Engine calls wait on threads of their own, so reads (run_in_threadpool's 40 threads) never
# queue behind generations; more requests than this wait for a free one.
ENGINE_THREADS = 256


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


@dataclass
class _Chat:
    """A chat request checked whole, before any session is touched."""

    messages: list[dict[str, Any]]
    params: SamplingParams
    tools: list[dict[str, Any]] | None
    stream: bool
    include_usage: bool


class Gateway:
    """OpenAI-compatible server in front of a token ``Model`` that records each session.

    Args:
        model: a token backend (``TransformersModel``, ``VLLMModel``) with a chat template.
        name: the model id clients must ask for (default: ``model.name``).
        default_max_tokens: ``max_tokens`` when a request sets none.
        context_limit: prompt + ``max_tokens`` allowed per request, checked before the engine
            runs (a 400 naming it); default: the model's own (``model_context_limit``).
        limits: what one request may ask (``agents.gateway.validation.Limits``).
        shutdown_grace_s: how long :meth:`close` lets running requests finish.
    """

    def __init__(
        self,
        model: Model,
        name: str | None = None,
        default_max_tokens: int = 1024,
        context_limit: int | None = None,
        limits: Limits | None = None,
        shutdown_grace_s: float = 5.0,
    ):
        if default_max_tokens < 1:
            raise ValueError(f"default_max_tokens must be >= 1, got {default_max_tokens!r}")
        if not shutdown_grace_s >= 0:
            raise ValueError(f"shutdown_grace_s must be >= 0 seconds, got {shutdown_grace_s!r}")
        limit = context_limit if context_limit is not None else model_context_limit(model)
        self.recorder = SessionRecorder(model, name, context_limit=limit)
        self.name = self.recorder.name
        self.default_max_tokens = default_max_tokens
        self.limits = limits or Limits()
        self.shutdown_grace_s = shutdown_grace_s
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
        self._slots: anyio.CapacityLimiter | None = None  # made on the server's loop
        self._running = 0  # engine calls in flight (also after a shutdown gave up on them)
        self._running_lock = threading.Lock()
        self._closing = False
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

    @property
    def running_generations(self) -> int:
        """Engine calls not yet returned, including those a shutdown answered with a 503."""
        return self._running

    # HTTP -----------------------------------------------------------------------------------
    async def _models(self, request: Request) -> JSONResponse:
        model = {"id": self.name, "object": "model", "created": 0, "owned_by": "swe-gym-rl"}
        return JSONResponse({"object": "list", "data": [model]})

    async def _sessions(self, request: Request) -> JSONResponse:
        data = [{**s, "object": "session"} for s in self.recorder.summaries()]
        return JSONResponse({"object": "list", "data": data})

    async def _one_session(self, request: Request) -> JSONResponse:
        """The session's Trajectory in its saved form (``Trajectory.from_dict`` reads it);
        DELETE also removes it. Waits for a turn in flight in that session (off the loop)."""
        sid = request.path_params["sid"]
        try:
            get = self.pop_session if request.method == "DELETE" else self.trajectory
            traj = await run_in_threadpool(get, sid)
        except KeyError:
            return APIError(404, f"no session {sid!r}", "session", "session_not_found").response()
        return JSONResponse(traj.to_dict())

    def _session_key(self, request: Request) -> tuple[str | None, str]:
        """``(header_id, "")`` when the ``X-Session-Id`` header names one session (its requests
        are served one at a time, in order); else ``(None, family)``: the API key names a family
        of sessions, each concurrent conversation under it gets its own (``route``)."""
        sid = request.headers.get(SESSION_HEADER)
        if sid:
            return sid, ""
        auth = request.headers.get("authorization", "")
        key = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        if not key:
            raise APIError(
                401, f"send an {SESSION_HEADER!r} header or an API key to name the session"
            )
        return None, key_session_id(key)

    def _check(self, body: dict[str, Any]) -> _Chat:
        if body.get("model") != self.name:
            raise APIError(
                404,
                f"model {body.get('model')!r:.80} is not served here; use {self.name!r}",
                "model",
                "model_not_found",
            )
        limit = self.recorder.context_limit
        messages = parse_messages(body, self.limits.max_messages)
        params = sampling_params(body, self.default_max_tokens, self.limits.max_tokens or limit)
        tools = parse_tools(body)
        stream, include_usage = stream_flags(body)
        check_prompt_chars(messages, self.recorder.max_token_chars, limit)
        return _Chat(messages, params, tools, stream, include_usage)

    async def _generate(self, request: Request, chat: _Chat) -> Reply:
        header_id, family = self._session_key(request)
        cancelled = threading.Event()

        def turn() -> Reply:
            with self._running_lock:
                self._running += 1
            try:
                if cancelled.is_set():  # shut down before this thread started
                    raise TurnCancelled("cancelled before the engine ran")
                sid = header_id or self.recorder.route(family, chat.messages)
                return self.recorder.complete_turn(
                    sid, chat.messages, chat.params, chat.tools, cancelled
                )
            finally:
                with self._running_lock:
                    self._running -= 1

        if self._slots is None:
            self._slots = anyio.CapacityLimiter(ENGINE_THREADS)
        try:
            return await anyio.to_thread.run_sync(turn, abandon_on_cancel=True, limiter=self._slots)
        except asyncio.CancelledError:
            if not self._closing:
                raise
            # uvicorn's graceful shutdown ran out of time: answer the client, record nothing.
            cancelled.set()
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            raise APIError(
                503,
                "the gateway is shutting down and this request's generation did not finish "
                f"within its {self.shutdown_grace_s} s grace; the turn was not recorded",
                None,
                "gateway_shutting_down",
                {"x-should-retry": "false"},  # the openai client would retry a 503 otherwise
            ) from None
        except ToolSupportError as e:
            raise APIError(400, str(e), "tools", "tools_not_supported") from None
        except ContextTooLong as e:
            raise APIError(400, str(e), "messages", "context_length_exceeded") from None

    async def _chat(self, request: Request) -> JSONResponse | StreamingResponse:
        try:
            raw = await read_body(request, self.limits.max_body_bytes)
            chat = self._check(await run_in_threadpool(parse_json, raw, self.limits.max_depth))
            reply = await self._generate(request, chat)
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
        if chat.stream:
            events = _stream_events(head, reply, finish, usage if chat.include_usage else None)
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
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            # Typed int, used as asyncio.timeout(...): a float works.
            timeout_graceful_shutdown=self.shutdown_grace_s,  # type: ignore[arg-type]
        )
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
        """Stop serving (idempotent): no new connections; running requests get
        ``shutdown_grace_s`` to finish, then a 503 (their engine calls may still be running:
        ``running_generations``)."""
        if self._server is not None:
            self._closing = True
            self._server.should_exit = True
            if self._thread is not None:
                self._thread.join(timeout=self.shutdown_grace_s + 10)
        self._server = self._thread = None

    def __enter__(self) -> Gateway:
        if self.url is None:
            self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
