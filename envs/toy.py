"""``ToyKeywordEnv``: a one-turn env for fast learning tests (no sandbox, no torch).

Each task is a short prompt; the episode is one reply, rewarded 1.0 if it contains ``target``
(``mode="contains"``, case-insensitive) or starts with it (``mode="startswith"``, leading space
ignored), else 0.0. A policy that sometimes says the target can learn to say it always, which
makes "does the RL loop learn?" checkable in a minute on a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
from gymnasium.error import ResetNeeded

from envs.selection import select_task
from envs.spaces import UnicodeText
from swe_gym.errors import unknown_choice

MODES = ("contains", "startswith")
DEFAULT_PROMPTS = (
    "Say something.",
    "Reply with a few words.",
    "What comes to mind?",
    "Write anything.",
)


@dataclass(frozen=True)
class ToyTask:
    instance_id: str
    prompt: str


class ToyKeywordEnv(gym.Env[str, str]):
    """Single-turn: ``reset -> (prompt, info)``; ``step(reply) -> ("", reward, True, False, info)``."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        target: str = "yes",
        mode: str = "contains",
        prompts: list[str] | tuple[str, ...] = DEFAULT_PROMPTS,
        system_prompt: str = "",
    ):
        if mode not in MODES:
            raise unknown_choice("mode", mode, MODES)
        if not target:
            raise ValueError("target must be a non-empty string")
        if not prompts:
            raise ValueError("prompts must hold at least one prompt")
        self.target = target
        self.mode = mode
        self.system_prompt = system_prompt
        self.tasks = [ToyTask(f"toy-{i}", p) for i, p in enumerate(prompts)]
        self._by_id = {t.instance_id: t for t in self.tasks}
        self.task: ToyTask | None = None
        self.observation_space = UnicodeText(10_000)
        self.action_space = UnicodeText(100_000)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        task_id = (options or {}).get("task_id")
        self.task = select_task(self.tasks, self._by_id, self.np_random, task_id)
        return self.task.prompt, {
            "task_id": self.task.instance_id,
            "system_prompt": self.system_prompt,
        }

    def hit(self, reply: str) -> bool:
        text, target = reply.lower(), self.target.lower()
        return text.lstrip().startswith(target) if self.mode == "startswith" else target in text

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.task is None:
            raise ResetNeeded("call reset() before step()")
        hit = self.hit(str(action))
        info = {
            "task_id": self.task.instance_id,
            "report": {"resolved": hit},
            "patch": "",
            "invalid_action": False,
        }
        self.task = None
        return "", float(hit), True, False, info

    def close(self) -> None:
        self.task = None
