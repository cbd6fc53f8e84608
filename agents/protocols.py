"""The small protocols a user plugs into: ``Model`` and ``Agent``. Concrete classes need not inherit.

Token-in/token-out (docs/methods.md#token-exact-trajectories): a ``Conversation`` holds the exact
token ids the model was conditioned on. Backends that work on tokens (transformers, vLLM,
scripted) extend it with the ids they sampled; a text-level backend (an OpenAI-compatible
endpoint) fills ``token_ids`` only when the server returns them, and says so with
``token_exact=False`` otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass
class SamplingParams:
    """Sampling settings. Defaults: docs/methods.md#react-scaffold (temperature 1.0, no top-k/p)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1: off
    max_new_tokens: int = 1024
    seed: int | None = None
    stop: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")


@dataclass
class Conversation:
    """The state a model is conditioned on: chat messages and, for token backends, their ids."""

    messages: list[dict[str, str]] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    # Episode facts a model may need that are not part of the prompt: ``task_id``, ``turn`` and,
    # when the env exposes it, ``task`` (the ``swe_gym.Task``; the oracle model replays from it).
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Generation:
    """One assistant message as sampled."""

    text: str
    token_ids: list[int]  # exactly as sampled (empty for a text-only endpoint)
    logprobs: list[float]  # sampling log-prob of each token in token_ids
    finish_reason: str  # "stop" (end of turn) or "length" (hit max_new_tokens)
    token_exact: bool = True
    usage: dict[str, Any] = field(default_factory=dict)
    # The engine's weights version that sampled every token (``update_weights(..., version=)``);
    # None for a backend that does not track versions (an endpoint, a scripted model).
    policy_version: int | None = None


@runtime_checkable
class Model(Protocol):
    """Given a conversation, return the next assistant message with token ids and log-probs.

    A token backend also has a ``tokenizer`` attribute (a Hugging Face tokenizer with a chat
    template): the agent then builds ``conversation.token_ids`` itself, token-exact, and the model
    must condition on exactly those ids. Without one (or ``tokenizer = None``) the model reads
    ``conversation.messages`` and the trajectory is marked ``token_exact=False``.
    """

    name: str

    def generate(self, conversation: Conversation, params: SamplingParams) -> Generation: ...


@runtime_checkable
class Agent(Protocol):
    """Given the env's observation and info, return the next action text.

    ``agents.react.run_episode`` calls ``reset(prompt, info)`` once, then ``act(observation,
    info)`` every turn (turn 0 gets the prompt again). Optional extras it reads when present:
    ``last_turn`` (an ``agents.trajectory.Turn`` with the token record of the last ``act``),
    ``token_exact`` (bool) and ``describe()`` (model name, sampling and agent settings). Raising
    an ``agents.react.AgentStop`` subclass ends the episode with its ``finish_reason``.
    """

    def reset(self, observation: str, info: dict[str, Any]) -> None: ...

    def act(self, observation: str, info: dict[str, Any]) -> str: ...
