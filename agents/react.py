"""The reference ReAct loop (docs/methods.md#react-scaffold: full history, one command per turn) and
``run_episode``, which drives any ``Agent`` through one env episode and returns a ``Trajectory``.

Control flow uses a few named exceptions (``AgentStop`` and its subclasses): the agent raises
one, ``run_episode`` records its ``finish_reason`` and closes the env whatever happened.
"""

from __future__ import annotations

import copy
import hashlib
import threading
import time
from dataclasses import asdict, replace
from typing import Any

from agents.chat import ChatTemplate
from agents.episode import (  # noqa: F401 - re-exported: the names callers import from here
    AgentStop,
    ContextOverflow,
    EpisodeAborted,
    TimeBudgetExceeded,
    TooManyInvalidActions,
    TurnLimitReached,
    finish_episode,
    needs_answer,
    play_turns,
    public_task,
    record_end,
    record_stop,
    start_episode,
)
from agents.protocols import Agent, Conversation, Generation, Model, SamplingParams
from agents.trajectory import Trajectory, Turn

CHARS_PER_TOKEN = 4  # context estimate for text-only models (no tokenizer to count with)


def turn_seed(episode_key: str, turn: int) -> int:
    """A 63-bit sampling seed for one turn of one episode (stable across processes, unlike
    ``hash``)."""
    digest = hashlib.blake2b(f"{episode_key}\0{turn}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def _clean_text(text: str) -> str:
    """Valid UTF-8 text: lone surrogates (a bad decode) become '?' instead of failing later."""
    return text.encode("utf-8", "replace").decode("utf-8")


_TEMPLATES: dict[int, ChatTemplate] = {}
_TEMPLATES_LOCK = threading.Lock()


def _template_for(tokenizer: Any, observation_role: str) -> ChatTemplate:
    """One ChatTemplate per tokenizer (building one renders the template a few times)."""
    key = id(tokenizer) * 31 + hash(observation_role)
    with _TEMPLATES_LOCK:
        tpl = _TEMPLATES.get(key)
        if tpl is None or tpl.tokenizer is not tokenizer:
            tpl = _TEMPLATES[key] = ChatTemplate(tokenizer, observation_role)
        return tpl


class ReActAgent:
    """One model call per turn over the full history; the raw reply is the env action.

    Args:
        model: a ``Model``. With a ``tokenizer`` attribute the conversation is kept as exact
            token ids (``ChatTemplate``); without, as messages only (``token_exact=False``).
        params: sampling settings (``max_new_tokens`` is lowered when the context is nearly full).
            Without ``params.seed``, an episode started with a seed (``info["seed"]``, which
            ``run_episode`` sets) samples each turn with a seed derived from (task id, episode
            seed, turn): the seed no longer depends on the order in which concurrent episodes
            reach the model, and episodes with different seeds or tasks sample independently.
        max_turns: model calls before the agent stops (``None``: leave it to the env).
        max_context_tokens: prompt + completion budget; a prompt that does not fit ends the
            episode with ``finish_reason="context_overflow"``.
        time_budget_s: wall-clock budget; checked before each model call.
        max_consecutive_invalid: invalid actions in a row before giving up (``None``: no cap).
        observation_role: the chat role env observations are sent as.
    """

    def __init__(
        self,
        model: Model,
        params: SamplingParams | None = None,
        max_turns: int | None = None,
        max_context_tokens: int | None = None,
        time_budget_s: float | None = None,
        max_consecutive_invalid: int | None = 5,
        observation_role: str = "user",
    ):
        for name, value in (
            ("max_turns", max_turns),
            ("max_context_tokens", max_context_tokens),
            ("max_consecutive_invalid", max_consecutive_invalid),
        ):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {value}")
        if time_budget_s is not None and time_budget_s <= 0:
            raise ValueError(f"time_budget_s must be > 0 or None, got {time_budget_s}")
        self.model = model
        self.params = params or SamplingParams()
        self.max_turns = max_turns
        self.max_context_tokens = max_context_tokens
        self.time_budget_s = time_budget_s
        self.max_consecutive_invalid = max_consecutive_invalid
        self.observation_role = observation_role
        tokenizer = getattr(model, "tokenizer", None)
        self.template = _template_for(tokenizer, observation_role) if tokenizer else None
        self.token_exact = self.template is not None
        self.last_turn: Turn | None = None
        self.conversation = Conversation()

    def describe(self) -> dict[str, Any]:
        """What produced the trajectory (stored with it)."""
        return {
            "model": getattr(self.model, "name", type(self.model).__name__),
            "sampling": asdict(self.params),
            "agent": {
                "class": type(self).__name__,
                "max_turns": self.max_turns,
                "max_context_tokens": self.max_context_tokens,
                "time_budget_s": self.time_budget_s,
                "max_consecutive_invalid": self.max_consecutive_invalid,
                "observation_role": self.observation_role,
            },
        }

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        messages = []
        if info.get("system_prompt"):
            messages.append({"role": "system", "content": info["system_prompt"]})
        messages.append({"role": "user", "content": observation})
        metadata = {"task_id": info.get("task_id"), "turn": 0}
        if info.get("task") is not None:
            metadata["task"] = info["task"]
        self.conversation = Conversation(messages=messages, metadata=metadata)
        self._pending = self.template.initial_ids(messages) if self.template else []
        self._turns = 0
        self._consecutive_invalid = 0
        self._started = time.monotonic()
        self._awaiting_observation = False
        self._episode_key = None
        if info.get("seed") is not None:
            self._episode_key = f"{info.get('task_id')}\0{info['seed']}"
        self.token_exact = self.template is not None
        self.last_turn = None

    def branch(self, index: int) -> ReActAgent:
        """A copy at this turn for branch ``index`` of a branched group (``agents.branching``):
        its own conversation (messages, token ids, pending delta) and counters, sharing the
        model; its later turns sample with seeds from (task id, episode seed, ``index``), so each
        branch samples independently and reproducibly."""
        twin = copy.copy(self)
        twin.conversation = copy.deepcopy(self.conversation)
        twin._pending = list(self._pending)
        twin.last_turn = copy.deepcopy(self.last_turn)
        if self._episode_key is not None:
            twin._episode_key = f"{self._episode_key}\0branch{index}"
        return twin

    def _ingest(self, observation: str, info: dict[str, Any]) -> None:
        """Add the env's reply to the previous action to the history."""
        if info.get("invalid_action"):
            self._consecutive_invalid += 1
        else:
            self._consecutive_invalid = 0
        cap = self.max_consecutive_invalid
        if cap is not None and self._consecutive_invalid >= cap:
            raise TooManyInvalidActions(
                f"{self._consecutive_invalid} invalid actions in a row "
                f"(max_consecutive_invalid={cap}); last: {info.get('invalid_reason')}"
            )
        self.conversation.messages.append({"role": self.observation_role, "content": observation})
        if self.template:
            last = self.last_turn.completion_ids if self.last_turn else []
            self._pending = self.template.turn_filler(last) + self.template.observation_delta_ids(
                observation
            )

    def _prompt_tokens(self) -> int:
        if self.template:
            return len(self.conversation.token_ids) + len(self._pending)
        chars = sum(len(m["content"]) for m in self.conversation.messages)
        return chars // CHARS_PER_TOKEN

    def act(self, observation: str, info: dict[str, Any]) -> str:
        if self._awaiting_observation:
            self._ingest(observation, info)
        if self.max_turns is not None and self._turns >= self.max_turns:
            raise TurnLimitReached(f"max_turns={self.max_turns} model calls made")
        if self.time_budget_s is not None:
            elapsed = time.monotonic() - self._started
            if elapsed > self.time_budget_s:
                raise TimeBudgetExceeded(f"{elapsed:.1f} s > time_budget_s={self.time_budget_s}")
        params = self.params
        if self.max_context_tokens is not None:
            room = self.max_context_tokens - self._prompt_tokens()
            if room < 1:
                raise ContextOverflow(
                    f"next prompt is {self._prompt_tokens()} tokens; max_context_tokens="
                    f"{self.max_context_tokens} leaves no room to generate"
                )
            if room < params.max_new_tokens:
                params = replace(params, max_new_tokens=room)
        if params.seed is None and self._episode_key is not None:
            params = replace(params, seed=turn_seed(self._episode_key, self._turns))

        conv = self.conversation
        conv.token_ids.extend(self._pending)
        conv.metadata["turn"] = self._turns
        t0 = time.perf_counter()
        gen = self.model.generate(conv, params)
        model_s = time.perf_counter() - t0
        if not isinstance(gen, Generation):
            raise TypeError(f"model {self.model!r} returned {type(gen).__name__}, not Generation")
        ids, logprobs = self._completion_ids(gen)
        text = _clean_text(gen.text)
        conv.token_ids.extend(ids)
        conv.messages.append({"role": "assistant", "content": text})
        self.last_turn = Turn.of_reply(
            gen, self._pending, model_s, completion=(ids, logprobs), action=text
        )
        self._pending = []
        self._turns += 1
        self._awaiting_observation = True
        return text

    def _completion_ids(self, gen: Generation) -> tuple[list[int], list[float]]:
        if not self.template:
            return list(gen.token_ids), list(gen.logprobs)
        if not gen.token_exact or (not gen.token_ids and gen.text):
            # The backend did not return what it sampled: keep going on a re-tokenisation, but
            # the trajectory can no longer be trained on token-exactly.
            self.token_exact = False
            ids = list(self.template.tokenizer.encode(gen.text, add_special_tokens=False))
            return ids, [0.0] * len(ids)
        if len(gen.logprobs) != len(gen.token_ids):
            raise ValueError(
                f"model {getattr(self.model, 'name', self.model)!r} returned "
                f"{len(gen.token_ids)} token ids but {len(gen.logprobs)} log-probs"
            )
        return list(gen.token_ids), list(gen.logprobs)


def run_episode(
    env: Any,
    agent_or_model: Agent | Model,
    task_id: str | None = None,
    seed: int | None = None,
    *,
    agent_kwargs: dict[str, Any] | None = None,
    stop_event: threading.Event | None = None,
    close_env: bool = True,
    trajectory: Trajectory | None = None,
) -> Trajectory:
    """Run one episode and return its trajectory. Never raises for what happens inside it.

    ``agent_or_model``: an ``Agent`` (``reset``/``act``), or a ``Model``, which is wrapped in
    ``ReActAgent(model, **agent_kwargs)``. Whatever the agent or env does, the env is closed at the
    end (``close_env=True``), so its sandbox is cleaned; an exception is recorded in
    ``trajectory.error`` with ``finish_reason="error"``. ``stop_event`` aborts between turns
    (``finish_reason="timeout"``). An env end is ``submitted`` (terminated), ``max_turns``
    (truncated), or the env's own failure from ``info["end_reason"]``: ``sandbox_failed`` or
    ``grading_error`` (reward 0, the message in ``trajectory.error``). ``trajectory``: fill this
    object in place (``rollout`` reads the partial one when an episode times out).
    """
    traj = trajectory if trajectory is not None else Trajectory()
    started = time.perf_counter()
    agent: Any = agent_or_model
    try:
        if not hasattr(agent_or_model, "act"):
            agent = ReActAgent(agent_or_model, **(agent_kwargs or {}))
        obs, info = start_episode(env, agent, traj, task_id, seed, answer=agent_or_model)
        play_turns(env, agent, traj, obs, info, stop_event=stop_event)
    except Exception as e:  # noqa: BLE001 - an episode must never take the caller down
        record_stop(traj, e)
    finally:
        finish_episode(env, agent, traj, started, close_env=close_env)
    return traj
