"""Many episodes at once, on threads, so a batching engine (vLLM) sees concurrent requests.

Each episode gets its own env instance, closed after it. One slow or failing episode does not
stall the others: a failure is recorded in its trajectory (``finish_reason="error"``); an episode
past ``episode_timeout_s`` is recorded as ``"timeout"``, its env is closed from outside (which
kills its sandbox) and its slot goes to the next episode at once. Nothing is raised.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agents.protocols import Model
from agents.react import ReActAgent, run_episode
from agents.trajectory import Trajectory

EnvFactory = Callable[[], Any]


def _make_factory(env_id_or_factory: str | EnvFactory, env_kwargs: dict[str, Any]) -> EnvFactory:
    if callable(env_id_or_factory):
        return env_id_or_factory
    import gymnasium

    import swe_gym  # noqa: F401 - registers the ids

    return lambda: gymnasium.make(env_id_or_factory, **env_kwargs)


@dataclass
class _Running:
    index: int
    task_id: str | None
    seed: int | None
    thread: threading.Thread
    stop: threading.Event
    trajectory: Trajectory
    started: float
    env: list[Any] = field(default_factory=list)  # filled once the env exists


def rollout(
    env_id_or_factory: str | EnvFactory,
    model: Model,
    tasks: Sequence[str | None],
    n_per_task: int = 1,
    concurrency: int = 8,
    agent_kwargs: dict[str, Any] | None = None,
    episode_timeout_s: float | None = None,
    *,
    env_kwargs: dict[str, Any] | None = None,
    seed: int = 0,
    agent_factory: Callable[[Model], Any] | None = None,
    progress: Callable[[Trajectory], None] | None = None,
) -> list[Trajectory]:
    """Run ``n_per_task`` episodes of every task id; return trajectories in task-major order.

    Args:
        env_id_or_factory: a registered id (``gymnasium.make(id, **env_kwargs)``) or a callable
            returning a fresh env.
        model: shared by all episodes (it must be thread-safe; the scripted, transformers and
            vLLM backends are).
        tasks: task ids (``None`` lets the env choose).
        agent_kwargs: ``ReActAgent`` settings; ``agent_factory(model)`` replaces ReActAgent.
        episode_timeout_s: wall-clock limit of one episode (``None``: none).
        seed: episode ``j`` of a task gets seed ``seed + j``.
        progress: called with each finished trajectory (from the calling thread).
    """
    if n_per_task < 1:
        raise ValueError(f"n_per_task must be >= 1, got {n_per_task}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    make_env = _make_factory(env_id_or_factory, dict(env_kwargs or {}))
    jobs = [(tid, seed + j) for tid in tasks for j in range(n_per_task)]
    results: list[Trajectory | None] = [None] * len(jobs)
    done = threading.Condition()
    finished: list[int] = []

    def work(run: _Running) -> None:
        try:
            env = make_env()
            run.env.append(env)
            agent = (
                agent_factory(model) if agent_factory else ReActAgent(model, **(agent_kwargs or {}))
            )
            run_episode(
                env, agent, run.task_id, run.seed, stop_event=run.stop, trajectory=run.trajectory
            )
        except Exception as e:  # noqa: BLE001 - env construction failed; record, never raise
            run.trajectory.finish_reason = "error"
            run.trajectory.error = f"{type(e).__name__}: {e}"
        finally:
            with done:
                finished.append(run.index)
                done.notify()

    active: dict[int, _Running] = {}
    next_job = 0
    while next_job < len(jobs) or active:
        while next_job < len(jobs) and len(active) < concurrency:
            tid, s = jobs[next_job]
            run = _Running(
                next_job,
                tid,
                s,
                threading.Thread(),
                threading.Event(),
                Trajectory(task_id=tid, seed=s),
                time.monotonic(),
            )
            # Daemon: a thread stuck past its timeout must not keep the process alive.
            run.thread = threading.Thread(
                target=work, args=(run,), daemon=True, name=f"episode-{next_job}"
            )
            active[next_job] = run
            run.thread.start()
            next_job += 1
        with done:
            if not finished:
                wait = None
                if episode_timeout_s is not None:
                    first = min(r.started for r in active.values())
                    wait = max(0.0, first + episode_timeout_s - time.monotonic())
                done.wait(timeout=wait)
            ended, finished[:] = list(finished), []
        for i in ended:
            ended_run = active.pop(i, None)
            if ended_run is not None:  # None: it had already been timed out
                results[i] = ended_run.trajectory
                if progress:
                    progress(ended_run.trajectory)
        if episode_timeout_s is not None:
            now = time.monotonic()
            for i, run in list(active.items()):
                if now - run.started >= episode_timeout_s:
                    del active[i]
                    results[i] = snapshot = _timed_out(run, episode_timeout_s)
                    if progress:
                        progress(snapshot)
    return [r for r in results if r is not None]


def _timed_out(run: _Running, timeout_s: float) -> Trajectory:
    """Snapshot the partial trajectory as a timeout, and stop the episode from outside."""
    run.stop.set()
    traj = copy.copy(run.trajectory)
    traj.turns = list(run.trajectory.turns)
    traj.finish_reason = "timeout"
    traj.error = f"episode exceeded episode_timeout_s={timeout_s}"
    traj.wall_s = time.monotonic() - run.started
    if run.env:
        # Closing kills the sandbox, so a command stuck inside it returns; do it off this thread.
        threading.Thread(target=_close_quietly, args=(run.env[0],), daemon=True).start()
    return traj


def _close_quietly(env: Any) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001 - the episode's own thread reports what it sees
        pass
