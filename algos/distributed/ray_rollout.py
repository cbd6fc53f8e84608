"""Rollouts on a Ray cluster: workers spread over nodes, shared inference engines, fault tolerance.

- **Workers** (``RolloutWorker`` actors) run agent loops with their sandboxes; placed with the
  ``SPREAD`` strategy so the sandboxes (CPU, disk, containers) spread over the nodes. A worker
  is a threaded actor: it runs up to ``worker_concurrency`` episodes at once, each through
  :func:`agents.rollout.rollout` (per-episode timeout, env always closed).
- **Sandbox starts** are capped per node by one ``NodeStartLimiter`` actor per node (an asyncio
  semaphore pinned to that node): a worker takes a slot around ``env.reset()`` (where the
  sandbox starts), so a burst of resets cannot storm one Docker daemon.
- **Inference engines** (``InferenceEngine`` actors, e.g. a ``VLLMModel`` each, data-parallel;
  ``engine_num_gpus`` > 1 for a tensor-parallel engine) are shared by every worker: the model
  inside a worker is an :class:`EngineProxy` (the ``Model`` protocol) that calls an engine,
  sticky per conversation so the engine's prefix cache is reused across turns.
- **Weights**: :meth:`RayRolloutPool.push_weights` sends a saved HF folder path (shared
  filesystem) or a state dict (through the object store, one copy per node) to every engine.
- **Faults**: the driver hands out one episode at a time per worker slot. A worker (or its
  node) that dies costs only its in-flight episodes: per ``on_failure`` they are retried on
  another worker (``"retry"``, up to ``max_retries``), or recorded as failed trajectories
  (``"record"``: ``finish_reason="error"``), or dropped (``"drop"``). The iteration completes;
  dead workers are replaced (``replace_dead_workers``).

``ray.init()`` on a laptop runs the same code on one node.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, WorkerCrashedError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from swe_gym.errors import unknown_choice

FAILURE_POLICIES = ("retry", "record", "drop")
_DEAD = (RayActorError, WorkerCrashedError)


@dataclass
class RayRolloutConfig:
    """How rollouts spread over the cluster."""

    num_workers: int = 2
    worker_concurrency: int = 4
    """Episodes one worker runs at once (threads)."""
    worker_num_cpus: float = 1.0
    """Ray CPUs reserved per worker (the sandboxes' share; Nebius gives an agent 0.5 CPU)."""
    max_sandbox_starts_per_node: int = 8
    on_failure: str = "retry"
    """retry | record | drop: what happens to the in-flight episodes of a dead worker."""
    max_retries: int = 1
    replace_dead_workers: bool = True
    episode_timeout_s: float | None = None
    env_id: str = "SWEStarter-v0"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    agent_kwargs: dict[str, Any] = field(default_factory=dict)
    num_engines: int = 0
    """0: each worker builds its own model from ``model_factory``; > 0: shared engines."""
    engine_num_gpus: float = 0.0
    """GPUs per engine (its tensor-parallel size)."""
    engine_num_cpus: float = 1.0
    engine_concurrency: int = 64

    def __post_init__(self) -> None:
        if self.on_failure not in FAILURE_POLICIES:
            raise unknown_choice("on_failure policy", self.on_failure, FAILURE_POLICIES)
        for name in ("num_workers", "worker_concurrency", "max_sandbox_starts_per_node"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_retries < 0 or self.num_engines < 0:
            raise ValueError("max_retries and num_engines must be >= 0")


# --------------------------------------------------------------------------- actors


@ray.remote(num_cpus=0)
class NodeStartLimiter:
    """A per-node semaphore on sandbox starts; records the peak number held at once."""

    def __init__(self, limit: int):
        self._sem = asyncio.Semaphore(limit)
        self.held = 0
        self.peak = 0
        self.total = 0

    async def acquire(self) -> None:
        await self._sem.acquire()
        self.held += 1
        self.total += 1
        self.peak = max(self.peak, self.held)

    async def release(self) -> None:
        self.held -= 1
        self._sem.release()

    async def stats(self) -> dict[str, int]:
        return {"held": self.held, "peak": self.peak, "total": self.total}


class InferenceEngine:
    """One model replica (``model_factory()``, e.g. a VLLMModel) serving every worker."""

    def __init__(self, model_factory: Callable[[], Any]):
        self.model = model_factory()
        self.weight_version = 0

    def generate(self, conversation: Any, params: Any) -> Any:
        return self.model.generate(conversation, params)

    def name(self) -> str:
        return getattr(self.model, "name", type(self.model).__name__)

    def update_weights(self, source: Any, version: int | None = None) -> int:
        """``source``: an HF folder path or a state dict (resolved from the object store)."""
        update = getattr(self.model, "update_weights", None)
        if update is None:
            raise TypeError(f"{type(self.model).__name__} has no update_weights()")
        # an engine that tracks versions stamps them on every Generation (in-flight updates)
        takes_version = "version" in inspect.signature(update).parameters
        if takes_version and version is not None:
            update(source, version=version)
        else:
            update(source)
        self.weight_version = version if version is not None else self.weight_version + 1
        return self.weight_version

    def version(self) -> int:
        return self.weight_version


class EngineProxy:
    """``Model`` protocol inside a worker: forwards ``generate`` to an engine actor."""

    def __init__(self, engines: Sequence[Any], name: str | None = None):
        if not engines:
            raise ValueError("EngineProxy needs at least one engine")
        self.engines = list(engines)
        # trajectories record the engine's model name, not the proxy's
        self.name = name or ray.get(self.engines[0].name.remote())
        self.tokenizer: Any = None  # set by the worker (algos.policy.engine_client)

    def _pick(self, conversation: Any) -> Any:
        # sticky per episode: the first message identifies the conversation -> prefix cache hits
        msgs = getattr(conversation, "messages", None) or [{}]
        key = repr(msgs[:2]).encode()
        return self.engines[zlib.crc32(key) % len(self.engines)]

    def generate(self, conversation: Any, params: Any) -> Any:
        return ray.get(self._pick(conversation).generate.remote(conversation, params))


class _StartCapped:
    """Env proxy: ``reset`` (where the sandbox starts) holds a slot of the node's limiter."""

    def __init__(self, env: Any, limiter: Any):
        self._env, self._limiter = env, limiter

    def reset(self, *args: Any, **kwargs: Any):
        if self._limiter is None:
            return self._env.reset(*args, **kwargs)
        ray.get(self._limiter.acquire.remote())
        try:
            return self._env.reset(*args, **kwargs)
        finally:
            self._limiter.release.remote()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)


class RolloutWorker:
    """Runs single episodes on request (threaded actor: several at once)."""

    def __init__(
        self,
        config: RayRolloutConfig,
        model_factory: Callable[[], Any] | None,
        engines: Sequence[Any],
        limiters: dict[str, Any],
    ):
        self.config = config
        self.node_id = ray.get_runtime_context().get_node_id()
        self.limiter = limiters.get(self.node_id)
        if engines:
            self.model = EngineProxy(engines)
        elif model_factory is not None:
            self.model = model_factory()
        else:
            raise ValueError("RolloutWorker needs a model_factory or engines")

    def _make_env(self) -> Any:
        import gymnasium

        import swe_gym  # noqa: F401 - registers the env ids

        env = gymnasium.make(self.config.env_id, **self.config.env_kwargs)
        return _StartCapped(env, self.limiter)

    def run_episode(self, task_id: str | None, seed: int) -> dict[str, Any]:
        from agents.rollout import rollout

        trajs = rollout(
            self._make_env,
            self.model,
            [task_id],
            n_per_task=1,
            concurrency=1,
            agent_kwargs=self.config.agent_kwargs,
            episode_timeout_s=self.config.episode_timeout_s,
            seed=seed,
        )
        out = trajs[0].to_dict()
        out["_node_id"] = self.node_id
        return out

    def ping(self) -> str:
        return self.node_id


# --------------------------------------------------------------------------- driver


@dataclass
class RolloutResult:
    """Trajectories in job order (``None`` for dropped jobs) and what happened."""

    trajectories: list[Any]
    failed: int = 0
    retried: int = 0
    dropped: int = 0
    dead_workers: int = 0
    wall_s: float = 0.0
    episodes_per_node: dict[str, int] = field(default_factory=dict)


def _failed_trajectory(task_id: str | None, seed: int, why: str) -> Any:
    from agents.trajectory import Trajectory

    return Trajectory(task_id=task_id, seed=seed, finish_reason="error", error=why)


class RayRolloutPool:
    """Workers, engines and per-node limiters on the current Ray cluster (``ray.init`` first)."""

    def __init__(self, config: RayRolloutConfig, model_factory: Callable[[], Any] | None = None):
        if not ray.is_initialized():
            raise RuntimeError("call ray.init() (or ray.init(address='auto') on a cluster) first")
        if config.num_engines == 0 and model_factory is None:
            raise ValueError("give a model_factory (per-worker model or engine model)")
        self.config = config
        self.model_factory = model_factory
        nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
        limiter_cls: Any = NodeStartLimiter  # a Ray actor class (@ray.remote): untyped handles
        self.limiters = {
            nid: limiter_cls.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(nid, soft=False),
            ).remote(config.max_sandbox_starts_per_node)
            for nid in nodes
        }
        engine_cls = ray.remote(InferenceEngine)
        self.engines: list[Any] = [  # Ray actor handles
            engine_cls.options(
                num_cpus=config.engine_num_cpus,
                num_gpus=config.engine_num_gpus,
                max_concurrency=config.engine_concurrency,
                scheduling_strategy="SPREAD",
            ).remote(model_factory)
            for _ in range(config.num_engines)
        ]
        self._worker_cls = ray.remote(RolloutWorker)
        self.workers = [self._new_worker() for _ in range(config.num_workers)]
        self.weight_version = 0

    def _new_worker(self) -> Any:
        c = self.config
        return self._worker_cls.options(
            num_cpus=c.worker_num_cpus,
            max_concurrency=c.worker_concurrency + 1,
            scheduling_strategy="SPREAD",
            max_restarts=0,
            max_task_retries=0,
        ).remote(c, None if self.engines else self.model_factory, self.engines, self.limiters)

    def push_weights(self, source: Any, timeout_s: float = 600) -> int:
        """Send new weights to every engine: an HF folder path, or a state dict (object store)."""
        if not self.engines:
            raise RuntimeError("no engines: the pool runs per-worker models (num_engines=0)")
        self.weight_version += 1
        arg = source if isinstance(source, str) else ray.put(source)
        ray.get(
            [e.update_weights.remote(arg, self.weight_version) for e in self.engines],
            timeout=timeout_s,
        )
        return self.weight_version

    def limiter_stats(self) -> dict[str, dict[str, int]]:
        return {nid: ray.get(a.stats.remote()) for nid, a in self.limiters.items()}

    def run(
        self,
        jobs: Sequence[tuple[str | None, int]],
        progress: Callable[[int, Any], None] | None = None,
    ) -> RolloutResult:
        """Run every ``(task_id, seed)`` job once; returns trajectories in job order.

        ``progress(job_index, trajectory)`` is called on the driver as episodes finish.
        """
        from agents.trajectory import Trajectory

        c = self.config
        t0 = time.monotonic()
        res = RolloutResult(trajectories=[None] * len(jobs))
        attempts = [0] * len(jobs)
        queue = list(range(len(jobs)))
        inflight: dict[Any, tuple[int, Any]] = {}  # ref -> (job, worker)
        load = {id(w): 0 for w in self.workers}
        alive = list(self.workers)

        def dispatch() -> None:
            while queue and alive:
                w = min(alive, key=lambda x: load[id(x)])
                if load[id(w)] >= c.worker_concurrency:
                    return
                j = queue.pop(0)
                attempts[j] += 1
                ref = w.run_episode.remote(*jobs[j])
                inflight[ref] = (j, w)
                load[id(w)] += 1

        def finish(j: int, traj: Any) -> None:
            res.trajectories[j] = traj
            if progress is not None:
                progress(j, traj)

        def worker_died(w: Any, why: str) -> None:
            if w in alive:
                alive.remove(w)
                res.dead_workers += 1
                if c.replace_dead_workers:
                    nw = self._new_worker()
                    self.workers[self.workers.index(w)] = nw
                    load[id(nw)] = 0
                    alive.append(nw)

        dispatch()
        while inflight:
            done, _ = ray.wait(list(inflight), num_returns=1)
            ref = done[0]
            j, w = inflight.pop(ref)
            load[id(w)] -= 1
            try:
                row = ray.get(ref)
            except _DEAD as e:
                why = f"rollout worker died: {type(e).__name__}: {str(e).splitlines()[0]}"
                worker_died(w, why)
                if c.on_failure == "retry" and attempts[j] <= c.max_retries:
                    res.retried += 1
                    queue.insert(0, j)
                elif c.on_failure == "drop":
                    res.dropped += 1
                else:
                    res.failed += 1
                    finish(j, _failed_trajectory(*jobs[j], why))
            else:
                node = row.pop("_node_id", "?")
                res.episodes_per_node[node] = res.episodes_per_node.get(node, 0) + 1
                finish(j, Trajectory.from_dict(row))
            if not alive and queue:
                for k in queue:  # nothing left to run them: record, never hang
                    res.failed += 1
                    finish(k, _failed_trajectory(*jobs[k], "no rollout worker alive"))
                queue.clear()
            dispatch()
        res.wall_s = time.monotonic() - t0
        return res

    def shutdown(self) -> None:
        for a in [*self.workers, *self.engines, *self.limiters.values()]:
            try:
                ray.kill(a)
            except Exception:  # noqa: BLE001 - already dead
                pass

    def wait_ready(self, timeout_s: float = 120) -> None:
        """Block until every worker answers (actor start-up can take seconds)."""
        try:
            ray.get([w.ping.remote() for w in self.workers], timeout=timeout_s)
        except GetTimeoutError as e:
            raise TimeoutError(
                f"{len(self.workers)} rollout workers not ready after {timeout_s}s: does the "
                f"cluster have {self.config.num_workers * self.config.worker_num_cpus} free CPUs?"
            ) from e
