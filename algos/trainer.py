"""The one RL loop behind ``algos.grpo`` and ``algos.dapo`` (and the pieces ``algos.rft`` reuses).

One iteration (:meth:`Trainer.iteration`), methods.md 3-5:

1. sample ``problems_per_iteration`` tasks from the pool (:class:`TaskSampler`, resumable);
2. roll out ``group_size`` episodes per task through ``agents.rollout`` with the policy's engine
   (temperature 1.0, no top-k/top-p);
3. reward = env reward (or ``reward_fn``) + the turn-based length penalty when enabled; a reward
   function that raises drops that sample (counted, error logged); episodes that crashed or are
   not token-exact are dropped (counted); when all of them fail, or more than
   ``max_error_share``, the run stops with the first error (:class:`EpisodesFailed`); with
   ``mask_failed_groups`` every group holding a failed or timed-out episode is left out;
4. group advantages (``advantage_estimator``: grpo, ``algos.core.group_advantages``, or rloo);
5. the named filter drops samples (``nonzero_advantage``: Nebius; ``nonconstant_group``: DAPO
   dynamic sampling; ``none``: GRPO); while fewer than ``batch_size`` samples survive, more
   problems are sampled (at most ``max_refill_rounds`` extra rounds), then ``on_exhausted``
   decides: ``error`` (default, :class:`DynamicSamplingExhausted`) or ``skip`` (the iteration
   is counted in ``skipped_iterations`` and training goes on);
6. samples longer than ``max_context_tokens`` are truncated (counted); overlong episodes are
   dropped only with ``overlong_filter``;
7. the kept samples are shuffled and split into ``min(max_steps_per_iteration,
   kept // batch_size)`` mini-batches, one optimiser step each (``algos.learner.Learner``:
   global-token normalisation, clipping, KL, NaN-skip);
8. the new weights are pushed to the rollout engine; up to ``save_episodes`` of the iteration's
   episodes go to ``RUN_DIR/episodes/`` (``python -m algos.report``); metrics (with the
   sampler/learner mismatch) go to ``metrics.jsonl`` (and TensorBoard / W&B); a checkpoint
   (learner + task sampler + iteration) is written.

Ctrl-C: the current optimiser step finishes, then a checkpoint is written and the process exits
with status 130; ``--resume RUN_DIR`` continues the same run.

Scale: :func:`build_policy` (model, tokenizer, rollout engine) and ``learner_factory``
(:func:`algos.distributed.learner.make_learner` by default) are the only places that create them.
Under ``torchrun --nproc-per-node N`` the learner is FSDP2-sharded over N ranks (``cp`` of them
split each sequence); rank 0 alone rolls out, scores and filters, then broadcasts the kept samples
to every rank, and alone logs and holds the rollout engine (the full weights are gathered for each
push). Checkpoints are then sharded (every rank writes its part) and resumable with any number
of processes. ``rollout_backend=ray`` runs the episodes on a Ray cluster (:class:`RayRollouts`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import importlib
import inspect
import json
import logging
import math
import os
import random
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch

from algos import core
from algos.config import ConfigError, save_config, to_dict
from algos.data import Sample
from algos.distributed.fsdp import (
    DistContext,
    full_state_dict,
    setup_distributed,
    training_device,
)
from algos.learner import Learner, LearnerConfig
from algos.report import save_iteration_episodes
from swe_gym.errors import unknown_choice

log = logging.getLogger(__name__)

FILTERS = ("none", "nonzero_advantage", "nonconstant_group")
ON_EXHAUSTED = ("error", "skip")
OLD_LOGPROBS = ("auto", "sampler", "recompute")
CHECKPOINT_DIR = "checkpoint"
METRICS_FILE = "metrics.jsonl"
SOLVE_RATES_FILE = "solve_rates.json"


class DynamicSamplingExhausted(RuntimeError):
    """Fewer than ``batch_size`` samples survived the filter after every refill round."""


class EpisodesFailed(RuntimeError):
    """Every episode of an iteration (or more than ``max_error_share`` of them) failed in its
    rollout or its reward: a broken setup, not a signal to learn from (or to skip quietly)."""


# ------------------------------------------------------------------------------------------
# Policy: model + tokenizer + rollout engine (the seam for distributed set-ups)
# ------------------------------------------------------------------------------------------


@dataclass
class Policy:
    """The trained model, its tokenizer and the ``agents`` model that samples rollouts."""

    model: torch.nn.Module
    tokenizer: Any
    path: Path  # a Hugging Face folder holding the initial weights (what vLLM loads)
    sampler: Any = None  # agents Model used for rollouts
    on_policy: bool = True  # the sampler samples from the policy's weights
    shares_weights: bool = False  # the sampler IS the training module (no push needed)
    engine_dtype: torch.dtype | None = None  # cast pushed weights to the engine's dtype

    @property
    def needs_push(self) -> bool:
        """Whether the engine holds its own copy of the weights (pushed after each update)."""
        return self.on_policy and not self.shares_weights

    def push_weights(self, state: dict[str, torch.Tensor] | None = None) -> float:
        """Send the current weights (or ``state``: the gathered full weights of a sharded model)
        to the rollout engine; returns seconds spent."""
        if not self.needs_push or self.sampler is None:
            return 0.0
        t0 = time.perf_counter()
        dtype = self.engine_dtype
        state = self.model.state_dict() if state is None else state
        state = {k: (v.detach().to(dtype) if dtype is not None and v.is_floating_point()
                     else v.detach()) for k, v in state.items()}
        self.sampler.update_weights(state)
        return time.perf_counter() - t0

    def close(self) -> None:
        close = getattr(self.sampler, "close", None)
        if close is not None:
            close()


def load_policy_model(spec: str, run_dir: Path, seed: int = 0,
                      yarn_factor: float | None = None) -> tuple[torch.nn.Module, Any, Path]:
    """``(model, tokenizer, folder)`` for a policy spec: smollm2, tiny-random or a folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if spec == "smollm2":
        from agents.models.smollm2 import smollm2_path

        path = Path(smollm2_path())
    elif spec == "tiny-random":
        from agents.models.smollm2 import tiny_random_model

        path = run_dir / "tiny-random-init"
        if not (path / "config.json").exists():
            tiny_random_model(path, seed=seed)
    else:
        path = Path(spec.removeprefix("hf:"))
        if not (path / "config.json").is_file():
            raise ConfigError(
                f"policy {spec!r} is not 'smollm2', 'tiny-random' or a Hugging Face model folder "
                f"(no {path}/config.json)"
            )
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    if yarn_factor:
        from algos.distributed.long_context import apply_yarn

        apply_yarn(model.config, yarn_factor)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    return model, tokenizer, path


def build_policy(cfg: Any, run_dir: Path, share_module: bool = True) -> Policy:
    """Load the policy and its rollout engine as ``cfg`` says (see RunConfig.engine).

    ``share_module=False`` gives the transformers engine its own copy even in float32 (a
    sharded training module cannot sample on one rank alone).
    """
    model, tokenizer, path = load_policy_model(
        cfg.policy, run_dir, cfg.seed, getattr(cfg, "yarn_factor", None))
    policy = Policy(model=model, tokenizer=tokenizer, path=path,
                    engine_dtype=getattr(torch, cfg.engine_dtype))
    if cfg.rollout_backend == "ray":
        policy.sampler = RayRollouts(cfg, path)
        policy.on_policy = cfg.rollout_model == "policy"
        return policy
    if cfg.rollout_model != "policy":
        from agents.models import load_model

        kw: dict[str, Any] = {"tokenizer": tokenizer}
        policy.sampler = load_model(cfg.rollout_model, **kw)
        policy.on_policy = False
        return policy
    if cfg.engine == "vllm":
        from agents.models.vllm import VLLMModel

        extra: dict[str, Any] = {}
        if getattr(cfg, "yarn_factor", None):  # the engine must use the same extended rope
            extra["hf_overrides"] = {
                "rope_parameters": model.config.rope_parameters,
                "max_position_embeddings": model.config.max_position_embeddings}
        policy.sampler = VLLMModel(str(path), max_model_len=cfg.max_context_tokens,
                                   dtype=cfg.engine_dtype, seed=cfg.seed, name=cfg.policy,
                                   gpu_memory_utilization=cfg.engine_gpu_memory, **extra)
        # the folder holds the policy's weights; resumed weights are pushed by Trainer._resume
    elif cfg.engine_dtype == "float32" and share_module:
        from agents.models.transformers import TransformersModel

        # On the training device from the start (RFT rolls out before its learner exists); the
        # sampler reads the module's device at every call, so a later move is followed too.
        model.to(training_device())
        policy.sampler = TransformersModel(model, tokenizer=tokenizer, seed=cfg.seed,
                                           name=cfg.policy)
        policy.shares_weights = True
    else:
        from agents.models.transformers import TransformersModel

        engine_model = copy.deepcopy(model).to(training_device(), getattr(torch, cfg.engine_dtype))
        policy.sampler = TransformersModel(engine_model, tokenizer=tokenizer, seed=cfg.seed,
                                           name=cfg.policy)
    return policy


def rollout_engine(spec: str, path: str, engine: str, dtype: str, seed: int, max_model_len: int,
                   name: str) -> Any:
    """An ``agents`` model sampling from the HF folder ``path`` (built inside a Ray actor), or
    the off-policy model ``spec`` when it is not 'policy'."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if spec != "policy":
        from agents.models import load_model

        return load_model(spec, tokenizer=tokenizer)
    if engine == "vllm":
        from agents.models.vllm import VLLMModel

        return VLLMModel(path, max_model_len=max_model_len, dtype=dtype, seed=seed, name=name)
    from transformers import AutoModelForCausalLM

    from agents.models.transformers import TransformersModel

    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    return TransformersModel(model, tokenizer=tokenizer, seed=seed, name=name)


def engine_client(engines: Sequence[Any], path: str, name: str) -> Any:
    """The model inside a Ray rollout worker: an ``EngineProxy`` to the shared engine actors,
    given the policy's tokenizer so the agent renders exact token ids (a proxy without one gives
    text-only, not token-exact, trajectories that the trainer would drop)."""
    from transformers import AutoTokenizer

    from algos.distributed.ray_rollout import EngineProxy

    proxy = EngineProxy(engines, name=name)
    proxy.tokenizer = AutoTokenizer.from_pretrained(path)
    return proxy


class RayRollouts:
    """``rollout_backend=ray``: episodes on :class:`~algos.distributed.ray_rollout.RayRolloutPool`
    workers (each runs ``concurrency`` agent loops with their sandboxes). On-policy, the workers'
    models call one shared engine actor (an ``InferenceEngine``), which :meth:`update_weights`
    refreshes; an off-policy ``rollout_model`` is built inside each worker."""

    def __init__(self, cfg: Any, path: Path):
        import ray

        from algos.distributed.ray_rollout import (
            InferenceEngine,
            RayRolloutConfig,
            RayRolloutPool,
        )

        if getattr(cfg, "yarn_factor", None):
            raise ConfigError("yarn_factor is not supported with rollout_backend=ray yet; use "
                              "rollout_backend=threads")
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            ray.init(address=cfg.ray_address, include_dashboard=False, log_to_driver=False)
        rcfg = RayRolloutConfig(
            num_workers=cfg.ray_workers, worker_concurrency=cfg.concurrency,
            max_sandbox_starts_per_node=cfg.max_sandbox_starts_per_node,
            episode_timeout_s=cfg.episode_timeout_s, env_id=cfg.env,
            env_kwargs=env_kwargs_for(cfg), agent_kwargs=agent_kwargs(cfg))
        factory = partial(rollout_engine, cfg.rollout_model, str(path), cfg.engine,
                          cfg.engine_dtype, cfg.seed, cfg.max_context_tokens, cfg.policy)
        self.engines: list[Any] = []
        self.weight_version = 0
        if cfg.rollout_model == "policy":  # one shared engine; the workers hold clients
            gpus = 1.0 if cfg.engine == "vllm" and torch.cuda.is_available() else 0.0
            self.engines = [ray.remote(InferenceEngine).options(
                num_cpus=rcfg.engine_num_cpus, num_gpus=gpus,
                max_concurrency=rcfg.engine_concurrency).remote(factory)]
            factory = partial(engine_client, self.engines, str(path), cfg.policy)
        self.pool = RayRolloutPool(rcfg, model_factory=factory)
        self.pool.wait_ready()

    def rollout(self, task_ids: Sequence[str], n_per_task: int, seed: int,
                progress: Callable[[Any], None] | None = None) -> list[Any]:
        """Same jobs, seeds and order as :func:`agents.rollout.rollout` (task-major)."""
        jobs = [(t, seed + j) for t in task_ids for j in range(n_per_task)]
        res = self.pool.run(jobs, progress=None if progress is None else
                            (lambda _j, traj: progress(traj)))
        return list(res.trajectories)

    def update_weights(self, state: dict[str, torch.Tensor]) -> None:
        """The new weights to every engine (through the object store, one copy per node)."""
        import ray

        self.weight_version += 1
        ref = ray.put(state)
        ray.get([e.update_weights.remote(ref, self.weight_version) for e in self.engines])

    def close(self) -> None:
        import ray

        self.pool.shutdown()
        for engine in self.engines:
            ray.kill(engine)
        if self._owns_ray:
            ray.shutdown()


LearnerFactory = Callable[..., Any]


def default_learner_factory(model: torch.nn.Module, config: LearnerConfig, *,
                            ref_model: torch.nn.Module | None, tokenizer: Any,
                            cp: int = 1) -> Learner:
    """A plain Learner in one process; an FSDP2 (+ CP) DistributedLearner under torchrun."""
    from algos.distributed.learner import make_learner

    return make_learner(model, config, cp=cp, ref_model=ref_model, tokenizer=tokenizer)


# ------------------------------------------------------------------------------------------
# Task pool and sampler
# ------------------------------------------------------------------------------------------


def env_task_ids(env_id: str, env_kwargs: dict[str, Any]) -> list[str]:
    """Every task id of an env (its ``tasks`` attribute), without starting an episode."""
    import gymnasium

    import swe_gym  # noqa: F401 - registers the ids

    if env_id not in gymnasium.registry:
        raise unknown_choice("env id", env_id, [k for k in gymnasium.registry if "-v" in k
                                                and not k.startswith(("ALE", "Gym"))][:40])
    env = gymnasium.make(env_id, **env_kwargs)
    try:
        return [t.instance_id for t in env.unwrapped.tasks]
    finally:
        env.close()


def env_accepts(env_id: str, name: str) -> bool:
    """Whether the env's constructor takes keyword ``name`` (e.g. max_turns)."""
    import gymnasium

    entry = gymnasium.spec(env_id).entry_point
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        entry = getattr(importlib.import_module(module), attr)
    try:
        params = inspect.signature(entry).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def filter_pool_by_solve_rate(pool: list[str], path: str | Path, high: float = 2 / 3) -> list[str]:
    """Stage 2 pool (methods.md 4): drop tasks solved >= ``high`` of the time and never solved.

    ``path``: JSON ``{task_id: rate}`` or ``{task_id: {"attempts": n, "resolved": k}}`` (what a
    stage-1 run writes to ``solve_rates.json``). Tasks missing from the file are dropped.
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    rates: dict[str, float] = {}
    for tid, v in data.items():
        if isinstance(v, dict):
            rates[tid] = v["resolved"] / v["attempts"] if v.get("attempts") else 0.0
        else:
            rates[tid] = float(v)
    kept = [t for t in pool if t in rates and 0.0 < rates[t] < high]
    if not kept:
        raise ConfigError(
            f"solve-rate file {path} leaves no task with 0 < rate < {high:.3f} in the pool of "
            f"{len(pool)}; check the file or train stage 1 longer"
        )
    return kept


class TaskSampler:
    """Shuffled passes over the pool (a fresh permutation per epoch, from ``seed``)."""

    def __init__(self, pool: Sequence[str], seed: int = 0):
        if not pool:
            raise ConfigError("the task pool is empty; check tasks= and the env's task source")
        self.pool = list(pool)
        self.seed = seed
        self.epoch = 0
        self.position = 0
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> list[str]:
        order = list(self.pool)
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def sample(self, n: int) -> list[str]:
        out = []
        for _ in range(n):
            if self.position >= len(self._order):
                self.epoch += 1
                self.position = 0
                self._order = self._permutation(self.epoch)
            out.append(self._order[self.position])
            self.position += 1
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position, "pool": self.pool}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if list(state["pool"]) != self.pool:
            log.warning("task pool changed since the checkpoint; restarting the sampler's epoch")
            return
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._order = self._permutation(self.epoch)


# ------------------------------------------------------------------------------------------
# Rollouts, rewards, samples
# ------------------------------------------------------------------------------------------


def agent_kwargs(cfg: Any) -> dict[str, Any]:
    from agents.protocols import SamplingParams

    # No fixed seed: the agent derives one per turn from the episode's seed (each episode of a
    # group has its own), so groups sample independently of the rollout's thread order.
    params = SamplingParams(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens)
    return {
        "params": params,
        "max_turns": cfg.max_turns,
        "max_context_tokens": cfg.max_context_tokens,
        "max_consecutive_invalid": cfg.max_consecutive_invalid,
    }


def env_kwargs_for(cfg: Any) -> dict[str, Any]:
    kw = dict(cfg.env_kwargs)
    if env_accepts(cfg.env, "max_turns"):
        kw.setdefault("max_turns", cfg.max_turns)
    return kw


def run_rollouts(cfg: Any, sampler: Any, task_ids: Sequence[str], n_per_task: int, seed: int,
                 progress: Callable[[Any], None] | None = None) -> list[Any]:
    """``n_per_task`` episodes per task (task-major order) through ``agents.rollout``."""
    from agents.rollout import rollout

    if isinstance(sampler, RayRollouts):
        return sampler.rollout(task_ids, n_per_task, seed, progress)

    return rollout(cfg.env, sampler, list(task_ids), n_per_task=n_per_task,
                   concurrency=cfg.concurrency, agent_kwargs=agent_kwargs(cfg),
                   episode_timeout_s=cfg.episode_timeout_s, env_kwargs=env_kwargs_for(cfg),
                   seed=seed, progress=progress)


def check_prompt_fits(cfg: Any, tokenizer: Any, task_id: str) -> int:
    """Tokens of the first prompt of ``task_id``; a clear error if the context cannot hold it
    plus one completion (checked once, before any rollout)."""
    import gymnasium

    from agents.chat import ChatTemplate

    env = gymnasium.make(cfg.env, **env_kwargs_for(cfg))
    try:
        obs, info = env.reset(seed=cfg.seed, options={"task_id": task_id})
    finally:
        env.close()
    messages = ([{"role": "system", "content": info["system_prompt"]}]
                if info.get("system_prompt") else []) + [{"role": "user", "content": obs}]
    n = len(ChatTemplate(tokenizer).initial_ids(messages))
    if n + 1 > cfg.max_context_tokens:
        raise ConfigError(
            f"the prompt of task {task_id!r} is {n} tokens but max_context_tokens="
            f"{cfg.max_context_tokens} leaves no room to generate; raise max_context_tokens "
            f"to at least {n + cfg.max_new_tokens}"
        )
    return n


def load_reward_fn(spec: str | None) -> Callable[[Any], float] | None:
    """``'module:function'`` -> the function (called with a Trajectory, returns a float)."""
    if not spec:
        return None
    module, _, name = spec.partition(":")
    if not name:
        raise ConfigError(f"reward_fn {spec!r} must be 'module:function'")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"reward_fn {spec!r} cannot be imported: {e}") from None


def is_overlong(traj: Any) -> bool:
    """Cut by a limit rather than ended by the agent (methods.md 4-5 "overlong")."""
    if traj.finish_reason in ("max_turns", "context_overflow"):
        return True
    return bool(traj.turns) and traj.turns[-1].completion_finish_reason == "length"


@dataclass
class Scored:
    """One usable trajectory with its reward, group and (later) advantage."""

    traj: Any
    group: int
    reward: float
    advantage: float = 0.0


@dataclass
class Counters:
    """Per-iteration counts of what was dropped and why."""

    episodes: int = 0
    rollout_errors: int = 0
    env_failures: int = 0  # scored (reward 0) but the env's failure: a dead sandbox, no verdict
    not_token_exact: int = 0
    reward_errors: int = 0
    truncated: int = 0
    overlong_dropped: int = 0
    empty: int = 0
    filtered: int = 0
    failure_masked: int = 0
    errors: list[str] = field(default_factory=list)

    def add(self, other: Counters) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


def score_trajectories(cfg: Any, trajs: Sequence[Any], groups: Sequence[int],
                       reward_fn: Callable[[Any], float] | None,
                       counters: Counters) -> list[Scored]:
    """Rewards (+ turn length penalty); drops crashed / non-token-exact / unscorable episodes."""
    out = []
    for traj, group in zip(trajs, groups, strict=True):
        counters.episodes += 1
        if traj.finish_reason == "error" or not traj.turns:
            counters.rollout_errors += 1
            counters.errors.append(f"rollout {traj.task_id}: {(traj.error or 'no turns')[:300]}")
            continue
        if not traj.token_exact:
            counters.not_token_exact += 1
            counters.errors.append(f"rollout {traj.task_id}: not token-exact (the model returned "
                                   "text without its token ids; use a token backend)")
            continue
        try:
            reward = float(reward_fn(traj)) if reward_fn is not None else float(traj.reward)
            if not math.isfinite(reward):
                raise ValueError(f"reward is {reward}")
        except Exception as e:  # noqa: BLE001 - a broken reward drops the sample, not the run
            counters.reward_errors += 1
            counters.errors.append(f"reward {traj.task_id}: {type(e).__name__}: {e}")
            log.warning("reward function failed on task %s: %s: %s", traj.task_id,
                        type(e).__name__, e)
            continue
        if traj.finish_reason in ENV_FAILURES:
            counters.env_failures += 1
            counters.errors.append(f"env {traj.task_id}: {traj.finish_reason}: "
                                   f"{(traj.error or '')[:300]}")
        if getattr(cfg, "length_penalty", False):
            reward += float(core.turn_length_penalty(
                torch.tensor([traj.num_turns]), cfg.length_threshold, cfg.max_turns)[0])
        out.append(Scored(traj, group, reward))
    return out


# Ends that say nothing about the policy: the rollout or the env failed (agents' FINISH_REASONS)
ENV_FAILURES = ("sandbox_failed", "grading_error")
INFRA_FAILURES = ("error", "timeout", *ENV_FAILURES)


def mask_failed_groups(trajs: Sequence[Any], groups: Sequence[int], scored: list[Scored],
                       counters: Counters) -> list[Scored]:
    """Drop every scored member of a group in which an episode failed: it ended in
    ``INFRA_FAILURES`` (a rollout error, a timeout, a dead sandbox, no grading verdict) or was
    not scored at all (e.g. its reward function raised); counted in ``failure_masked``."""
    ok = {id(s.traj) for s in scored}
    failed = torch.tensor([id(t) not in ok or t.finish_reason in INFRA_FAILURES for t in trajs])
    keep = core.keep_groups_without_failures(failed, torch.tensor(list(groups)))
    bad_groups = {g for g, k in zip(groups, keep.tolist(), strict=True) if not k}
    out = [s for s in scored if s.group not in bad_groups]
    counters.failure_masked += len(scored) - len(out)
    return out


def check_episode_errors(counters: Counters, max_share: float, where: str) -> None:
    """Raise :class:`EpisodesFailed` (with the first error) when every episode failed or more
    than ``max_share`` of them did; only the filters drop episodes on purpose."""
    failed = (counters.rollout_errors + counters.env_failures + counters.not_token_exact
              + counters.reward_errors)
    if not failed or (failed < counters.episodes and failed <= max_share * counters.episodes):
        return
    first = counters.errors[0] if counters.errors else "(no message)"
    raise EpisodesFailed(
        f"{where}: {failed} of {counters.episodes} episodes failed ({counters.rollout_errors} "
        f"rollout errors, {counters.env_failures} sandbox/grading failures, "
        f"{counters.not_token_exact} not token-exact, {counters.reward_errors} "
        f"reward errors; max_error_share={max_share}); first error: {first}")


def assign_advantages(cfg: Any, scored: list[Scored]) -> None:
    """Group advantages (methods.md 3-5; ``advantage_estimator``: grpo or rloo) written into
    each ``Scored``."""
    if not scored:
        return
    rewards = torch.tensor([s.reward for s in scored], dtype=torch.float64)
    index = torch.tensor([s.group for s in scored])
    adv = core.compute_advantages(getattr(cfg, "advantage_estimator", "grpo"), rewards, index,
                                  normalize_std=cfg.normalize_std)
    for s, a in zip(scored, adv.tolist(), strict=True):
        s.advantage = a


def apply_filter(name: str, scored: list[Scored]) -> list[Scored]:
    """The samples the named filter keeps (see FILTERS and the module docstring)."""
    if name == "none" or not scored:
        return list(scored)
    if name == "nonzero_advantage":
        keep = core.keep_nonzero_advantage(torch.tensor([s.advantage for s in scored]))
    elif name == "nonconstant_group":
        keep = core.keep_nonconstant_groups(
            torch.tensor([s.reward for s in scored], dtype=torch.float64),
            torch.tensor([s.group for s in scored]))
    else:
        raise unknown_choice("filter", name, FILTERS)
    return [s for s, k in zip(scored, keep.tolist(), strict=True) if k]


def to_sample(traj: Any, advantage: float, max_tokens: int, mask_invalid: bool,
              counters: Counters, sample_id: str) -> Sample | None:
    """The learner's view of a trajectory; truncated to ``max_tokens`` (counted)."""
    ids, mask, lps = traj.to_sample_arrays(mask_invalid=mask_invalid)
    if len(ids) > max_tokens:
        counters.truncated += 1
        ids, mask, lps = ids[:max_tokens], mask[:max_tokens], lps[:max_tokens]
    if len(ids) < 2 or sum(mask) == 0:
        counters.empty += 1
        return None
    return Sample(input_ids=ids, loss_mask=mask,
                  old_logprobs=[lp * m for lp, m in zip(lps, mask, strict=True)],
                  advantage=advantage, sample_id=sample_id)


# ------------------------------------------------------------------------------------------
# Logging, progress, interrupts
# ------------------------------------------------------------------------------------------


class MetricsLogger:
    """``metrics.jsonl`` always; TensorBoard / W&B when asked for and installed."""

    def __init__(self, run_dir: Path, sinks: Sequence[str], config: dict[str, Any],
                 project: str = "swe-gym-rl", resume_from: int | None = None, key: str = "iteration"):
        self.path = run_dir / METRICS_FILE
        self.key = key
        if resume_from is not None and self.path.exists():
            # rows logged after the checkpoint belong to work that will be redone
            rows = [json.loads(line) for line in self.path.read_text().splitlines() if line]
            keep = [r for r in rows if r.get(key, 0) <= resume_from]
            self.path.write_text("".join(json.dumps(r) + "\n" for r in keep))
        self.tb = None
        self.wandb = None
        if "tensorboard" in sinks:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(run_dir / "tensorboard"))
            except ImportError:
                log.warning("tensorboard logging asked for but not installed "
                            "(pip install tensorboard); logging to %s only", self.path)
        if "wandb" in sinks:
            try:
                import wandb

                self.wandb = wandb.init(project=project, dir=str(run_dir), config=config,
                                        name=run_dir.name, resume="allow")
            except ImportError:
                log.warning("wandb logging asked for but not installed (pip install wandb); "
                            "logging to %s only", self.path)

    def log(self, row: dict[str, Any]) -> None:
        row = {k: (float(v) if isinstance(v, int | float) and not isinstance(v, bool) else v)
               for k, v in row.items()}
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        step = int(row.get(self.key, 0))
        scalars = {k: v for k, v in row.items() if isinstance(v, float) and math.isfinite(v)}
        if self.tb is not None:
            for k, v in scalars.items():
                self.tb.add_scalar(k, v, step)
            self.tb.flush()
        if self.wandb is not None:
            self.wandb.log(scalars, step=step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / METRICS_FILE
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class InterruptGuard:
    """SIGINT handling: outside a critical section Ctrl-C raises KeyboardInterrupt at once;
    inside (an optimiser step, a checkpoint save) it is deferred to the section's end."""

    def __init__(self) -> None:
        self._critical = 0
        self._pending = False
        self._previous: Any = None

    def __enter__(self) -> InterruptGuard:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    def _handler(self, signum: int, frame: Any) -> None:
        if self._critical:
            self._pending = True
            return
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def critical(self) -> Iterator[None]:
        self._critical += 1
        try:
            yield
        finally:
            self._critical -= 1
        if self._pending and not self._critical:
            self._pending = False
            raise KeyboardInterrupt


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str, str]]) -> str:
    """A plain-text table; ``columns`` = (header, key, format spec)."""
    cells = [[h for h, _, _ in columns]]
    for row in rows:
        line = []
        for _, key, spec in columns:
            v = row.get(key)
            line.append("-" if v is None or (isinstance(v, float) and math.isnan(v))
                        else format(v, spec))
        cells.append(line)
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    out = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


RESULT_COLUMNS = (
    ("iter", "iteration", ".0f"),
    ("reward", "reward_mean", ".3f"),
    ("resolved", "resolved_rate", ".2f"),
    ("turns", "turns_mean", ".1f"),
    ("filtered", "filtered_frac", ".2f"),
    ("kept", "kept", ".0f"),
    ("steps", "optimizer_steps", ".0f"),
    ("loss", "loss", ".4f"),
    ("kl", "kl", ".4f"),
    ("time_s", "time_s", ".1f"),
)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # pragma: no cover
        pass


# ------------------------------------------------------------------------------------------
# torchrun: shared objects and sharded checkpoints
# ------------------------------------------------------------------------------------------


def broadcast_object(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank (pickled; no-op without a process group)."""
    if not torch.distributed.is_initialized():
        return obj
    box = [obj]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


_GLOBAL_METRICS = ("grad_norm", "lr", "step", "skipped", "skipped_steps", "loss_tokens",
                   "sequences", "tokens", "padded_tokens", "micro_batches", "time_s",
                   "tokens_per_s")


def reduce_step_metrics(metrics: dict[str, float], samples: Sequence[Sample],
                        ctx: DistContext) -> dict[str, float]:
    """One process's view of a DistributedLearner step: its metrics are rank-local (each rank
    saw its DP share), so ``loss`` (already divided by the global token count) is summed over
    the DP ranks, ``*_max``/``*_min`` take the max/min, and the other per-token means are
    weighted by each rank's loss tokens (collective: every rank calls it)."""
    from algos.distributed.fsdp import all_reduce_sum

    weight = float(sum(s.num_loss_tokens for s in ctx.split_for_dp(samples)))
    local = {k: v for k, v in metrics.items() if k not in _GLOBAL_METRICS}
    sums = {f"sum:{k}": v * (1.0 if k == "loss" else weight) for k, v in local.items()
            if not k.endswith(("_max", "_min"))}
    sums = all_reduce_sum({**sums, "weight": weight}, ctx)
    out = dict(metrics)
    for k in local:
        if k == "loss":  # every CP rank of a DP group holds the same loss
            out[k] = sums["sum:loss"] / ctx.cp
        elif k.endswith(("_max", "_min")):
            sign = 1.0 if k.endswith("_max") else -1.0
            t = torch.tensor(sign * metrics[k], dtype=torch.float64)
            torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
            out[k] = sign * float(t)
        else:
            out[k] = sums[f"sum:{k}"] / max(sums["weight"], 1.0)
    return out


def is_sharded_checkpoint(path: Path) -> bool:
    """A DistributedLearner checkpoint (DCP shards + its extra state)."""
    return (path / ".metadata").exists() and (path / "learner_extra.pt").exists()


def find_checkpoint(directory: Path) -> Path | None:
    """The checkpoint to resume from: sharded (or its copy kept by an interrupted sharded save)
    or single-process (``algos.checkpoint``'s layout); ``None`` when there is none."""
    from algos.checkpoint import resolve_checkpoint

    for path in (directory, directory.with_name(f".{directory.name}.old-dcp")):
        if is_sharded_checkpoint(path):
            return path
    try:
        return resolve_checkpoint(directory)
    except FileNotFoundError:
        return None


def load_sharded_into(learner: Learner, ckpt: Path) -> dict[str, Any]:
    """Load a sharded checkpoint (any world size) into a single-process Learner; returns its
    extra state. DCP reshards the weights and optimizer state on load."""
    from algos.distributed import fsdp

    meta = fsdp.load_checkpoint(ckpt, learner.model, learner.optimizer, DistContext())
    extra = torch.load(ckpt / "learner_extra.pt", weights_only=False)
    learner.scheduler.load_state_dict(extra["scheduler"])
    learner.step = int(meta["step"])
    learner.skipped_steps = int(meta.get("skipped_steps", 0))
    return extra["extra_state"] or {}


# ------------------------------------------------------------------------------------------
# The RL loop (GRPO, DAPO)
# ------------------------------------------------------------------------------------------


class Trainer:
    """Runs ``cfg.iterations`` iterations of the loop in the module docstring.

    ``cfg`` is a ``GRPOConfig`` or ``DAPOConfig`` (they name the same choices); ``algo`` names
    the run (``runs/<algo>-<time>``). ``policy``/``learner_factory``/``reward_fn`` override what
    the config would build (tests, distributed set-ups).
    """

    def __init__(self, cfg: Any, algo: str, *, policy: Policy | None = None,
                 learner_factory: LearnerFactory | None = None,
                 reward_fn: Callable[[Any], float] | None = None) -> None:
        self.cfg = cfg
        self.algo = algo
        self.dist: DistContext = setup_distributed(cp=cfg.cp)
        if self.dist.distributed:  # one run_dir for every rank (the default holds the time)
            if self.dist.is_main:
                cfg.resolve_run_dir(algo)
            cfg.run_dir = broadcast_object(cfg.run_dir)
        self.run_dir = cfg.resolve_run_dir(algo)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        seed_everything(cfg.seed)
        self.reward_fn = reward_fn if reward_fn is not None else load_reward_fn(cfg.reward_fn)
        pool = cfg.tasks or env_task_ids(cfg.env, env_kwargs_for(cfg))
        if cfg.solve_rates:
            pool = filter_pool_by_solve_rate(pool, cfg.solve_rates)
        self.sampler = TaskSampler(pool, cfg.seed)
        self.policy = policy if policy is not None else self._build_policy()
        if self.dist.is_main:  # may start a sandbox; only rank 0 rolls out
            self.prompt_tokens = check_prompt_fits(cfg, self.policy.tokenizer, pool[0])
        lcfg = cfg.learner_config()
        ref = None
        if lcfg.kl_coef > 0:
            ref = copy.deepcopy(self.policy.model).eval().requires_grad_(False)
        if learner_factory is None:
            learner_factory = partial(default_learner_factory, cp=cfg.cp)
        self.learner = learner_factory(self.policy.model, lcfg, ref_model=ref,
                                       tokenizer=self.policy.tokenizer)
        mode = cfg.old_logprobs
        if mode == "auto":  # a correction needs the learner's log-probs next to the sampler's
            same = self.policy.on_policy and self.policy.shares_weights
            correct = getattr(cfg, "off_policy_correction", "none") != "none"
            mode = "sampler" if same and not correct else "recompute"
        if mode == "sampler" and not self.policy.on_policy:
            raise ConfigError(
                f"old_logprobs='sampler' needs on-policy rollouts; rollout_model="
                f"{cfg.rollout_model!r} is another model: use old_logprobs=recompute")
        self.old_logprobs_mode = mode
        # a step needs a full batch after filtering; without a filter any survivor will do
        self.needed = cfg.batch_size if cfg.filter != "none" else 1
        self.iteration = 0
        self.solve_counts: dict[str, list[int]] = {}
        self.totals = Counters()
        self.skipped_iterations = 0
        self.rows: list[dict[str, Any]] = []
        self.episodes: list[Any] = []  # the current iteration's trajectories (saved, then freed)
        if cfg.resume:
            self._resume()
        if self.dist.is_main:
            save_config(cfg, self.run_dir)

    def _build_policy(self) -> Policy:
        """:func:`build_policy`; under torchrun rank 0 alone builds the rollout engine (its own
        copy of the weights) and the other ranks load only the model."""
        if not self.dist.distributed:
            return build_policy(self.cfg, self.run_dir)
        cfg = self.cfg
        policy = build_policy(cfg, self.run_dir, share_module=False) if self.dist.is_main else None
        self.dist.barrier()  # rank 0 may have written the initial weights (tiny-random)
        if policy is None:
            model, tokenizer, path = load_policy_model(
                cfg.policy, self.run_dir, cfg.seed, getattr(cfg, "yarn_factor", None))
            policy = Policy(model=model, tokenizer=tokenizer, path=path,
                            on_policy=cfg.rollout_model == "policy")
        return policy

    def push_weights(self) -> float:
        """New weights to the rollout engine; a sharded model is gathered first (collective)."""
        if not self.dist.distributed:
            return self.policy.push_weights()
        if not self.policy.needs_push:
            return 0.0
        t0 = time.perf_counter()
        state = full_state_dict(self.learner.model)  # every rank; rank 0 receives the weights
        if self.dist.is_main:
            self.policy.push_weights(state)
        return time.perf_counter() - t0

    # ------------------------------------------------------------------ checkpoints
    @property
    def checkpoint_dir(self) -> Path:
        return self.run_dir / CHECKPOINT_DIR

    def save(self) -> None:
        extra = {"iteration": self.iteration, "sampler": self.sampler.state_dict(),
                 "solve_counts": self.solve_counts, "skipped_iterations": self.skipped_iterations,
                 "algo": self.algo}
        if hasattr(self.learner, "ctx"):  # DistributedLearner: sharded DCP, every rank writes
            self._save_sharded(extra)
        else:
            self.learner.save_checkpoint(self.checkpoint_dir, extra_state=extra)
        if self.dist.is_main:
            rates = {t: {"attempts": a, "resolved": r, "rate": r / a if a else 0.0}
                     for t, (a, r) in sorted(self.solve_counts.items())}
            (self.run_dir / SOLVE_RATES_FILE).write_text(json.dumps(rates, indent=1))

    def _save_sharded(self, extra: dict[str, Any]) -> None:
        """DCP save into a temporary sibling, then renamed into place by rank 0, so a run killed
        mid-save keeps its previous checkpoint (as the single-process save does)."""
        dest = self.checkpoint_dir
        tmp, old = dest.with_name(f".{dest.name}.tmp-dcp"), dest.with_name(f".{dest.name}.old-dcp")
        if self.dist.is_main:
            shutil.rmtree(tmp, ignore_errors=True)
        self.dist.barrier()
        self.learner.save_checkpoint(tmp, extra_state=extra)  # ends with a barrier
        if self.dist.is_main:
            if dest.exists():
                os.rename(dest, old)
            os.rename(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        self.dist.barrier()

    def _resume(self) -> None:
        ckpt = find_checkpoint(self.checkpoint_dir)
        if ckpt is None:
            log.warning("no checkpoint in %s; starting from iteration 0", self.checkpoint_dir)
            return
        if is_sharded_checkpoint(ckpt):
            extra = (self.learner.load_checkpoint(ckpt) if hasattr(self.learner, "ctx")
                     else load_sharded_into(self.learner, ckpt))
        elif hasattr(self.learner, "ctx"):
            raise ConfigError(
                f"{ckpt} was written by a single process (Hugging Face format); resume it "
                "without torchrun, or start a new run from its weights with --policy "
                f"{ckpt}")
        else:
            extra = self.learner.load_checkpoint(ckpt)
        self.iteration = int(extra["iteration"])
        self.sampler.load_state_dict(extra["sampler"])
        self.solve_counts = {k: list(v) for k, v in extra.get("solve_counts", {}).items()}
        self.skipped_iterations = int(extra.get("skipped_iterations", 0))
        self.push_weights()
        if self.dist.is_main:
            print(f"resumed {self.run_dir} at iteration {self.iteration} "
                  f"(optimizer step {self.learner.step})", file=sys.stderr)

    def _boundary(self) -> tuple[int, dict[str, Any], dict[str, list[int]], int]:
        """What an iteration changes besides the weights, as it was before the iteration."""
        return (self.iteration, self.sampler.state_dict(), copy.deepcopy(self.solve_counts),
                self.skipped_iterations)

    def _rewind(self, boundary: tuple[int, dict[str, Any], dict[str, list[int]], int]) -> None:
        """Undo an unfinished iteration's sampling, solve counts and skip count, so a resumed
        run redoes it with the same tasks (Ctrl-C mostly lands during rollouts). Optimiser steps
        it already took stay in the weights."""
        iteration, sampler, solve_counts, skipped = boundary
        if iteration == self.iteration:
            self.sampler.load_state_dict(sampler)
            self.solve_counts, self.skipped_iterations = solve_counts, skipped

    # ------------------------------------------------------------------ one iteration
    def _collect(self, counters: Counters, tick: Callable[[Any], None]) -> tuple[list[Scored], int,
                                                                                   list[float]]:
        """Roll out, score, compute advantages, filter, refill. Returns (kept, rounds, all
        rewards seen)."""
        cfg = self.cfg
        kept: list[Scored] = []
        all_scored: list[Scored] = []
        rounds = 0
        group_base = 0
        n_problems = cfg.problems_per_iteration
        while True:
            problems = self.sampler.sample(n_problems)
            seed = cfg.seed + 1_000 * (self.iteration * (cfg.max_refill_rounds + 1) + rounds)
            self.policy.model.eval()
            trajs = run_rollouts(cfg, self.policy.sampler, problems, cfg.group_size, seed, tick)
            groups = [group_base + i // cfg.group_size for i in range(len(trajs))]
            group_base += len(problems)
            for t in trajs:
                a, r = self.solve_counts.setdefault(t.task_id, [0, 0])
                self.solve_counts[t.task_id] = [a + 1, r + int(bool(t.resolved))]
            scored = score_trajectories(cfg, trajs, groups, self.reward_fn, counters)
            check_episode_errors(counters, cfg.max_error_share,
                                 f"iteration {self.iteration + 1}")
            if getattr(cfg, "mask_failed_groups", False):
                scored = mask_failed_groups(trajs, groups, scored, counters)
            self.episodes += trajs
            assign_advantages(cfg, scored)
            all_scored += scored
            survivors = apply_filter(cfg.filter, scored)
            counters.filtered += len(scored) - len(survivors)
            kept += survivors
            if len(kept) >= self.needed or rounds >= cfg.max_refill_rounds:
                break
            rounds += 1
            n_problems = cfg.refill_problems or cfg.problems_per_iteration
        return kept, rounds, [s.reward for s in all_scored]

    def _make_samples(self, counters: Counters, tick: Callable[[Any], None]
                      ) -> tuple[list[Sample], list[Scored], int, list[float]]:
        """Steps 1-6 (rank 0 only under torchrun): ``(samples, kept, refill rounds, rewards)``."""
        cfg = self.cfg
        kept, rounds, rewards = self._collect(counters, tick)
        if len(kept) < self.needed:
            msg = (f"iteration {self.iteration + 1}: only {len(kept)} of batch_size="
                   f"{self.needed} samples survived filter={cfg.filter!r} after {rounds} "
                   f"refill round(s) ({counters.episodes} episodes; {counters.filtered} filtered, "
                   f"{counters.rollout_errors} rollout errors, {counters.reward_errors} reward "
                   "errors)")
            if cfg.on_exhausted == "error":
                raise DynamicSamplingExhausted(
                    msg + "; raise max_refill_rounds or problems_per_iteration, lower batch_size, "
                    "enable length_penalty so rewards differ, or set on_exhausted=skip")
            log.warning("%s; iteration skipped (on_exhausted=skip)", msg)
            self.skipped_iterations += 1
            kept = []
        # samples for the learner
        samples: list[Sample] = []
        for i, s in enumerate(kept):
            if cfg.overlong_filter and is_overlong(s.traj):
                counters.overlong_dropped += 1
                continue
            sample = to_sample(s.traj, s.advantage, cfg.max_context_tokens, cfg.mask_invalid,
                               counters, f"{s.traj.task_id}/{i}")
            if sample is not None:
                samples.append(sample)
        return samples, kept, rounds, rewards

    def iteration_step(self, guard: InterruptGuard, tick: Callable[[Any], None]) -> dict[str, Any]:
        """One iteration; returns its metrics row (an empty dict on ranks other than 0)."""
        cfg = self.cfg
        t0 = time.perf_counter()
        counters = Counters()
        samples: list[Sample] = []
        kept: list[Scored] = []
        rounds, rewards, error = 0, [], None
        self.episodes = []
        version = int(getattr(self.learner, "step", 0))  # the weights that sample this iteration
        if self.dist.is_main:
            try:
                samples, kept, rounds, rewards = self._make_samples(counters, tick)
                if getattr(cfg, "save_episodes", 0) != 0:
                    save_iteration_episodes(self.run_dir, self.iteration + 1, self.episodes,
                                            version, cfg.save_episodes,
                                            cfg.save_episodes_sampling, cfg.seed)
                self.episodes = []
            except Exception as e:  # the other ranks wait for the samples: tell them
                if not self.dist.distributed:
                    raise
                error = e
        if self.dist.distributed:  # DistributedLearner takes the same full list on every rank
            samples, error = broadcast_object((samples, error))
            if error is not None:
                raise error
        t_rollout = time.perf_counter() - t0
        if samples and self.old_logprobs_mode == "recompute":
            lps = self.learner.compute_logprobs(samples)
            samples = [dataclasses.replace(x, old_logprobs=[v * m for v, m in zip(
                lp, x.loss_mask, strict=True)], sampler_logprobs=x.old_logprobs)
                for x, lp in zip(samples, lps, strict=True)]
        step_metrics: list[dict[str, float]] = []
        t1 = time.perf_counter()
        if samples:
            order = list(range(len(samples)))
            random.Random(cfg.seed + self.iteration).shuffle(order)
            n_steps = max(1, min(cfg.max_steps_per_iteration, len(samples) // cfg.batch_size))
            chunks = [order[k::n_steps] for k in range(n_steps)]
            for chunk in chunks:
                batch = [samples[j] for j in chunk]
                with guard.critical():
                    metrics = self.learner.train_step(batch)
                    if hasattr(self.learner, "ctx") and self.learner.ctx.distributed:
                        metrics = reduce_step_metrics(metrics, batch, self.learner.ctx)
                step_metrics.append(metrics)
            t_push = self.push_weights()
        else:
            t_push = 0.0
        t_train = time.perf_counter() - t1
        if self.old_logprobs_mode == "sampler":
            # the sampler/learner mismatch compares equal weights only at the first step (the
            # later steps' weights have moved on from the ones that sampled)
            step_metrics[1:] = [{k: v for k, v in m.items() if not k.startswith("mismatch_")}
                                for m in step_metrics[1:]]
        if not self.dist.is_main:
            return {}
        all_trajs = counters.episodes
        trajs_rewards = torch.tensor(rewards) if rewards else torch.zeros(0)
        row: dict[str, Any] = {"iteration": self.iteration + 1, "refill_rounds": rounds}
        row.update(self._rollout_stats(counters, rewards))
        row.update({
            "reward_mean": float(trajs_rewards.mean()) if rewards else float("nan"),
            "reward_std": float(trajs_rewards.std()) if len(rewards) > 1 else 0.0,
            "kept": len(samples),
            "filtered_frac": counters.filtered / max(1, all_trajs),
            "optimizer_steps": sum(1 for m in step_metrics if not m.get("skipped")),
            "skipped_steps": float(getattr(self.learner, "skipped_steps", 0)),
            "skipped_iterations": self.skipped_iterations,
            "step": float(getattr(self.learner, "step", 0)),
            "time_rollout_s": t_rollout,
            "time_train_s": t_train,
            "time_push_s": t_push,
            "time_s": time.perf_counter() - t0,
            "adv_abs_mean": sum(abs(s.advantage) for s in kept) / max(1, len(kept)),
        })
        row.update(_mean_metrics(step_metrics))
        self.totals.add(counters)
        if counters.errors:
            row["errors"] = counters.errors[:10]
        return row

    def _rollout_stats(self, counters: Counters, rewards: list[float]) -> dict[str, Any]:
        return {
            "episodes": counters.episodes,
            "rollout_errors": counters.rollout_errors,
            "env_failures": counters.env_failures,
            "reward_errors": counters.reward_errors,
            "not_token_exact": counters.not_token_exact,
            "truncated": counters.truncated,
            "overlong_dropped": counters.overlong_dropped,
            "filtered": counters.filtered,
            "failure_masked": counters.failure_masked,
        }

    # ------------------------------------------------------------------ the run
    def run(self) -> list[dict[str, Any]]:
        """All iterations; returns the metric rows. Raises KeyboardInterrupt after saving."""
        cfg = self.cfg
        main = self.dist.is_main  # under torchrun rank 0 alone logs
        logger = MetricsLogger(self.run_dir, cfg.log, to_dict(cfg), cfg.wandb_project,
                               resume_from=self.iteration if cfg.resume else None) if main else None
        bar = None
        if cfg.progress and main:
            from tqdm import tqdm

            bar = tqdm(total=cfg.iterations, initial=self.iteration, desc=self.algo,
                       unit="it", file=sys.stderr, dynamic_ncols=True)
        boundary = self._boundary()
        try:
            with InterruptGuard() as guard:
                try:
                    while self.iteration < cfg.iterations:
                        boundary = self._boundary()
                        stats = _EpisodeStats()

                        def tick(traj: Any, stats: _EpisodeStats = stats) -> None:
                            stats.add(traj)
                            if bar is not None:
                                bar.set_postfix_str(f"episodes {stats.n}, resolved "
                                                    f"{stats.resolved}", refresh=False)

                        row = self.iteration_step(guard, tick)
                        self.iteration += 1
                        if logger is not None:
                            row.update(stats.summary())
                            logger.log(row)
                            self.rows.append(row)
                        if bar is not None:
                            bar.update(1)
                            bar.set_postfix(reward=f"{row['reward_mean']:.3f}",
                                            resolved=f"{row['resolved_rate']:.2f}",
                                            filtered=f"{row['filtered_frac']:.2f}")
                        last = self.iteration == cfg.iterations
                        if last or (cfg.checkpoint_every and
                                    self.iteration % cfg.checkpoint_every == 0):
                            with guard.critical():
                                self.save()
                except KeyboardInterrupt:
                    if bar is not None:
                        bar.close()
                        bar = None
                    self._rewind(boundary)
                    print(f"\n[rank {self.dist.rank}] interrupted: saving a checkpoint at "
                          f"iteration {self.iteration} "
                          f"(optimizer step {getattr(self.learner, 'step', '?')})",
                          file=sys.stderr)
                    self.save()
                    print(f"checkpoint written to {self.checkpoint_dir}; continue with: "
                          f"python -m algos.{self.algo} --resume {self.run_dir}",
                          file=sys.stderr)
                    raise
        finally:
            if bar is not None:
                bar.close()
            if logger is not None:
                logger.close()
        return self.rows

    def close(self) -> None:
        self.policy.close()
        if self.dist.distributed:
            from algos.distributed.fsdp import teardown_distributed

            teardown_distributed()


@dataclass
class _EpisodeStats:
    n: int = 0
    resolved: int = 0
    turns: int = 0
    tokens: int = 0
    completion_tokens: int = 0
    env_reward: float = 0.0

    def add(self, traj: Any) -> None:
        self.n += 1
        self.resolved += int(bool(traj.resolved))
        self.turns += traj.num_turns
        self.env_reward += float(traj.reward)
        self.tokens += sum(len(t.prompt_delta_ids) + len(t.completion_ids) for t in traj.turns)
        self.completion_tokens += sum(len(t.completion_ids) for t in traj.turns)

    def summary(self) -> dict[str, float]:
        n = max(1, self.n)
        return {"resolved_rate": self.resolved / n, "turns_mean": self.turns / n,
                "seq_tokens_mean": self.tokens / n,
                "response_tokens_mean": self.completion_tokens / n,
                "env_reward_mean": self.env_reward / n}


def _mean_metrics(step_metrics: list[dict[str, float]]) -> dict[str, float]:
    """Mean over the iteration's optimiser steps of the learner's metrics (skipped steps'
    NaN loss excluded)."""
    if not step_metrics:
        return {"loss": float("nan")}
    keys = ("loss", "pg_loss", "nll", "kl", "entropy", "clip_frac_low", "clip_frac_high",
            "approx_kl", "ratio_mean", "grad_norm", "lr", "loss_tokens", "tokens_per_s",
            "mismatch_kl", "mismatch_ratio_mean", "is_weight_mean", "is_capped_frac")
    out: dict[str, float] = {}
    for k in keys:
        vals = [m[k] for m in step_metrics if k in m and math.isfinite(m[k])]
        if vals:
            out[k] = sum(vals) / len(vals)
    if "loss" not in out:
        out["loss"] = float("nan")
    out["clip_frac"] = out.get("clip_frac_low", 0.0) + out.get("clip_frac_high", 0.0)
    out["ratio_max"] = max((m.get("ratio_max", 1.0) for m in step_metrics), default=1.0)
    if any("mismatch_ratio_max" in m for m in step_metrics):
        out["mismatch_ratio_max"] = max(m.get("mismatch_ratio_max", 1.0) for m in step_metrics)
        out["mismatch_ratio_min"] = min(m.get("mismatch_ratio_min", 1.0) for m in step_metrics)
    return out


def run_cli(cfg: Any, algo: str, **kwargs: Any) -> int:
    """Build the trainer, run it, print the results table; exit status for ``main``."""
    try:
        trainer = Trainer(cfg, algo, **kwargs)
    except ConfigError as e:
        raise SystemExit(f"config error: {e}") from None
    try:
        rows = trainer.run()
    except KeyboardInterrupt:
        return 130
    except (DynamicSamplingExhausted, EpisodesFailed) as e:
        raise SystemExit(f"error: {e}") from None
    finally:
        trainer.close()
    if not trainer.dist.is_main:
        return 0
    print(format_table(rows, RESULT_COLUMNS))
    print(f"metrics: {trainer.run_dir / METRICS_FILE}; checkpoint: {trainer.checkpoint_dir}; "
          f"plot: python -m algos.plot {trainer.run_dir}")
    return 0


def validate_rl_config(cfg: Any) -> None:
    """Checks GRPO and DAPO share (called from their ``__post_init__``, before any work)."""
    if cfg.filter not in FILTERS:
        raise unknown_choice("filter", cfg.filter, FILTERS)
    if cfg.on_exhausted not in ON_EXHAUSTED:
        raise unknown_choice("on_exhausted", cfg.on_exhausted, ON_EXHAUSTED)
    if cfg.old_logprobs not in OLD_LOGPROBS:
        raise unknown_choice("old_logprobs", cfg.old_logprobs, OLD_LOGPROBS)
    for name in ("iterations", "problems_per_iteration", "group_size", "batch_size",
                 "max_steps_per_iteration"):
        if getattr(cfg, name) < 1:
            raise ConfigError(f"{name} must be >= 1; got {getattr(cfg, name)}")
    if cfg.max_refill_rounds < 0:
        raise ConfigError(f"max_refill_rounds must be >= 0; got {cfg.max_refill_rounds}")
    if cfg.group_size < 2 and cfg.filter != "none":
        raise ConfigError(
            f"group_size={cfg.group_size}: a group of one has zero advantage, so filter="
            f"{cfg.filter!r} would drop every sample; use group_size >= 2")
    if cfg.length_penalty and cfg.length_threshold >= cfg.max_turns:
        raise ConfigError(
            f"length_penalty needs length_threshold < max_turns (T_max); got length_threshold="
            f"{cfg.length_threshold}, max_turns={cfg.max_turns}")
    if cfg.kl_coef < 0:
        raise ConfigError(f"kl_coef must be >= 0; got {cfg.kl_coef}")
    core.get_policy_loss_fn(cfg.loss)
    if cfg.agg_mode not in core.AGG_MODES:
        raise unknown_choice("agg_mode", cfg.agg_mode, core.AGG_MODES)
    if cfg.kl_estimator not in core.KL_ESTIMATORS:
        raise unknown_choice("kl_estimator", cfg.kl_estimator, core.KL_ESTIMATORS)


def learner_config_from(cfg: Any, loss_kwargs: dict[str, Any]) -> LearnerConfig:
    """The LearnerConfig an RL config implies (constant lr after warm-up, methods.md 4-5)."""
    return LearnerConfig(
        lr=cfg.lr, weight_decay=cfg.weight_decay, grad_clip=cfg.grad_clip,
        warmup_steps=cfg.warmup_steps, schedule="constant",
        micro_batch_tokens=cfg.micro_batch_tokens, bf16=cfg.bf16,
        grad_checkpointing=cfg.grad_checkpointing, loss=cfg.loss, loss_kwargs=loss_kwargs,
        agg_mode=cfg.agg_mode, kl_coef=cfg.kl_coef, kl_estimator=cfg.kl_estimator,
        entropy_coef=cfg.entropy_coef, log_entropy=True, temperature=cfg.temperature,
        off_policy_correction=getattr(cfg, "off_policy_correction", "none"),
        is_cap=getattr(cfg, "is_cap", 2.0),
    )
