"""Forking an episode: ``SWEEnv.fork(n)`` and ``fork_env(env, n)`` for a wrapped env.

``SWEEnv.fork(n)`` returns n envs at the same step of the same task: each on its own copy of
the sandbox (``swe_gym.sandbox.fork``: the working tree, the shell's cwd, exports and options),
with the same turn count, footer state (cwd, open file), last observation and editor undo
history, and an independent copy of the random generator. The parent goes on unchanged; each
env (parent and children) steps, submits, is graded and is closed on its own: closing the
parent does not close its children. Each child's ``info`` carries ``parent_episode_id`` (the
``episode_id`` of the env it was forked from) and ``branch_turn`` (the parent's turn when
it was forked); a root episode has None for both. Each env's own id is ``env.episode_id``
(new at every ``reset`` and for every child; kept out of ``info`` so that a seeded episode's
infos stay deterministic).

``fork_env(env, n)`` forks through wrappers: the innermost env forks, and each wrapper is
deep-copied around each child (its own state: ``TimeLimit``'s step count, ``OrderEnforcing``'s
reset flag, ``PromptStyle``'s settings). ``env.unwrapped.fork(n)`` gives the bare envs.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

import gymnasium as gym
from gymnasium.error import ResetNeeded

from swe_gym.sandbox.fork import ForkUnsupported, check_fork_count, fork_sandbox


def new_episode_id() -> str:
    return uuid.uuid4().hex[:12]


def fork_swe_env(env: Any, n: int) -> list[Any]:
    """``env.fork(n)`` for a ``SWEEnv`` (see the module docstring)."""
    check_fork_count(n)
    if env._done or env.sandbox is None:
        raise ResetNeeded(
            "cannot fork: the episode is over, closed or never started (fork a running episode: "
            "after reset() and before its submit, last turn or close())"
        )
    sandboxes = fork_sandbox(env.sandbox, n)
    children: list[Any] = []
    try:
        for sandbox in sandboxes:
            child = copy.copy(env)  # tasks and options are shared read-only; the rest is set below
            child._np_random = copy.deepcopy(env._np_random)
            child.sandbox_options = dict(env.sandbox_options)
            child.sandbox = sandbox
            child.editor = env.editor.copy_to(sandbox)
            child.episode_id = new_episode_id()
            child.parent_episode_id, child.branch_turn = env.episode_id, env.turn
            children.append(child)
    except BaseException:
        for sandbox in sandboxes:
            sandbox.close()
        raise
    return children


def fork_env(env: gym.Env, n: int) -> list[gym.Env]:
    """``n`` copies of ``env`` (wrappers and all) at the same step; see the module docstring."""
    check_fork_count(n)
    chain: list[gym.Wrapper] = []
    inner: gym.Env = env
    while isinstance(inner, gym.Wrapper):
        chain.append(inner)
        inner = inner.env
    fork = getattr(inner, "fork", None)
    if fork is None:
        raise ForkUnsupported(
            f"{type(inner).__name__} cannot fork: it has no fork(n) method (SWEEnv has)"
        )
    out: list[gym.Env] = []
    for base in fork(n):
        memo: dict[int, Any] = {id(inner): base}
        wrapped = base
        for wrapper in reversed(chain):  # innermost first: each finds its new env in the memo
            wrapped = copy.deepcopy(wrapper, memo)
            memo[id(wrapper)] = wrapped
        out.append(wrapped)
    return out


__all__ = ["fork_env", "fork_swe_env", "new_episode_id"]
