"""An evaluation's budget: the turn and token caps of a model that samples on this machine, one
turn timed before the episodes, and the worst case printed."""

from __future__ import annotations

import math
import sys
import time
from typing import Any

from agents.protocols import Conversation, SamplingParams

LOCAL_MAX_TURNS = 4
LOCAL_MAX_NEW_TOKENS = 128
API_MAX_NEW_TOKENS = 1024


def is_local_model(spec: str) -> bool:
    """Whether ``spec`` samples on this machine (slow on a CPU: gets the small budget)."""
    return spec == "smollm2" or spec.startswith(("hf:", "vllm:"))


def time_one_turn(
    model: Any, env_id: str, env_kwargs: dict[str, Any], task_id: str, max_new_tokens: int
) -> float | None:
    """Seconds one turn of ``max_new_tokens`` takes on the first task's prompt (a turn of 32
    tokens after a warm-up one, scaled); None when the model has no tokenizer (an API, a
    script)."""
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is None:
        return None
    import gymnasium

    from agents.chat import ChatTemplate

    env = gymnasium.make(env_id, **env_kwargs)
    try:
        obs, info = env.reset(seed=0, options={"task_id": task_id})
    finally:
        env.close()
    messages = (
        [{"role": "system", "content": info["system_prompt"]}] if info.get("system_prompt") else []
    ) + [{"role": "user", "content": obs}]
    conv = Conversation(
        messages=messages,
        token_ids=ChatTemplate(tokenizer).initial_ids(messages),
        metadata={"task_id": task_id, "turn": 0},
    )
    n = min(32, max_new_tokens)
    model.generate(conv, SamplingParams(max_new_tokens=1, seed=0))  # warm-up (vLLM compiles)
    t0 = time.perf_counter()
    model.generate(conv, SamplingParams(max_new_tokens=n, seed=0))
    return (time.perf_counter() - t0) * max_new_tokens / n


def print_budget(
    episodes: int,
    turns: int | None,
    max_new_tokens: int,
    concurrency: int,
    turn_s: float | None,
    file: Any = None,
) -> None:
    """The run's caps and, when a turn was timed, its worst case: every episode uses every turn
    and every token, ``concurrency`` episodes sharing the model as if batching were free (so it
    can take longer; episodes that submit early make it shorter)."""
    file = file or sys.stderr
    turns_text = f"<= {turns} turns" if turns else "the env's turn limit"
    print(
        f"budget: {episodes} episodes x {turns_text} x <= {max_new_tokens} new tokens per turn "
        "(--runs, --max-turns, --max-new-tokens)",
        file=file,
    )
    if turn_s is not None and turns:
        worst = math.ceil(episodes / concurrency) * turns * turn_s
        print(
            f"one turn of {max_new_tokens} tokens takes ~{turn_s:.1f} s here; expected at most "
            f"~{worst / 60:.1f} min ({concurrency} episodes at once)",
            file=file,
        )
