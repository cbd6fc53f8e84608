"""Rollouts with your own agent program (``--agent module:factory``) behind the gateway.

The agent program talks to the policy only through an OpenAI-compatible endpoint, so any agent
written against the ``openai`` client is trainable. Per rollout call an ``agents.gateway.Gateway``
serves the policy's engine on localhost; every episode gets its own API key, which
names its gateway session (the gateway keeps only a hash of it). The env rewards the episode;
the gateway session gives its token-exact ``Trajectory``, which the learner trains on.

The factory contract (called once per episode, with keywords)::

    program = factory(base_url="http://127.0.0.1:PORT/v1", api_key="sk-episode-...", model=NAME)
    program(env)   # runs ONE episode: env.reset(), then env.step(text) until it ends

- ``env`` is a ``gymnasium`` env of the run's ``--env``. Its ``reset()`` starts the episode's
  task with the episode's seed, whatever the program passes; a second ``reset()``, or a
  ``step()`` after the end or past ``episode_timeout_s``, raises. The program's return value is
  ignored; the reward is what the env paid.
- Sampling is the run's, whatever the request asks: ``temperature``, no top-p, at most
  ``max_new_tokens`` and what still fits ``max_context_tokens`` (a prompt that leaves no room is
  a 400 ``context_length_exceeded``; the episode ends as ``context_overflow``), and a seed per
  (task, episode seed, turn), as the built-in agent samples.
- An episode the program leaves before the env ends it, or that raises, is an ``error`` (dropped
  from training and counted, like a crashed built-in episode).
- A session whose history the program edited, or whose template re-renders history, has
  several segments (``agents.gateway.sessions``, ``agent["segment_starts"]``); every one is
  trained, each as its own sequence with the episode's advantage (``algos.rollout.scoring.segments``),
  and the metrics count them (``segments``, ``prefix_failures``).
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agents.gateway import APIError, Gateway, key_session_id
from agents.react import record_end, turn_seed
from agents.trajectory import Trajectory
from algos.config.checks import AgentFactory, load_agent_factory

if TYPE_CHECKING:
    from agents.protocols import Model


@dataclass
class _Limits:
    temperature: float
    max_new_tokens: int
    max_context_tokens: int


class _RunSampling:
    """The engine under the run's sampling settings (what the gateway serves)."""

    def __init__(self, model: Any, cfg: _Limits):
        self.model, self.cfg = model, cfg
        self.name, self.tokenizer = model.name, model.tokenizer
        self.overflowed: set[str] = set()  # sessions refused for their context length
        self._lock = threading.Lock()

    def generate(self, conversation: Any, params: Any) -> Any:
        meta = conversation.metadata
        room = self.cfg.max_context_tokens - len(conversation.token_ids)
        if room < 1:
            with self._lock:
                self.overflowed.add(meta.get("session"))
            raise APIError(
                400,
                f"the prompt is {len(conversation.token_ids)} tokens; max_context_tokens="
                f"{self.cfg.max_context_tokens} leaves no room to generate",
                "messages",
                "context_length_exceeded",
            )
        seed = params.seed
        if meta.get("seed") is not None:
            seed = turn_seed(f"{meta.get('task_id')}\0{meta['seed']}", meta["turn"])
        params = dataclasses.replace(
            params,
            temperature=self.cfg.temperature,
            top_p=1.0,
            max_new_tokens=min(params.max_new_tokens, self.cfg.max_new_tokens, room),
            seed=seed,
        )
        return self.model.generate(conversation, params)


class EpisodeTimeout(RuntimeError):
    """The episode ran past ``episode_timeout_s`` (raised by the env's ``step``)."""


def _wrap_env(
    env: Any,
    task_id: str | None,
    seed: int,
    timeout_s: float | None,
    traj: Trajectory,
    on_reset: Callable[[Any], None],
) -> Any:
    import gymnasium

    episode_seed = seed  # reset()'s own ``seed`` argument is the program's, and is overridden

    class EpisodeEnv(gymnasium.Wrapper):
        """One episode of ``env``: the rollout picks the task and seed, and reads the outcome."""

        started = False
        ended = False
        deadline = None if timeout_s is None else time.monotonic() + timeout_s

        def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
            if self.started:
                raise RuntimeError("one episode per program call: reset() was called twice")
            self.started = True
            opts = {"task_id": task_id} if task_id is not None else None
            obs, info = self.env.reset(seed=episode_seed, options=opts)
            traj.task_id = info.get("task_id", task_id)
            traj.system_prompt, traj.prompt = info.get("system_prompt", ""), obs
            on_reset(getattr(self.env.unwrapped, "task", None))
            return obs, info

        def step(self, action: Any) -> Any:
            if not self.started or self.ended:
                raise RuntimeError("step() outside the episode (before reset() or after its end)")
            if self.deadline is not None and time.monotonic() > self.deadline:
                raise EpisodeTimeout(f"episode ran past episode_timeout_s={timeout_s}")
            obs, reward, terminated, truncated, info = self.env.step(action)
            traj.reward += float(reward)
            if info.get("patch") is not None:
                traj.patch = info["patch"]
            if terminated or truncated:
                self.ended = True
                record_end(traj, terminated, info)
            return obs, reward, terminated, truncated, info

    return EpisodeEnv(env)


def _engine_view(task: Any, sampling: _RunSampling) -> Any:
    """The task as the engine sees it in each turn's metadata: whole only for an oracle."""
    from agents.react import needs_answer, public_task

    return task if task is None or needs_answer(sampling.model) else public_task(task)


def _episode(
    gateway: Gateway,
    sampling: _RunSampling,
    factory: AgentFactory,
    make_env: Callable[[], Any],
    task_id: str | None,
    seed: int,
    spec: Any,
) -> Trajectory:
    api_key = "sk-episode-" + secrets.token_hex(16)
    sid = key_session_id(api_key)
    gateway.open_session(sid, task_id=task_id, seed=seed, session=sid)
    traj = Trajectory(task_id=task_id, seed=seed)
    started = time.perf_counter()
    env = None
    try:
        env = _wrap_env(
            make_env(),
            task_id,
            seed,
            spec.episode_timeout_s,
            traj,
            lambda task: gateway.open_session(sid, task=_engine_view(task, sampling)),
        )
        program = factory(base_url=gateway.url, api_key=api_key, model=gateway.name)
        program(env)
        if not env.ended:
            traj.finish_reason = "error"
            traj.error = "the agent program returned before the env ended the episode"
    except EpisodeTimeout as e:
        traj.finish_reason, traj.error = "timeout", str(e)
    except Exception as e:  # noqa: BLE001 - one program's failure must not end the run
        traj.finish_reason, traj.error = "error", f"{type(e).__name__}: {e}"
    finally:
        if env is not None:
            try:
                env.close()
            except Exception as e:  # noqa: BLE001
                traj.error = (traj.error or "") + f"\nenv.close() failed: {type(e).__name__}: {e}"
    recorded = take_session(traj, gateway, sampling, sid)
    traj.agent = {**recorded.agent, "program": spec.agent}
    traj.wall_s = time.perf_counter() - started
    return traj


def take_session(traj: Trajectory, gateway: Gateway, sampling: _RunSampling, sid: str) -> Any:
    """The episode's gateway session into ``traj`` (its turns, model and the run's sampling; an
    error of a prompt past the context is ``context_overflow``); returns the session's record."""
    if sid in sampling.overflowed and traj.finish_reason == "error":
        traj.finish_reason = "context_overflow"
    recorded = gateway.pop_session(sid)
    traj.turns = recorded.turns  # every segment: the learner trains each (scoring.segments)
    traj.token_exact = bool(traj.turns)
    traj.model = recorded.model
    traj.sampling = {
        "temperature": sampling.cfg.temperature,
        "top_p": 1.0,
        "max_new_tokens": sampling.cfg.max_new_tokens,
    }
    return recorded


# one episode through the gateway: (gateway, sampling, task id, episode seed) -> its trajectory
GatewayEpisode = Callable[[Gateway, "_RunSampling", str, int], Trajectory]


def run_through_gateway(
    spec: Any,
    engine: Model,
    task_ids: Sequence[str],
    n_per_task: int,
    seed: int,
    progress: Callable[[Trajectory], None] | None,
    episode: GatewayEpisode,
    thread_name: str,
) -> list[Trajectory]:
    """``n_per_task`` episodes per task (task-major order, episode ``j`` seeded ``seed + j``),
    ``spec.concurrency`` at once, each run by ``episode`` against one gateway in front of
    ``engine`` under the run's sampling limits (``spec.agent_kwargs``)."""
    params = spec.agent_kwargs["params"]
    limits = _Limits(
        params.temperature, params.max_new_tokens, spec.agent_kwargs["max_context_tokens"]
    )
    sampling = _RunSampling(engine, limits)
    jobs = [(tid, seed + j) for tid in task_ids for j in range(n_per_task)]
    results: list[Trajectory | None] = [None] * len(jobs)
    with (
        Gateway(sampling, default_max_tokens=limits.max_new_tokens) as gateway,
        ThreadPoolExecutor(max_workers=spec.concurrency, thread_name_prefix=thread_name) as pool,
    ):
        futures = {
            pool.submit(episode, gateway, sampling, tid, s): i for i, (tid, s) in enumerate(jobs)
        }
        for future in as_completed(futures):
            traj = results[futures[future]] = future.result()
            if progress:
                progress(traj)
    return [t for t in results if t is not None]


def run_agent_rollouts(
    spec: Any,
    engine: Model,
    task_ids: Sequence[str],
    n_per_task: int,
    seed: int,
    progress: Callable[[Trajectory], None] | None = None,
) -> list[Trajectory]:
    """``n_per_task`` episodes per task (task-major order, episode ``j`` seeded ``seed + j``)
    of ``spec.agent``'s program, ``spec.concurrency`` at once, through a gateway in front of
    ``engine`` (a token engine: ``TransformersModel``, ``VLLMModel``).

    ``spec``: an ``algos.rollout.collect.RolloutSpec`` with ``agent`` set (``env``, ``env_kwargs``,
    ``concurrency``, ``episode_timeout_s``, and ``agent_kwargs`` holding ``params`` and
    ``max_context_tokens``, the run's sampling limits)."""
    import gymnasium

    import swe_gym  # noqa: F401 - registers the env ids

    factory = load_agent_factory(spec.agent)

    def episode(gateway: Gateway, sampling: _RunSampling, tid: str, s: int) -> Trajectory:
        make_env = lambda: gymnasium.make(spec.env, **spec.env_kwargs)  # noqa: E731
        return _episode(gateway, sampling, factory, make_env, tid, s, spec)

    return run_through_gateway(
        spec, engine, task_ids, n_per_task, seed, progress, episode, "agent-episode"
    )
