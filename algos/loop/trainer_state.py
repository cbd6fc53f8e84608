"""What the RL trainer holds: the parts built from the config, the weight pushes, checkpoints.

Scale: ``algos.policy.build_policy`` (model, tokenizer, rollout engine) and ``learner_factory``
(:func:`algos.distributed.learner.make_learner` by default) are the only places that create them.
Under ``torchrun --nproc-per-node N`` the learner is FSDP2-sharded over N ranks (``cp`` of them
split each sequence); rank 0 alone rolls out, scores and filters, then broadcasts the kept samples
to every rank, and alone logs and holds the rollout engine (the full weights are gathered for each
push). Checkpoints are then sharded (every rank writes its part) and resumable with any number
of processes. ``rollout_backend=ray`` runs the episodes on a Ray cluster (``RayRollouts``).

A checkpoint holds the learner (sharded under torchrun) and the loop's position: the iteration,
the task pool's state, the solve counts and skipped iterations (``solve_rates.json`` beside
it); ``Trainer.run`` rewinds an iteration cut short by Ctrl-C to its boundary before saving.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

from agents.trajectory import Trajectory
from algos.config import save_config, to_dict
from algos.config.policy_gradient import PolicyGradientConfig, resolve_old_logprobs
from algos.distributed.fsdp import DistContext, full_state_dict, setup_distributed
from algos.learner.learner import Learner
from algos.learner.learner_config import LearnerConfig, PolicyLearner
from algos.loop.run_state import (
    CHECKPOINT_DIR,
    broadcast_object,
    load_checkpoint_state,
    save_sharded,
    seed_everything,
    write_solve_rates,
)
from algos.loop.validation import Validator
from algos.policy import Policy, build_rank_policy
from algos.rollout.async_collect import AsyncCollector, Staleness, check_async
from algos.rollout.collect import (
    CollectPlan,
    RolloutSpec,
    TaskPool,
    check_prompt_fits,
)
from algos.rollout.hack_monitor import HackMonitor
from algos.rollout.scoring import Counters, ScoringSpec, load_reward_fn
from algos.rollout.task_source import (
    env_task_source,
    env_tasks,
    filter_pool_by_solve_rate,
    weigh_hackable,
)

log = logging.getLogger(__name__)

# (model, LearnerConfig, *, ref_model, tokenizer) -> the learner (default_learner_factory)
LearnerFactory = Callable[..., PolicyLearner]
# the task pool's position: its state_dict, or with async collection the producer's
# (round, state_dict) (AsyncCollector.position)
PoolPosition = dict[str, Any] | tuple[int, dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Boundary:
    """What an iteration changes besides the weights, as it was before the iteration (Ctrl-C
    rewinds to it)."""

    iteration: int
    pool: PoolPosition
    solve_counts: dict[str, list[int]]
    skipped_iterations: int


def default_learner_factory(
    model: torch.nn.Module,
    config: LearnerConfig,
    *,
    ref_model: torch.nn.Module | None,
    tokenizer: Any,
    cp: int = 1,
) -> Learner:
    """A plain Learner in one process; an FSDP2 (+ CP) DistributedLearner under torchrun."""
    from algos.distributed.learner import make_learner

    return make_learner(model, config, cp=cp, ref_model=ref_model, tokenizer=tokenizer)


class TrainerState:
    """The trainer's parts and position, built from ``cfg`` (a ``GRPOConfig`` or ``DAPOConfig``:
    they name the same choices); ``algo`` names the run (``runs/<algo>-<time>``).
    ``policy``/``learner_factory``/``reward_fn`` override what the config would build (tests,
    distributed set-ups). :class:`algos.loop.trainer.Trainer` runs the loop over them.
    """

    def __init__(
        self,
        cfg: PolicyGradientConfig,
        algo: str,
        *,
        policy: Policy | None = None,
        learner_factory: LearnerFactory | None = None,
        reward_fn: Callable[[Trajectory], float] | None = None,
    ) -> None:
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
        self.rollout_spec = RolloutSpec.from_config(cfg)
        env_kwargs = self.rollout_spec.env_kwargs
        tasks = env_tasks(cfg.env, env_kwargs)
        pool = cfg.tasks or [t.instance_id for t in tasks]
        if cfg.solve_rates:
            pool = filter_pool_by_solve_rate(pool, cfg.solve_rates)
        pool, weights = weigh_hackable(
            pool, cfg.hackable_weight, env_task_source(cfg.env, env_kwargs), cfg.audit_file
        )
        self.task_pool = TaskPool(pool, cfg.seed, weights)
        self.policy = (
            policy if policy is not None else build_rank_policy(cfg, self.run_dir, self.dist)
        )
        self.max_staleness = int(getattr(cfg, "max_staleness", 0))
        check_async(self.max_staleness, self.dist, self.policy)
        if self.dist.is_main:  # may start a sandbox; only rank 0 rolls out
            self.prompt_tokens = check_prompt_fits(
                self.rollout_spec, self.policy.tokenizer, pool[0], cfg.seed
            )
        lcfg = cfg.learner_config()
        ref = None
        if lcfg.kl_coef > 0:
            ref = copy.deepcopy(self.policy.model).eval().requires_grad_(False)
        if learner_factory is None:
            learner_factory = partial(default_learner_factory, cp=cfg.cp)
        self.learner: PolicyLearner = learner_factory(
            self.policy.model, lcfg, ref_model=ref, tokenizer=self.policy.tokenizer
        )
        self.old_logprobs_mode = resolve_old_logprobs(
            cfg, self.policy.on_policy, self.policy.shares_weights
        )
        # a step needs a full batch after filtering; without a filter any survivor will do
        self.needed = cfg.batch_size if cfg.filter != "none" else 1
        self.plan = CollectPlan.from_config(cfg, self.needed)
        self.scoring = dataclasses.replace(
            ScoringSpec.from_config(cfg),
            hack_monitor=HackMonitor.build(
                cfg.hack_policy, cfg.hack_action, cfg.hack_penalty, tasks
            ),
        )
        self.config_dict = to_dict(cfg)  # what the metrics logger records of the run
        self.iteration = 0
        self.solve_counts: dict[str, list[int]] = {}
        self.totals = Counters()
        self.skipped_iterations = 0
        self.rows: list[dict[str, Any]] = []
        self.async_round = 0  # max_staleness >= 1: the next round to take (checkpointed)
        if cfg.resume:
            self._resume()
        self.validator = (
            Validator(
                list(cfg.val_tasks or pool),
                cfg.val_runs,
                cfg.seed,
                self.run_dir,
                upto=self.iteration if cfg.resume else -1,
            )
            if cfg.val_runs and self.dist.is_main
            else None
        )
        self.collector: AsyncCollector | None = None
        self.staleness = Staleness()
        if self.max_staleness and self.dist.is_main:
            self.collector = AsyncCollector(
                self.plan,
                self.rollout_spec,
                self.task_pool,
                self.policy.require_engine(),
                self.max_staleness,
                start_round=self.async_round,
            )
        if self.dist.is_main:
            save_config(cfg, self.run_dir)

    def push_weights(self) -> float:
        """New weights to the rollout engine; a sharded model is gathered first (collective)."""
        version = self.learner.step
        if not self.dist.distributed:
            return self.policy.push_weights(version=version)
        if not self.policy.needs_push:
            return 0.0
        t0 = time.perf_counter()
        state = full_state_dict(self.learner.model)  # every rank; rank 0 receives the weights
        if self.dist.is_main:
            self.policy.push_weights(state, version=version)
        return time.perf_counter() - t0

    # ------------------------------------------------------------------ checkpoints
    @property
    def checkpoint_dir(self) -> Path:
        return self.run_dir / CHECKPOINT_DIR

    def save(self) -> None:
        pool_state = self.task_pool.state_dict()
        if self.collector is not None:  # rounds made ahead are not saved: resume redoes them
            self.async_round, pool_state = self.collector.position
        extra = {
            "iteration": self.iteration,
            "task_pool": pool_state,
            "solve_counts": self.solve_counts,
            "skipped_iterations": self.skipped_iterations,
            "algo": self.algo,
            "async_round": self.async_round,
        }
        if hasattr(self.learner, "ctx"):  # DistributedLearner: sharded DCP, every rank writes
            save_sharded(self.learner, self.checkpoint_dir, self.dist, extra)
        else:
            self.learner.save_checkpoint(self.checkpoint_dir, extra_state=extra)
        if self.dist.is_main:
            write_solve_rates(self.run_dir, self.solve_counts)

    def _resume(self) -> None:
        extra = load_checkpoint_state(self.learner, self.checkpoint_dir)
        if extra is None:
            log.warning("no checkpoint in %s; starting from iteration 0", self.checkpoint_dir)
            return
        self.iteration = int(extra["iteration"])
        # "sampler": the key checkpoints written before the task pool was named for what it is
        self.task_pool.load_state_dict(
            extra["task_pool"] if "task_pool" in extra else extra["sampler"]
        )
        self.solve_counts = {k: list(v) for k, v in extra.get("solve_counts", {}).items()}
        self.skipped_iterations = int(extra.get("skipped_iterations", 0))
        self.async_round = int(extra.get("async_round", 0))
        self.push_weights()
        if self.dist.is_main:
            print(
                f"resumed {self.run_dir} at iteration {self.iteration} "
                f"(optimizer step {self.learner.step})",
                file=sys.stderr,
            )

    def _boundary(self) -> Boundary:
        """What an iteration changes besides the weights, as it was before the iteration."""
        # with async collection the producer owns the task pool: its taken position
        pool = self.task_pool.state_dict() if self.collector is None else self.collector.position
        return Boundary(
            self.iteration, pool, copy.deepcopy(self.solve_counts), self.skipped_iterations
        )

    def _rewind(self, boundary: Boundary) -> None:
        """Undo an unfinished iteration's sampling, solve counts and skip count, so a resumed
        run redoes it with the same tasks (Ctrl-C mostly lands during rollouts). Optimiser steps
        it already took stay in the weights."""
        if boundary.iteration == self.iteration:
            if isinstance(boundary.pool, tuple):  # the producer's (async collection)
                assert self.collector is not None
                self.collector.rewind(boundary.pool)
            else:
                self.task_pool.load_state_dict(boundary.pool)
            self.solve_counts = boundary.solve_counts
            self.skipped_iterations = boundary.skipped_iterations

    def close(self) -> None:
        self.policy.close()
        if self.dist.distributed:
            from algos.distributed.fsdp import teardown_distributed

            teardown_distributed()
