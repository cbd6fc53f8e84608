"""Driving one env episode with any ``Agent``: the control-flow exceptions an agent raises
(``AgentStop`` and its subclasses, each with the ``finish_reason`` recorded), and the steps
``agents.react.run_episode`` and the branched runner (``agents.branching``) share: start (reset
env and agent), play turns, record how it ended, finish (close the env, the wall time)."""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any

from agents.protocols import Agent
from agents.trajectory import ENV_FAILURES, Trajectory, Turn


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


def start_episode(
    env: Any, agent: Any, traj: Trajectory, task_id: str | None, seed: int | None, answer: Any
) -> tuple[str, dict[str, Any]]:
    """Reset ``env`` and ``agent`` and fill ``traj``'s header; returns the first observation and
    info. ``answer``: what ``needs_answer`` is asked of (the caller's agent or model)."""
    traj.task_id, traj.seed = task_id, seed
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
        wants = needs_answer(answer) or needs_answer(getattr(agent, "model", None))
        agent_info.setdefault("task", task if wants else public_task(task))
    agent.reset(obs, agent_info)
    return obs, info


def play_turns(
    env: Any,
    agent: Any,
    traj: Trajectory,
    obs: str,
    info: dict[str, Any],
    *,
    stop_event: threading.Event | None = None,
    until_turn: int | None = None,
) -> tuple[bool, str, dict[str, Any]]:
    """Turns until the env ends the episode (``(True, obs, info)``, its end recorded) or, with
    ``until_turn``, until ``traj`` holds that many turns (``(False, obs, info)``: the observation
    and info the next ``act`` takes). Raises what the agent or env raises."""
    while until_turn is None or len(traj.turns) < until_turn:
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
            return True, obs, info
    return False, obs, info


def record_stop(traj: Trajectory, exc: BaseException) -> None:
    """An episode ended by an exception: an ``AgentStop``'s finish reason and message, else
    ``error`` with the traceback."""
    if isinstance(exc, AgentStop):
        traj.finish_reason = exc.finish_reason
        traj.error = str(exc)
    else:
        traj.finish_reason = "error"
        traj.error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}"


def finish_episode(
    env: Any, agent: Any, traj: Trajectory, started: float, *, close_env: bool = True
) -> None:
    """What ends every episode: the token-exact flag, the diff when the env graded none, the
    env closed (``close_env``), the wall time since ``started`` (``time.perf_counter``)."""
    traj.token_exact = bool(getattr(agent, "token_exact", False))
    if traj.finish_reason not in ("submitted", "max_turns") and not traj.patch:
        traj.patch = _current_diff(env)
    if close_env:
        try:
            env.close()
        except Exception as e:  # noqa: BLE001
            traj.error = (traj.error or "") + f"\nenv.close() failed: {type(e).__name__}: {e}"
    traj.wall_s = time.perf_counter() - started


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
