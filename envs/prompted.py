"""The SWE envs' entry point: ``SWEEnv`` with a prompt style and an observation budget.

``gym.make("SWEStarter-v0", prompt="compact", max_observation_chars=2000)``: ``prompt``
(``swe_gym.tools.docs.PROMPTS``) picks the system prompt and first observation the agent
sees; ``compact`` spends about 150 tokens on the tools instead of about 520 and drops the task
prompt's boilerplate, which matters when a CPU learner pays for every prompt token of every
trajectory in every step. ``max_observation_chars`` cuts each tool result to its head and tail
(the footer with the open file and directory is at the tail, so it stays). With the defaults
(``full``, no cap) this returns the plain ``SWEEnv``: nothing changes for anyone else. Kept
outside ``envs/swe_env.py`` on purpose: the episode contract and grading live there, and a
prompt style only rewrites text the agent reads.
"""

from __future__ import annotations

import inspect
from typing import Any

import gymnasium as gym

from envs.fork import fork_env
from envs.swe_env import SWEEnv
from swe_gym.errors import unknown_choice
from swe_gym.tools.docs import PROMPTS, compact_system_prompt, compact_task_prompt

CUT_MARK = "\n[... {n} characters cut ...]\n"


def cut_middle(text: str, limit: int) -> str:
    """``text`` if it fits ``limit`` characters, else its head and tail around a cut mark."""
    if len(text) <= limit:
        return text
    keep = max(0, limit - len(CUT_MARK.format(n=len(text))))
    head = keep // 2
    return text[:head] + CUT_MARK.format(n=len(text) - keep) + text[len(text) - (keep - head) :]


class PromptStyle(gym.Wrapper[str, str, str, str]):
    """Rewrites the prompt text of a ``SWEEnv`` (see the module docstring); rewards, ends and
    grading are the wrapped env's."""

    def __init__(
        self, env: gym.Env, prompt: str = "full", max_observation_chars: int | None = None
    ):
        super().__init__(env)
        if prompt not in PROMPTS:
            raise unknown_choice("prompt", prompt, PROMPTS)
        if max_observation_chars is not None and max_observation_chars < 200:
            raise ValueError(f"max_observation_chars must be >= 200; got {max_observation_chars}")
        self.prompt = prompt
        self.max_observation_chars = max_observation_chars
        base: Any = env.unwrapped
        if prompt == "compact":  # the agent reads it from info["system_prompt"]; keep both equal
            base.system_prompt = compact_system_prompt(base.action_format)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        base: Any = self.env.unwrapped
        if self.prompt == "compact":
            obs = compact_task_prompt(
                base.task.problem_statement, base.sandbox.workdir, base.max_turns
            )
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self.max_observation_chars is not None:
            obs = cut_middle(obs, self.max_observation_chars)
        return obs, float(reward), terminated, truncated, info

    def fork(self, n: int) -> list[gym.Env]:
        """``n`` copies at this step, each wrapped like this one (``envs.fork.fork_env``)."""
        return fork_env(self, n)


def make_swe_env(
    *args: Any, prompt: str = "full", max_observation_chars: int | None = None, **kwargs: Any
) -> gym.Env:
    """``SWEEnv(*args, **kwargs)``, wrapped in ``PromptStyle`` unless both options are default."""
    env = SWEEnv(*args, **kwargs)
    if prompt == "full" and max_observation_chars is None:
        return env
    return PromptStyle(env, prompt, max_observation_chars)


# SWEEnv's keywords plus ours, so callers that inspect what the env takes (algos.rollout.collect.
# env_accepts) see the real names rather than a catch-all **kwargs.
_params = list(inspect.signature(SWEEnv.__init__).parameters.values())[1:]
make_swe_env.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [
        *_params,
        inspect.Parameter("prompt", inspect.Parameter.KEYWORD_ONLY, default="full"),
        inspect.Parameter("max_observation_chars", inspect.Parameter.KEYWORD_ONLY, default=None),
    ]
)

__all__ = ["PromptStyle", "cut_middle", "make_swe_env"]
