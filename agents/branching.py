"""Branched groups: one trunk episode played to a branch turn, then forked into n branches.

A group of a branched run is not n independent episodes of a task but one *trunk*, played for
``branch_turn`` turns, whose env is then forked (``envs.fork.fork_env``: the sandbox's working
tree, the shell's state and the editor's history copied) into n envs at the same step. Each
branch goes on with its own copy of the agent (``ReActAgent.branch``: the conversation's token
ids and counters) and samples its later turns with seeds of its own, derived from (task id,
episode seed, branch index). A branch's ``Trajectory`` holds the trunk's turns, token-identical,
followed by its own; ``Trajectory.branch`` records the trunk's episode id (``parent_episode_id``),
its own, ``branch_turn``, ``branch_index`` and the fork's seconds (``fork_s``, the same on every
branch of a group).

Fallback: when the trunk's episode ends before the branch turn (it submitted, hit a limit, the
agent stopped, an error) or the fork fails, there is no state to branch from; the group becomes
n plain episodes of the task instead: the trunk is episode 0 (seed ``seed``) and n - 1 more are
played from the start with seeds ``seed + 1 ...``, exactly the episodes a plain group would
have. Every member's ``branch`` is then ``{"fallback": why, "planned_turn": K, "branch_index":
j}`` (why: the trunk's ``finish_reason``, or ``fork_error``), so a run counts these groups.

Timeouts: ``timeout_s`` bounds each episode of the group from the trunk's start (a branch's
episode began with its trunk); past it every env of the group is closed from outside (which
kills its sandbox and so any command stuck in it) and the unfinished episodes end as ``timeout``.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from functools import partial
from typing import Any

import gymnasium as gym

from agents.episode import finish_episode, play_turns, record_stop, start_episode
from agents.trajectory import Trajectory

log = logging.getLogger(__name__)

EnvFactory = Callable[[], Any]
AgentFactory = Callable[[], Any]


def can_fork(env: Any) -> bool:
    """Whether ``fork_env`` can fork ``env``: its innermost env (under the wrappers) has
    ``fork(n)`` (``SWEEnv`` has; the toy envs have not)."""
    inner = env
    while isinstance(inner, gym.Wrapper):
        inner = inner.env
    return callable(getattr(inner, "fork", None))


class _Group:
    """The envs a group holds, its stop event and its deadline's timer."""

    def __init__(self, timeout_s: float | None):
        self.stop = threading.Event()
        self.envs: list[Any] = []
        self.lock = threading.Lock()
        self.timer: threading.Timer | None = None
        if timeout_s is not None:
            self.timer = threading.Timer(timeout_s, self.expire)
            self.timer.daemon = True
            self.timer.start()

    def hold(self, env: Any) -> Any:
        with self.lock:
            self.envs.append(env)
            late = self.stop.is_set()
        if late:
            _close_quietly(env)
        return env

    def expire(self) -> None:
        self.stop.set()
        with self.lock:
            envs = list(self.envs)
        for env in envs:  # closing kills the sandbox, so a stuck command returns
            threading.Thread(target=_close_quietly, args=(env,), daemon=True).start()

    def done(self) -> None:
        if self.timer is not None:
            self.timer.cancel()


def _close_quietly(env: Any) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001 - the episode's own thread reports what it sees
        pass


def _mark_timeout(traj: Trajectory, group: _Group, timeout_s: float | None) -> None:
    if group.stop.is_set() and traj.finish_reason == "error":
        traj.finish_reason = "timeout"
        traj.error = f"episode exceeded episode_timeout_s={timeout_s}\n{traj.error or ''}"


def _plain_episode(
    make_env: EnvFactory,
    make_agent: AgentFactory,
    task_id: str | None,
    seed: int,
    group: _Group,
    timeout_s: float | None,
) -> Trajectory:
    traj = Trajectory(task_id=task_id, seed=seed)
    started = time.perf_counter()
    env: Any = None
    agent: Any = None
    try:
        env = group.hold(make_env())
        agent = make_agent()
        obs, info = start_episode(env, agent, traj, task_id, seed, answer=agent)
        play_turns(env, agent, traj, obs, info, stop_event=group.stop)
    except Exception as e:  # noqa: BLE001 - recorded in the trajectory, never raised
        record_stop(traj, e)
    finally:
        if env is not None:
            finish_episode(env, agent, traj, started)
    _mark_timeout(traj, group, timeout_s)
    return traj


def _branch_of(trunk: Trajectory, record: dict[str, Any]) -> Trajectory:
    """A branch's trajectory so far: the trunk's header and turns (copied), its bookkeeping."""
    traj = copy.copy(trunk)
    traj.turns = copy.deepcopy(trunk.turns)
    traj.sampling, traj.agent = dict(trunk.sampling), dict(trunk.agent)
    traj.branch = record
    return traj


def run_branched_group(
    make_env: EnvFactory,
    make_agent: AgentFactory,
    task_id: str | None,
    seed: int,
    n_branches: int,
    branch_turn: int,
    *,
    timeout_s: float | None = None,
    fork: Callable[[Any, int], list[Any]] | None = None,
) -> list[Trajectory]:
    """One group of ``n_branches`` episodes of ``task_id``: a trunk played ``branch_turn`` turns,
    then forked (module docstring); returns the branches in index order, or the fallback's plain
    episodes. ``make_agent()`` must give an agent with ``branch(index)`` (``ReActAgent``).
    ``fork``: ``envs.fork.fork_env`` by default. Never raises for what happens in an episode."""
    if n_branches < 1 or branch_turn < 1:
        raise ValueError(
            f"need n_branches >= 1 and branch_turn >= 1; got {n_branches}, {branch_turn}"
        )
    if fork is None:
        from envs.fork import fork_env

        fork = fork_env
    group = _Group(timeout_s)
    try:
        return _run(
            make_env, make_agent, task_id, seed, n_branches, branch_turn, group, fork, timeout_s
        )
    finally:
        group.done()


def _run(
    make_env: EnvFactory,
    make_agent: AgentFactory,
    task_id: str | None,
    seed: int,
    n: int,
    k: int,
    group: _Group,
    fork: Callable[[Any, int], list[Any]],
    timeout_s: float | None,
) -> list[Trajectory]:
    started = time.perf_counter()
    trunk = Trajectory(task_id=task_id, seed=seed)
    env: Any = None
    agent: Any = None
    ended = True
    obs: str = ""
    info: dict[str, Any] = {}
    try:
        env = group.hold(make_env())
        agent = make_agent()
        if not callable(getattr(agent, "branch", None)):
            raise TypeError(f"{type(agent).__name__} cannot branch: it has no branch(index)")
        obs, info = start_episode(env, agent, trunk, task_id, seed, answer=agent)
        ended, obs, info = play_turns(
            env, agent, trunk, obs, info, stop_event=group.stop, until_turn=k
        )
    except Exception as e:  # noqa: BLE001 - the trunk's end is recorded, then the fallback
        record_stop(trunk, e)
    kids: list[Any] = []
    reason = None
    fork_s = 0.0
    if ended:
        reason = trunk.finish_reason
    else:
        trunk_id = getattr(getattr(env, "unwrapped", env), "episode_id", None)
        t0 = time.perf_counter()
        try:
            kids = [group.hold(kid) for kid in fork(env, n)]
        except Exception as e:  # noqa: BLE001 - a failed fork falls back to plain episodes
            log.warning(
                "fork of task %s at turn %d failed: %s: %s", task_id, k, type(e).__name__, e
            )
            reason = "fork_error"
            trunk.finish_reason, trunk.error = "error", f"fork failed: {type(e).__name__}: {e}"
        fork_s = time.perf_counter() - t0
    if reason is not None:
        if env is not None:
            finish_episode(env, agent, trunk, started)
        _mark_timeout(trunk, group, timeout_s)
        return _fallback(make_env, make_agent, trunk, n, k, reason, group, timeout_s)
    _close_quietly(env)  # the trunk's env is done: each branch has its own copy
    record = {
        "parent_episode_id": trunk_id,
        "branch_turn": k,
        "fork_s": fork_s,
    }

    def branch(index: int) -> Trajectory:
        kid = kids[index]
        twin = agent.branch(index)
        own_id = getattr(getattr(kid, "unwrapped", kid), "episode_id", None)
        traj = _branch_of(trunk, {**record, "branch_index": index, "episode_id": own_id})
        try:
            play_turns(kid, twin, traj, obs, info, stop_event=group.stop)
        except Exception as e:  # noqa: BLE001 - recorded in the trajectory, never raised
            record_stop(traj, e)
        finally:
            finish_episode(kid, twin, traj, started)
        _mark_timeout(traj, group, timeout_s)
        return traj

    return _on_threads([partial(branch, i) for i in range(n)], f"branch-{task_id}")


def _fallback(
    make_env: EnvFactory,
    make_agent: AgentFactory,
    trunk: Trajectory,
    n: int,
    k: int,
    reason: str,
    group: _Group,
    timeout_s: float | None,
) -> list[Trajectory]:
    seed = trunk.seed or 0
    job = partial(_plain_episode, make_env, make_agent, trunk.task_id)
    rest = _on_threads(
        [partial(job, seed + j, group, timeout_s) for j in range(1, n)], f"fallback-{trunk.task_id}"
    )
    out = [trunk, *rest]
    for j, traj in enumerate(out):
        traj.branch = {"fallback": reason, "planned_turn": k, "branch_index": j}
    return out


def _on_threads(jobs: Sequence[Callable[[], Trajectory]], name: str) -> list[Trajectory]:
    """Each job on its own thread (the model batches their requests); results in job order."""
    if len(jobs) == 1:
        return [jobs[0]()]
    with ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix=name) as pool:
        return list(pool.map(lambda job: job(), jobs))


def branched_rollout(
    make_env: EnvFactory,
    make_agent: AgentFactory,
    tasks: Sequence[str | None],
    n_per_task: int,
    branch_turns: Sequence[int],
    *,
    concurrency: int = 8,
    episode_timeout_s: float | None = None,
    seed: int = 0,
    progress: Callable[[Trajectory], None] | None = None,
    fork: Callable[[Any, int], list[Any]] | None = None,
) -> list[Trajectory]:
    """One branched group of ``n_per_task`` per task (``branch_turns[i]`` for ``tasks[i]``), in
    task-major order like ``agents.rollout.rollout``. ``concurrency`` bounds the episodes
    running at once: ``max(1, concurrency // n_per_task)`` groups run together (each has one
    sandbox before its fork and ``n_per_task`` after). Every trunk's seed is ``seed`` (episode
    0 of a plain group). ``progress`` is called with each trajectory from the calling thread."""
    if len(branch_turns) != len(tasks):
        raise ValueError(f"{len(tasks)} tasks but {len(branch_turns)} branch turns")
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    results: list[list[Trajectory]] = [[] for _ in tasks]
    workers = max(1, min(len(tasks), concurrency // n_per_task))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="group") as pool:
        futures = {
            pool.submit(
                run_branched_group,
                make_env,
                make_agent,
                tid,
                seed,
                n_per_task,
                k,
                timeout_s=episode_timeout_s,
                fork=fork,
            ): i
            for i, (tid, k) in enumerate(zip(tasks, branch_turns, strict=True))
        }
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            if progress is not None:
                for traj in results[futures[future]]:
                    progress(traj)
    return [t for group in results for t in group]
