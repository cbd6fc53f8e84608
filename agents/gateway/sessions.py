"""Per-session token bookkeeping for the gateway: prefix check, delta ids, recorded turns.

A client sends the whole message history on every request. The session keeps the exact ids the
engine was conditioned on and sampled so far, plus the messages they stand for. A request that
extends those messages (the previous ones, then the assistant reply the gateway returned, then
new messages) only appends ids: the end-of-turn filler the model did not sample and the new
messages' ids (``agents.gateway.rendering``). Earlier ids are never re-tokenised.

Anything else is a prefix-check failure: the client edited or dropped history, retried a turn,
or the chat template re-renders earlier messages once more follow (Qwen3 drops past ``<think>``
blocks). The turn is then rendered whole, starts a new segment (a per-turn sample), is counted,
and is marked (``invalid_action=True``, ``invalid_reason`` starting with ``prefix_check_failed``)
so the learner masks it or splits the trajectory with :func:`split_segments`.

A request that fails (a refused prompt, an engine error, a cancelled request) records nothing: no
turn, no count, and a session it created is forgotten.

Requests with ``tools``, assistant ``tool_calls`` or ``role: tool`` messages are rendered with
the tools by the template itself (``agents.gateway.tools``); their appended ids are the text the
template adds after the previous render, tokenised alone (templates merge consecutive tool
messages into one block, so a message cannot be rendered after a fixed dummy prefix).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from agents.gateway.rendering import TokenRenderer, longest_token_chars, normalize_message
from agents.gateway.tools import normalize_tool_calls, parse_tool_calls
from agents.protocols import Conversation, Generation, Model, SamplingParams
from agents.trajectory import Trajectory, Turn

PREFIX_FAILED = "prefix_check_failed"


class TurnCancelled(RuntimeError):
    """The request was cancelled while its generation ran: the turn is not recorded."""


class ContextTooLong(ValueError):
    """The prompt and the requested completion do not fit the model's context."""

    def __init__(self, prompt_tokens: int, max_new_tokens: int, limit: int):
        self.prompt_tokens, self.max_new_tokens, self.limit = prompt_tokens, max_new_tokens, limit
        super().__init__(
            f"this model's context is {limit} tokens; the request needs {prompt_tokens} for the "
            f"messages and up to {max_new_tokens} for the completion "
            f"({prompt_tokens + max_new_tokens} in all): shorten the messages or lower max_tokens"
        )


def key_session_id(api_key: str) -> str:
    """A session id derived from an API key: a hash, so the key itself is never stored."""
    return "key-" + hashlib.sha256(api_key.encode()).hexdigest()[:16]


@dataclass
class Reply:
    """One recorded turn as the client sees it: the generation, and its text split into
    ``content`` and OpenAI ``tool_calls`` when the request had tools and the model called one."""

    generation: Generation
    content: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


def split_segments(trajectory: Trajectory) -> list[Trajectory]:
    """Split a gateway trajectory at its segment starts into trajectories that each flatten to
    one token-exact sequence (``agent["segment_starts"]`` holds the turn indices)."""
    starts = list(trajectory.agent.get("segment_starts", [0])) or [0]
    bounds = [*starts, len(trajectory.turns)]
    parts = []
    for begin, end in zip(bounds, bounds[1:], strict=False):
        part = copy.copy(trajectory)
        part.turns = [copy.copy(t) for t in trajectory.turns[begin:end]]
        if part.turns and (part.turns[0].invalid_reason or "").startswith(PREFIX_FAILED):
            # Within its own segment the turn is a clean start: nothing to mask.
            part.turns[0].invalid_action, part.turns[0].invalid_reason = False, None
        part.agent = {**trajectory.agent, "segment_starts": [0]}
        parts.append(part)
    return parts


@dataclass
class Session:
    """One client session: the trajectory so far and the state the next request must extend."""

    session_id: str
    trajectory: Trajectory
    messages: list[dict[str, Any]] = field(default_factory=list)  # history incl. last reply
    token_ids: list[int] = field(default_factory=list)  # exact ids: prompt + last completion
    last_completion: list[int] = field(default_factory=list)
    prefix_failures: int = 0
    tools: list[dict[str, Any]] | None = None  # the tools the session's ids were rendered with
    metadata: dict[str, Any] = field(default_factory=dict)  # passed on to the engine each turn
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Under the recorder's lock: ``busy`` when route() gave it to a request, ``users`` the
    # requests holding it (one left with no turn, and not pinned, is forgotten), ``summary`` the
    # counts /v1/sessions lists without waiting for a turn in flight.
    busy: bool = False
    users: int = 0
    pinned: bool = False  # opened by its owner (open_session): every request of its key is its
    summary: dict[str, int] = field(
        default_factory=lambda: {"turns": 0, "segments": 0, "prefix_failures": 0}
    )


class SessionRecorder:
    """Turns chat requests into engine calls on exact ids and records them per session."""

    def __init__(self, model: Model, name: str | None = None, context_limit: int | None = None):
        tokenizer = getattr(model, "tokenizer", None)
        if tokenizer is None:
            raise ValueError(
                f"model {getattr(model, 'name', model)!r} has no tokenizer; the gateway needs a "
                "token backend (TransformersModel, VLLMModel) to record token-exact trajectories"
            )
        self.model = model
        self.name = name or model.name
        self.renderer = TokenRenderer(tokenizer, self.name)
        self.template = self.renderer.template
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self.prefix_failures = 0
        self.requests = 0
        self.context_limit = context_limit
        self.max_token_chars = longest_token_chars(tokenizer)

    def check_tools(self) -> None:
        """``ToolSupportError`` naming the model when its template cannot take ``tools``."""
        self.renderer.check_tools()

    @property
    def tool_form(self) -> str:
        """The template's tool-call form (``agents.gateway.tools.TOOL_CALL_FORMS``)."""
        return self.renderer.tool_form

    # -- sessions -------------------------------------------------------------------------------
    def _session(self, session_id: str) -> Session:
        with self._lock:
            session = self._sessions.get(session_id)
            return session if session is not None else self._new_session(session_id)

    def _new_session(self, session_id: str) -> Session:
        """Called with ``self._lock`` held."""
        traj = Trajectory(model=self.name, token_exact=True, finish_reason="submitted")
        traj.agent = {
            "class": "gateway",
            "session": session_id,
            "segment_starts": [],
            "prefix_failures": 0,
        }
        session = self._sessions[session_id] = Session(session_id, traj)
        return session

    def open_session(self, session_id: str, **metadata: Any) -> None:
        """Start ``session_id`` ahead of its first request, with ``metadata`` (``task_id``,
        ``task``, ``seed``...) passed to the engine in ``Conversation.metadata`` every turn."""
        session = self._session(session_id)
        with session.lock:
            session.metadata.update(metadata)
            session.pinned = True

    def complete(
        self, session_id: str, messages: list[dict[str, Any]], params: SamplingParams
    ) -> Generation:
        """Generate the reply to ``messages`` in ``session_id`` and record the turn."""
        return self.complete_turn(session_id, messages, params).generation

    def route(self, base_id: str, messages: list[dict[str, Any]]) -> str:
        """The session of ``base_id``'s family (``base_id``, ``base_id~1``, ...) this request
        continues: an idle one whose history the messages extend, else an idle empty one, else a
        new one. For sessions named by a shared API key: concurrent conversations under one key
        become separate sessions instead of queueing into one and breaking each other's prefix,
        and a request that extends none of them starts another. A session its owner opened
        (``open_session``, as the trainer does per episode) takes every request of its key:
        a rewritten history is then a new segment of it."""
        messages = [normalize_message(m) for m in messages]
        with self._lock:
            base = self._sessions.get(base_id)
            if base is not None and base.pinned:  # one episode's key: rewrites are segments
                return base_id
            family = [s for sid, s in self._sessions.items() if sid.split("~")[0] == base_id]
            idle = [s for s in family if not s.busy]
            pick = next(
                (s for s in idle if s.messages and messages[: len(s.messages)] == s.messages),
                next((s for s in idle if not s.messages), None),
            )
            if pick is None:
                sid = base_id if not family else f"{base_id}~{len(family)}"
                while sid in self._sessions:
                    sid += "~"
                pick = self._new_session(sid)
            pick.busy = True  # released when its request ends (complete_turn)
            return pick.session_id

    def complete_turn(
        self,
        session_id: str,
        messages: list[dict[str, Any]],
        params: SamplingParams,
        tools: list[dict[str, Any]] | None = None,
        cancelled: threading.Event | None = None,
    ) -> Reply:
        """Like :meth:`complete`, with ``tools`` rendered by the template and the reply's tool
        calls parsed back (``ToolSupportError`` when the template cannot take tools).
        ``ContextTooLong`` before the engine runs when the prompt and ``max_new_tokens`` pass
        ``context_limit``; ``TurnCancelled`` when ``cancelled`` is set by the time the engine
        returns. A request that fails leaves the session as it was."""
        with self._lock:
            session = self._sessions.get(session_id) or self._new_session(session_id)
            session.users += 1
        try:
            return self._complete_turn(session, messages, params, tools, cancelled)
        finally:
            with self._lock:
                session.users -= 1
                session.busy = session.users > 0
                unused = not (session.users or session.pinned or session.trajectory.turns)
                if unused and self._sessions.get(session_id) is session:
                    del self._sessions[session_id]

    def _complete_turn(
        self,
        session: Session,
        messages: list[dict[str, Any]],
        params: SamplingParams,
        tools: list[dict[str, Any]] | None,
        cancelled: threading.Event | None,
    ) -> Reply:
        tools = tools or None
        if tools:
            self.check_tools()
        messages = [normalize_message(m) for m in messages]
        with session.lock:  # one request at a time per session: turns stay ordered
            started = time.perf_counter()
            delta, why = self.renderer.extension(
                session.messages, session.tools, session.last_completion, messages, tools
            )
            traj = session.trajectory
            new_segment = not delta
            if new_segment:
                delta = self.renderer.initial_ids(messages, tools)
            prompt = list(delta) if new_segment else session.token_ids + delta
            limit = self.context_limit
            if limit is not None and len(prompt) + params.max_new_tokens > limit:
                raise ContextTooLong(len(prompt), params.max_new_tokens, limit)
            conversation = Conversation(
                messages=messages,
                token_ids=prompt,
                metadata={"task_id": None, **session.metadata, "turn": len(traj.turns)},
            )
            t0 = time.perf_counter()
            gen = self.model.generate(conversation, params)
            model_s = time.perf_counter() - t0
            if not gen.token_exact or len(gen.logprobs) != len(gen.token_ids):
                raise RuntimeError(
                    f"engine {self.model.name!r} returned no exact token ids/log-probs; the "
                    "gateway records token-exact trajectories only"
                )
            if cancelled is not None and cancelled.is_set():
                raise TurnCancelled(f"session {session.session_id!r}: the request was cancelled")
            content, calls = parse_tool_calls(gen.text, self.tool_form) if tools else (gen.text, [])
            reply: dict[str, Any] = {"role": "assistant", "content": content}
            if calls:  # stored as the client will echo it back (normalize_message)
                reply["tool_calls"] = normalize_tool_calls(calls, "reply")
            if new_segment:
                traj.agent["segment_starts"].append(len(traj.turns))
            if why:
                session.prefix_failures += 1
                traj.agent["prefix_failures"] = session.prefix_failures
            if not traj.system_prompt and messages[0]["role"] == "system":
                traj.system_prompt = messages[0]["content"]
            if not traj.prompt:
                traj.prompt = next((m["content"] for m in messages if m["role"] == "user"), "")
            traj.sampling = {
                "temperature": params.temperature,
                "top_p": params.top_p,
                "max_new_tokens": params.max_new_tokens,
            }
            traj.turns.append(
                Turn.of_reply(
                    gen,
                    delta,
                    model_s,
                    invalid_action=bool(why),
                    invalid_reason=f"{PREFIX_FAILED}: {why}" if why else None,
                    wall_s=time.perf_counter() - started,
                )
            )
            session.messages = [*messages, reply]
            session.tools = tools
            session.token_ids = prompt + list(gen.token_ids)
            session.last_completion = list(gen.token_ids)
            with self._lock:
                self.requests += 1
                self.prefix_failures += bool(why)
                session.summary = {
                    "turns": len(traj.turns),
                    "segments": len(traj.agent["segment_starts"]),
                    "prefix_failures": session.prefix_failures,
                }
            usage = {"prompt_tokens": len(prompt), "completion_tokens": len(gen.token_ids)}
            gen = dataclasses.replace(gen, usage={**gen.usage, **usage})
            return Reply(gen, content, calls)

    def session_ids(self) -> list[str]:
        with self._lock:
            return list(self._sessions)

    def summaries(self) -> list[dict[str, Any]]:
        """Each session's id and counts as of its last recorded turn (never waits for one)."""
        with self._lock:
            return [{"id": sid, **s.summary} for sid, s in self._sessions.items()]

    def trajectory(self, session_id: str) -> Trajectory:
        """A copy of the session's trajectory so far (``KeyError`` naming known sessions)."""
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None:
            raise KeyError(f"no gateway session {session_id!r}; known: {self.session_ids()}")
        with session.lock:
            return copy.deepcopy(session.trajectory)

    def pop_session(self, session_id: str) -> Trajectory:
        """Remove the session and return its trajectory (waits for a request in flight)."""
        traj = self.trajectory(session_id)
        with self._lock:
            self._sessions.pop(session_id, None)
        return traj
