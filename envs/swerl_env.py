"""``SWERLEnv``: single-turn SWE-RL patch generation (docs/methods.md#swe-rl).

One episode = one task: ``reset`` returns the SWE-RL prompt (issue + code context + format
instructions), ``step(response)`` scores the model's ``<think>/<solution>`` answer and ends the
episode. ``reward="similarity"`` is the SWE-RL rule-based reward (``swe_gym.swerl.reward``);
``reward="execution"`` turns the edits into a patch and grades it by running the task's tests
(``swe_gym.grading.grade_patch``): 1.0 resolved, 0.0 not. A format error is -1 under both.
When grading gives no verdict (``grading_error``), the episode ends truncated with reward 0 and
``info["end_reason"] = "grading_error"``, ``info["error"]`` saying why.

The code context is the files the gold patch modifies plus ``max_context_files`` more chosen
by ``context_selector`` (``"bm25"``, ``"none"``, ``"task"`` = the curated
``meta["relevant_files"]``, or a callable), read at ``base_commit`` from the task's local clone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
from gymnasium.error import ResetNeeded
from gymnasium.utils import seeding

from envs.selection import select_task
from envs.spaces import UnicodeText
from swe_gym.errors import unknown_choice
from swe_gym.swerl.apply import make_patch
from swe_gym.swerl.context import CodeContext, build_code_context, resolve_selector
from swe_gym.swerl.prompt import SYSTEM_PROMPT, build_prompt
from swe_gym.swerl.reward import FORMAT_ERROR_REWARD, swerl_reward
from swe_gym.tasks import Task, load_tasks

REWARDS = ("similarity", "execution")
MAX_TEXT = 4_000_000  # characters; a 16k-token SWE-RL context is ~64k characters


def default_repo_resolver(repo: str) -> Path:
    """The local git clone holding ``repo``'s commits (``swe_gym.repos.local_repo``)."""
    from swe_gym.repos import local_repo

    return Path(local_repo(repo))


class SWERLEnv(gym.Env[str, str]):
    """Single-turn SWE-RL env. ``reset(seed, options={"task_id": ...}) -> (prompt, info)``;
    ``step(response) -> ("", reward, True, False, info)``."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        tasks: str | Iterable[Mapping[str, Any] | Task] = "starter",
        split: str = "test",
        reward: str = "similarity",
        context_selector: str | Callable[[str, Mapping[str, str], int], list[str]] | None = "bm25",
        max_context_files: int = 3,
        backend: str = "local",
        seed: int | None = None,
        repo_resolver: Callable[[str], Path] | None = None,
        repos_dir: str | Path | None = None,
        sandbox_options: dict[str, Any] | None = None,
        grading_timeout: float = 900.0,
        max_prompt_chars: int = MAX_TEXT,
    ):
        if reward not in REWARDS:
            raise unknown_choice("reward", reward, REWARDS)
        if max_context_files < 0:
            raise ValueError(f"max_context_files must be >= 0, got {max_context_files}")
        # Similarity rewards need no tests: curated rows that were not execution-validated load too.
        self.tasks = load_tasks(tasks, split=split, require_tests=reward == "execution")
        if not self.tasks:
            raise ValueError(f"task source {tasks!r} holds no tasks")
        self._by_id = {t.instance_id: t for t in self.tasks}
        self.reward_kind = reward
        self._use_task_meta = context_selector == "task"
        self.selector = None if self._use_task_meta else resolve_selector(context_selector)
        self.max_context_files = max_context_files
        self.backend = backend
        if repo_resolver is None and repos_dir is not None:
            # the clone layout curation and the sandboxes share: DIR/<owner>__<name>
            repo_resolver = lambda repo: Path(repos_dir) / repo.replace("/", "__")  # noqa: E731
        self.repo_resolver = repo_resolver or default_repo_resolver
        self.sandbox_options = dict(sandbox_options or {})
        if repos_dir is not None and backend == "local":
            self.sandbox_options.setdefault("repos_dir", str(repos_dir))
        self.grading_timeout = grading_timeout
        self.max_prompt_chars = max_prompt_chars
        self.observation_space = UnicodeText(MAX_TEXT)
        self.action_space = UnicodeText(MAX_TEXT)
        self._contexts: dict[str, CodeContext] = {}
        self._task: Task | None = None
        self._done = True
        if seed is not None:  # seeds the task choice; reset(seed=...) reseeds
            self._np_random, self._np_random_seed = seeding.np_random(seed)

    # ------------------------------------------------------------------ context and prompt
    def code_context(self, task: Task) -> CodeContext:
        """The files shown to the model for ``task`` (cached per task)."""
        ctx = self._contexts.get(task.instance_id)
        if ctx is None:
            repo = self.repo_resolver(task.repo)
            if self._use_task_meta:
                relevant = list(task.meta.get("relevant_files") or [])[: self.max_context_files]
                ctx = build_code_context(
                    repo,
                    task.base_commit,
                    task.problem_statement,
                    task.code_files,
                    selector=lambda _i, cands, k: [p for p in relevant if p in cands][:k],
                    max_relevant=len(relevant),
                    candidate_filter=lambda p: p in relevant,
                )
            else:
                ctx = build_code_context(
                    repo,
                    task.base_commit,
                    task.problem_statement,
                    task.code_files,
                    selector=self.selector,
                    max_relevant=self.max_context_files,
                )
            self._contexts[task.instance_id] = ctx
        return ctx

    def _prompt(self, task: Task, ctx: CodeContext) -> str:
        files = dict(ctx.files)
        prompt = build_prompt(task.problem_statement, files)
        # Over budget: drop selector picks (least relevant last-picked first), never gold files.
        for path in reversed(ctx.relevant):
            if len(prompt) <= self.max_prompt_chars:
                break
            files.pop(path, None)
            prompt = build_prompt(task.problem_statement, files)
        if len(prompt) > self.max_prompt_chars:
            raise ValueError(
                f"task {task.instance_id}: the prompt is {len(prompt)} characters even without "
                f"relevant files; raise max_prompt_chars (now {self.max_prompt_chars})"
            )
        return prompt

    # ------------------------------------------------------------------------- gym API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict]:
        super().reset(seed=seed)
        options = options or {}
        task = select_task(self.tasks, self._by_id, self.np_random, options.get("task_id"))
        ctx = self.code_context(task)
        self._task, self._done = task, False
        info = {
            "task_id": task.instance_id,
            "system_prompt": SYSTEM_PROMPT,
            "context_files": list(ctx.files),
        }
        return self._prompt(task, ctx), info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._task is None or self._done:
            raise ResetNeeded(
                "SWERLEnv.step called before reset (or after the episode ended); call reset()"
            )
        if not isinstance(action, str):
            raise TypeError(
                f"the action must be the model's response text (str), got {type(action).__name__}"
            )
        task, ctx = self._task, self._contexts[self._task.instance_id]
        self._done = True
        result = swerl_reward(action, ctx.files, task.patch)
        info: dict[str, Any] = {
            "task_id": task.instance_id,
            "format_ok": result.format_ok,
            "reason": result.reason,
            "detail": result.detail,
            "similarities": result.similarities,
            "similarity_reward": result.reward,
            "edits": [asdict(e) for e in result.edits],
            "patch": "",
        }
        reward = result.reward
        if result.format_ok:
            info["patch"] = make_patch(ctx.files, result.new_files)
        if self.reward_kind == "execution" and result.format_ok:
            from swe_gym.grading import grade_patch  # imported on use: similarity needs no sandbox

            try:
                report = grade_patch(
                    task,
                    info["patch"],
                    backend=self.backend,
                    sandbox_options=self.sandbox_options,
                    timeout=self.grading_timeout,
                )
            except Exception as e:  # noqa: BLE001 - step never raises for the agent's doing
                info.update(end_reason="grading_error", error=f"{type(e).__name__}: {e}")
                return "", 0.0, False, True, info
            info["report"] = report.to_dict()
            if report.reason == "grading_error":  # no verdict: truncated, not a terminal 0
                info.update(end_reason="grading_error", error=report.detail or "grading error")
                return "", 0.0, False, True, info
            reward = 1.0 if report.resolved else 0.0
        elif not result.format_ok:
            reward = FORMAT_ERROR_REWARD
        info["end_reason"] = "submitted"
        return "", float(reward), True, False, info

    def close(self) -> None:
        self._task = None
        self._done = True

    def __enter__(self) -> SWERLEnv:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.close()
        return False  # exceptions propagate (gymnasium.Env's contract)


__all__ = ["REWARDS", "SWERLEnv", "default_repo_resolver"]
