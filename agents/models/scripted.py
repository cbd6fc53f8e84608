"""Deterministic models for tests, demos and smoke data: no weights, no randomness.

``ScriptedModel`` replays given replies; the reply for a call is chosen by the number of assistant
messages already in the conversation, so one instance serves any number of concurrent episodes.
``OracleModel`` replays ``swe_gym.oracle.oracle_actions(task)`` for the episode's task.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agents.protocols import Conversation, Generation, SamplingParams

Reply = str | Generation
Script = Sequence[Reply] | Mapping[str, Sequence[Reply]] | Callable[[Conversation], Reply]


class ScriptExhausted(RuntimeError):
    """The script has no reply for this turn."""


def _turn(conversation: Conversation) -> int:
    return sum(1 for m in conversation.messages if m.get("role") == "assistant")


class ScriptedModel:
    """Replays replies.

    Args:
        responses: a list of replies (the same for every episode), a mapping ``task_id -> list``,
            or a callable ``conversation -> reply``. A reply is a ``str`` or a ready
            ``Generation`` (to inject faults: empty, cut by length, undecodable ids).
        tokenizer: with one, string replies are tokenised and end with the template's end-of-turn
            token (finish ``"stop"``), or are cut at ``max_new_tokens`` (finish ``"length"``), as a
            sampling model would; log-probs are 0.0. The agent then runs token-exactly.
        name: recorded in trajectories.
    """

    def __init__(self, responses: Script, tokenizer: Any = None, name: str = "scripted"):
        self.responses = responses
        self.tokenizer = tokenizer
        self.name = name
        self._end_id: int | None = None
        if tokenizer is not None:
            from agents.chat import ChatTemplate

            eot = ChatTemplate(tokenizer).end_of_turn_ids
            self._end_id = eot[0] if eot else tokenizer.eos_token_id

    @classmethod
    def from_file(cls, path: str | Path, **kw: Any) -> ScriptedModel:
        """A JSON file holding a list of replies or ``{task_id: [replies]}``; or JSONL of strings."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"scripted model file {str(path)!r} does not exist")
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".jsonl":
            data: Any = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            data = json.loads(text)
        ok = isinstance(data, list) or (
            isinstance(data, dict) and all(isinstance(v, list) for v in data.values())
        )
        if not ok:
            raise ValueError(
                f"{path}: expected a JSON list of replies or an object task_id -> list of replies"
            )
        return cls(data, name=kw.pop("name", f"scripted:{path.name}"), **kw)

    def _reply(self, conversation: Conversation) -> Reply:
        if callable(self.responses):
            return self.responses(conversation)
        replies: Sequence[Reply]
        if isinstance(self.responses, Mapping):
            task_id = conversation.metadata.get("task_id")
            if not isinstance(task_id, str) or task_id not in self.responses:
                raise ScriptExhausted(
                    f"no scripted replies for task {task_id!r}; the script has "
                    f"{sorted(self.responses)[:10]}"
                )
            replies = self.responses[task_id]
        else:
            replies = self.responses
        turn = _turn(conversation)
        if turn >= len(replies):
            raise ScriptExhausted(
                f"script has {len(replies)} replies; turn {turn} asked for one more"
            )
        return replies[turn]

    def generate(self, conversation: Conversation, params: SamplingParams) -> Generation:
        reply = self._reply(conversation)
        if isinstance(reply, Generation):
            return reply
        if not isinstance(reply, str):
            raise TypeError(f"scripted reply must be str or Generation, got {type(reply).__name__}")
        if self.tokenizer is None:
            return Generation(
                text=reply, token_ids=[], logprobs=[], finish_reason="stop", token_exact=False
            )
        ids = list(self.tokenizer.encode(reply, add_special_tokens=False))
        if len(ids) >= params.max_new_tokens:
            ids = ids[: params.max_new_tokens]
            text = self.tokenizer.decode(ids)
            finish = "length"
        else:
            ids.append(self._end_id)
            text, finish = reply, "stop"
        return Generation(text=text, token_ids=ids, logprobs=[0.0] * len(ids), finish_reason=finish)


class OracleModel(ScriptedModel):
    """Replays the scripted oracle (``swe_gym.oracle.oracle_actions``) for the episode's task.

    The task comes from ``conversation.metadata["task"]`` (``run_episode`` passes the env's task)
    or, failing that, is looked up by ``metadata["task_id"]`` in ``tasks`` (a list of ``Task`` or
    a ``load_tasks`` source; default the bundled starter suite).
    """

    def __init__(
        self,
        tasks: Iterable[Any] | str | None = "starter",
        action_format: str = "fenced",
        tokenizer: Any = None,
        name: str = "oracle",
        explore: bool = True,
    ):
        super().__init__(self._oracle_reply, tokenizer=tokenizer, name=name)
        self.action_format = action_format
        self.explore = explore  # False: edit and submit only (swe_gym.oracle.oracle_calls)
        self._task_source = tasks
        self._tasks: dict[str, Any] | None = None
        self._actions: dict[str, list[str]] = {}
        self._lock = threading.Lock()

    needs_answer = True  # run_episode passes it the whole task, gold patch included

    def _task(self, conversation: Conversation) -> Any:
        task = conversation.metadata.get("task")
        if task is not None and not isinstance(task, dict):  # a dict: the public view only
            return task
        task_id = conversation.metadata.get("task_id")
        with self._lock:
            if self._tasks is None:
                from swe_gym.tasks import load_tasks

                source = self._task_source if self._task_source is not None else "starter"
                self._tasks = {t.instance_id: t for t in load_tasks(source)}
        if task_id not in self._tasks:
            raise KeyError(
                f"oracle has no task {task_id!r} (it knows {len(self._tasks)} tasks); pass "
                "OracleModel(tasks=...) or run it through run_episode, which passes the env's task"
            )
        return self._tasks[task_id]

    def _oracle_reply(self, conversation: Conversation) -> str:
        from swe_gym.oracle import oracle_actions

        task = self._task(conversation)
        with self._lock:
            actions = self._actions.get(task.instance_id)
        if actions is None:
            actions = oracle_actions(task, action_format=self.action_format, explore=self.explore)
            with self._lock:
                self._actions[task.instance_id] = actions
        turn = _turn(conversation)
        if turn >= len(actions):
            raise ScriptExhausted(
                f"oracle for {task.instance_id} has {len(actions)} actions; turn {turn} asked for more"
            )
        return actions[turn]
