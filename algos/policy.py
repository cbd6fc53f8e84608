"""The policy: the trained module, its tokenizer and its rollout engine (in-process or Ray)."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, cast

import torch

from agents.models.engine_logs import ENGINE_LOG
from algos.config import ConfigError
from algos.config.run import RunConfig
from algos.distributed.fsdp import DistContext, training_device
from algos.rollout.collect import RolloutEngine, RolloutSpec, TakesWeights


@dataclass
class Policy:
    """The trained module, its tokenizer and the rollout engine that samples from it."""

    model: torch.nn.Module
    tokenizer: Any
    path: Path  # a Hugging Face folder holding the initial weights (what vLLM loads)
    engine: RolloutEngine | None = None  # what samples the rollouts
    on_policy: bool = True  # the engine samples from the policy's weights
    shares_weights: bool = False  # the engine IS the training module (no push needed)
    engine_dtype: torch.dtype | None = None  # cast pushed weights to the engine's dtype

    def require_engine(self) -> RolloutEngine:
        """The rollout engine, or an error saying why there is none."""
        if self.engine is None:
            raise RuntimeError(
                "this policy has no rollout engine: only rank 0 of a sharded run samples, and an "
                "RFT run that reads saved trajectories builds none"
            )
        return self.engine

    @property
    def needs_push(self) -> bool:
        """Whether the engine holds its own copy of the weights (pushed after each update)."""
        return self.on_policy and not self.shares_weights

    def push_weights(
        self, state: dict[str, torch.Tensor] | None = None, version: int | None = None
    ) -> float:
        """Send the current weights (or ``state``: the gathered full weights of a sharded model)
        to the rollout engine as policy ``version`` (the learner's optimiser step; the engine
        stamps it on every generation); returns seconds spent."""
        if version is not None and self.shares_weights and hasattr(self.engine, "policy_version"):
            cast(Any, self.engine).policy_version = version  # the module itself changed: relabel
        if not self.needs_push or self.engine is None:
            return 0.0
        t0 = time.perf_counter()
        dtype = self.engine_dtype
        state = self.model.state_dict() if state is None else state
        state = {
            k: (v.detach().to(dtype) if dtype is not None and v.is_floating_point() else v.detach())
            for k, v in state.items()
        }
        if not isinstance(self.engine, TakesWeights):
            raise TypeError(
                f"rollout engine {type(self.engine).__name__} has no update_weights, so it cannot "
                "sample from the trained weights; on_policy engines must take weight pushes"
            )
        if version is None:
            self.engine.update_weights(state)
        else:
            self.engine.update_weights(state, version=version)
        return time.perf_counter() - t0

    def close(self) -> None:
        close = getattr(self.engine, "close", None)
        if close is not None:
            close()


def load_policy_model(
    spec: str, run_dir: Path, seed: int = 0, yarn_factor: float | None = None
) -> tuple[torch.nn.Module, Any, Path]:
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
    from transformers.utils import logging as hf_logging

    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # the run's terminal shows its own bar and table
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    finally:
        if bar:
            hf_logging.enable_progress_bar()
    if yarn_factor:
        from algos.distributed.long_context import apply_yarn

        apply_yarn(model.config, yarn_factor)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    return model, tokenizer, path


def build_policy(cfg: RunConfig, run_dir: Path, share_module: bool = True) -> Policy:
    """Load the policy and its rollout engine as ``cfg`` says (see RunConfig.engine).

    ``share_module=False`` gives the transformers engine its own copy even in float32 (a
    sharded training module cannot sample on one rank alone).
    """
    model, tokenizer, path = load_policy_model(
        cfg.policy, run_dir, cfg.seed, getattr(cfg, "yarn_factor", None)
    )
    policy = Policy(
        model=model, tokenizer=tokenizer, path=path, engine_dtype=getattr(torch, cfg.engine_dtype)
    )
    if cfg.rollout_backend == "ray":
        if getattr(cfg, "yarn_factor", None):
            raise ConfigError(
                "yarn_factor is not supported with rollout_backend=ray yet; use "
                "rollout_backend=threads"
            )
        on_policy = cfg.rollout_model == "policy"
        factory = partial(
            rollout_engine,
            cfg.rollout_model,
            str(path),
            cfg.engine,
            cfg.engine_dtype,
            cfg.seed,
            cfg.max_context_tokens,
            cfg.policy,
        )
        policy.engine = RayRollouts(
            RolloutSpec.from_config(cfg),
            factory,
            address=cfg.ray_address,
            workers=cfg.ray_workers,
            max_starts_per_node=cfg.max_sandbox_starts_per_node,
            client_factory=partial(engine_client, path=str(path), name=cfg.policy)
            if on_policy
            else None,
            engine_gpus=1.0 if cfg.engine == "vllm" and torch.cuda.is_available() else 0.0,
        )
        policy.on_policy = on_policy
        return policy
    if cfg.rollout_model != "policy":
        from agents.models import load_model

        kw: dict[str, Any] = {"tokenizer": tokenizer}
        policy.engine = load_model(cfg.rollout_model, **kw)
        policy.on_policy = False
        return policy
    if cfg.engine == "vllm":
        from agents.models.vllm import VLLMModel

        extra: dict[str, Any] = {}
        if getattr(cfg, "yarn_factor", None):  # the engine must use the same extended rope
            model_config: Any = model.config  # an HF config: its rope fields vary by model
            extra["hf_overrides"] = {
                "rope_parameters": model_config.rope_parameters,
                "max_position_embeddings": model_config.max_position_embeddings,
            }
        policy.engine = VLLMModel(
            str(path),
            max_model_len=cfg.max_context_tokens,
            dtype=cfg.engine_dtype,
            seed=cfg.seed,
            name=cfg.policy,
            gpu_memory_utilization=cfg.engine_gpu_memory,
            log_file=run_dir / ENGINE_LOG,  # the terminal keeps the progress bar and the table
            verbose=cfg.verbose,
            **extra,
        )
        # the folder holds the policy's weights; resumed weights are pushed by Trainer._resume
    elif cfg.engine_dtype == "float32" and share_module:
        from agents.models.transformers import TransformersModel

        # On the training device from the start (RFT rolls out before its learner exists); the
        # engine reads the module's device at every call, so a later move is followed too.
        model.to(training_device())
        policy.engine = TransformersModel(
            model, tokenizer=tokenizer, seed=cfg.seed, name=cfg.policy
        )
        policy.shares_weights = True
    else:
        from agents.models.transformers import TransformersModel

        engine_model = copy.deepcopy(model).to(training_device(), getattr(torch, cfg.engine_dtype))
        policy.engine = TransformersModel(
            engine_model, tokenizer=tokenizer, seed=cfg.seed, name=cfg.policy
        )
    return policy


def rollout_engine(
    spec: str, path: str, engine: str, dtype: str, seed: int, max_model_len: int, name: str
) -> Any:
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
    workers (each runs ``spec.concurrency`` agent loops with their sandboxes). With a
    ``client_factory`` (on-policy) one shared engine actor built by ``engine_factory`` (an
    ``InferenceEngine``, refreshed by :meth:`update_weights`) serves every worker through
    ``client_factory(engines)``; without one each worker builds its own model with
    ``engine_factory`` (an off-policy ``rollout_model``)."""

    def __init__(
        self,
        spec: RolloutSpec,
        engine_factory: Callable[[], Any],
        *,
        address: str | None,
        workers: int,
        max_starts_per_node: int,
        client_factory: Callable[[list[Any]], Any] | None = None,
        engine_gpus: float = 0.0,
    ):
        import ray

        from algos.distributed.ray_rollout import (
            InferenceEngine,
            RayRolloutConfig,
            RayRolloutPool,
        )

        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        rcfg = RayRolloutConfig(
            num_workers=workers,
            worker_concurrency=spec.concurrency,
            max_sandbox_starts_per_node=max_starts_per_node,
            episode_timeout_s=spec.episode_timeout_s,
            env_id=spec.env,
            env_kwargs=dict(spec.env_kwargs),
            agent_kwargs=dict(spec.agent_kwargs),
        )
        factory: Callable[[], Any] = engine_factory
        self.engines: list[Any] = []
        self.weight_version = 0
        if client_factory is not None:  # one shared engine; the workers hold clients
            self.engines = [
                ray.remote(InferenceEngine)
                .options(
                    num_cpus=rcfg.engine_num_cpus,
                    num_gpus=engine_gpus,
                    max_concurrency=rcfg.engine_concurrency,
                )
                .remote(engine_factory)
            ]
            factory = partial(client_factory, self.engines)
        self.pool = RayRolloutPool(rcfg, model_factory=factory)
        self.pool.wait_ready()

    def run_episodes(
        self,
        task_ids: Sequence[str],
        n_per_task: int,
        seed: int,
        progress: Callable[[Any], None] | None = None,
    ) -> list[Any]:
        """Same jobs, seeds and order as :func:`agents.rollout.rollout` (task-major)."""
        jobs = [(t, seed + j) for t in task_ids for j in range(n_per_task)]
        res = self.pool.run(
            jobs, progress=None if progress is None else (lambda _j, traj: progress(traj))
        )
        return list(res.trajectories)

    def update_weights(self, state: dict[str, torch.Tensor], version: int | None = None) -> None:
        """The new weights to every engine (through the object store, one copy per node), as
        ``version`` (default: the last one + 1); engines take them between requests."""
        import ray

        self.weight_version = self.weight_version + 1 if version is None else version
        ref = ray.put(state)
        ray.get([e.update_weights.remote(ref, self.weight_version) for e in self.engines])

    def close(self) -> None:
        import ray

        self.pool.shutdown()
        for engine in self.engines:
            ray.kill(engine)
        if self._owns_ray:
            ray.shutdown()


def build_rank_policy(cfg: RunConfig, run_dir: Path, dist: DistContext) -> Policy:
    """:func:`build_policy` in one process; under torchrun rank 0 alone builds the rollout engine
    (its own copy of the weights) and the other ranks load only the model."""
    if not dist.distributed:
        # asynchronous RL samples while the learner steps: the engine needs its own weights
        return build_policy(cfg, run_dir, share_module=getattr(cfg, "max_staleness", 0) == 0)
    policy = build_policy(cfg, run_dir, share_module=False) if dist.is_main else None
    dist.barrier()  # rank 0 may have written the initial weights (tiny-random)
    if policy is None:
        model, tokenizer, path = load_policy_model(
            cfg.policy, run_dir, cfg.seed, getattr(cfg, "yarn_factor", None)
        )
        policy = Policy(
            model=model, tokenizer=tokenizer, path=path, on_policy=cfg.rollout_model == "policy"
        )
    return policy
