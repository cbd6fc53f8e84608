"""The reference ReAct loop (docs/methods.md#react-scaffold: full history, one command per turn) and
``run_episode``, which drives any ``Agent`` through one env episode and returns a ``Trajectory``.

Control flow uses a few named exceptions (``AgentStop`` and its subclasses): the agent raises
one, ``run_episode`` records its ``finish_reason`` and closes the env whatever happened.
"""

from __future__ import annotations

import hashlib
import threading
import time
import traceback
from dataclasses import asdict, replace
from typing import Any

from agents.chat import ChatTemplate
from agents.protocols import Agent, Conversation, Generation, Model, SamplingParams
from agents.trajectory import ENV_FAILURES, Trajectory, Turn

CHARS_PER_TOKEN = 4  # context estimate for text-only models (no tokenizer to count with)


class AgentStop(Exception):
    """Ends an episode early; ``finish_reason`` is recorded in the trajectory."""

    finish_reason = "error"


class ContextOverflow(AgentStop):
    """The next prompt would not fit ``max_context_tokens`` (the episode ends as truncated)."""

    finish_reason = "context_overflow"


class TooManyInvalidActions(AgentStop):
    finish_reason = "invalid_actions"


class TimeBudgetExceeded(AgentStop):
    finish_reason = "time_budget"


class TurnLimitReached(AgentStop):
    finish_reason = "max_turns"


class EpisodeAborted(AgentStop):
    """Set from outside (``rollout``'s per-episode timeout)."""

    finish_reason = "timeout"


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


def _describe(agent: Agent) -> dict[str, Any]:
    if hasattr(agent, "describe"):
        return agent.describe()
    return {"model": type(agent).__name__, "sampling": {}, "agent": {"class": type(agent).__name__}}


PUBLIC_TASK_FIELDS = ("instance_id", "repo", "base_commit", "problem_statement", "version")


def public_task(task: Any) -> dict[str, Any]:
    """What an agent may know of its task: no gold patch, test patch or test lists."""
    return {k: getattr(task, k) for k in PUBLIC_TASK_FIELDS if hasattr(task, k)}


def needs_answer(obj: Any) -> bool:
    """Whether ``obj`` (an agent or a model) declares it replays the answer (an oracle):
    only those receive the whole task, gold patch included."""
    return bool(getattr(obj, "needs_answer", False))


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
    traj.task_id, traj.seed = task_id, seed
    started = time.perf_counter()
    agent: Any = agent_or_model
    try:
        if not hasattr(agent_or_model, "act"):
            agent = ReActAgent(agent_or_model, **(agent_kwargs or {}))
        meta = _describe(agent)
        traj.model, traj.sampling, traj.agent = meta["model"], meta["sampling"], meta["agent"]
        options = {"task_id": task_id} if task_id is not None else None
        obs, info = env.reset(seed=seed, options=options)
        traj.task_id = info.get("task_id", task_id)
        traj.system_prompt = info.get("system_prompt", "")
        traj.prompt = obs
        agent_info = dict(info)
        agent_info.setdefault("seed", seed)
        task = getattr(getattr(env, "unwrapped", env), "task", None)
        if task is not None:
            wants = needs_answer(agent_or_model) or needs_answer(getattr(agent, "model", None))
            agent_info.setdefault("task", task if wants else public_task(task))
        agent.reset(obs, agent_info)
        while True:
            t0 = time.perf_counter()
            if stop_event is not None and stop_event.is_set():
                raise EpisodeAborted("episode timed out")
            action = agent.act(obs, info)
            turn = getattr(agent, "last_turn", None)
            if turn is None or turn.action != action or (traj.turns and turn is traj.turns[-1]):
                turn = Turn(action=action)  # an agent that keeps no token record
            t1 = time.perf_counter()
            obs, reward, terminated, truncated, info = env.step(action)
            turn.env_s = time.perf_counter() - t1
            turn.observation = obs
            turn.invalid_action = bool(info.get("invalid_action", False))
            turn.invalid_reason = info.get("invalid_reason")
            turn.tool = info.get("tool")
            turn.reward = float(reward)
            turn.wall_s = time.perf_counter() - t0
            traj.turns.append(turn)
            traj.reward += float(reward)
            if info.get("patch") is not None:
                traj.patch = info["patch"]
            if terminated or truncated:
                record_end(traj, terminated, info)
                break
    except AgentStop as e:
        traj.finish_reason = e.finish_reason
        traj.error = str(e)
    except Exception as e:  # noqa: BLE001 - an episode must never take the caller down
        traj.finish_reason = "error"
        traj.error = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}"
    finally:
        traj.token_exact = bool(getattr(agent, "token_exact", False))
        if traj.finish_reason not in ("submitted", "max_turns") and not traj.patch:
            traj.patch = _current_diff(env)
        if close_env:
            try:
                env.close()
            except Exception as e:  # noqa: BLE001
                traj.error = (traj.error or "") + f"\nenv.close() failed: {type(e).__name__}: {e}"
        traj.wall_s = time.perf_counter() - started
    return traj


def record_end(traj: Trajectory, terminated: bool, info: dict[str, Any]) -> None:
    """The episode's outcome from the env's last step into ``traj``: the grading report,
    ``resolved`` and why it ended: ``submitted`` (terminated), one of ``ENV_FAILURES`` (the
    env's own failure, ``info["end_reason"]``; its message in ``error``), else ``max_turns``."""
    traj.report = info.get("report")
    traj.resolved = bool(traj.report and traj.report.get("resolved"))
    end = info.get("end_reason")
    traj.finish_reason = "submitted" if terminated else end if end in ENV_FAILURES else "max_turns"
    if traj.finish_reason in ENV_FAILURES:
        traj.error = info.get("error") or traj.finish_reason


def _current_diff(env: Any) -> str:
    """The sandbox's diff when the agent stopped the episode (the env did not grade it)."""
    sandbox = getattr(getattr(env, "unwrapped", env), "sandbox", None)
    if sandbox is None:
        return ""
    try:
        return sandbox.diff() or ""
    except Exception:  # noqa: BLE001 - a dead sandbox has no diff to report
        return ""
