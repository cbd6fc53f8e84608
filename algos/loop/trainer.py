"""The one RL loop behind ``algos.grpo`` and ``algos.dapo``: iterate, train, push, log, checkpoint.

One iteration (:meth:`Trainer.iteration_step`; docs/methods.md#modified-dapo) has the three
phases its code numbers:

1. **collect** (rank 0; :meth:`Trainer.collect_groups`, ``algos.rollout.collect.collect``): draw
   ``problems_per_iteration`` tasks from the pool (``TaskPool``, resumable), roll out
   ``group_size`` episodes per task with the policy's rollout engine (temperature 1.0, no
   top-k/top-p), score them (``algos.rollout.scoring``: reward = env reward or ``reward_fn``, the
   hack monitor, the turn-based length penalty when enabled; crashed or not token-exact episodes
   dropped and counted, ``EpisodesFailed`` past ``max_error_share``; with ``mask_failed_groups``
   a group holding a failed or timed-out episode is left out), group advantages
   (``advantage_estimator``) and the named filter (``nonzero_advantage``: Nebius;
   ``nonconstant_group``: DAPO dynamic sampling; ``none``: GRPO); while fewer than
   ``batch_size`` samples survive, more problems are sampled (at most ``max_refill_rounds``
   extra rounds), then ``on_exhausted`` decides: ``error`` (:class:`DynamicSamplingExhausted`)
   or ``skip`` (counted in ``skipped_iterations``). The survivors become ``Sample``s (truncated
   to ``max_context_tokens``, counted; overlong episodes dropped only with ``overlong_filter``);
   up to ``save_episodes`` episodes go to ``RUN_DIR/episodes/`` (``python -m algos.report``).
2. **train and push** (:meth:`Trainer.train_on`): the samples are shuffled and split into
   ``min(max_steps_per_iteration, kept // batch_size)`` mini-batches, one optimiser step each
   (``algos.learner.learner.Learner``: global-token normalisation, clipping, KL, NaN-skip); the
   rollout engine takes the new weights, versioned by the learner's step.
3. **row**: the metrics row (with the behaviour/learner mismatch); :meth:`Trainer.run` logs it
   (``metrics.jsonl``, TensorBoard / W&B; ``algos.loop.metrics``), validates when due and writes
   a checkpoint (learner + task pool + iteration; ``algos.loop.run_state``) when due.

Asynchronous (``max_staleness`` K >= 1, ``algos.rollout.async_collect``): steps 1-2 run ahead on a
producer thread (at most K rounds) from the latest pushed weights while the learner trains; the
weights are pushed after every optimiser step as version = the learner's step, taken by the
engine between requests; a group whose oldest turn is more than K versions behind the learner
(at the iteration's start) is dropped whole, counted in ``dropped_stale``; the row gains the
staleness mean/max/histogram. Rounds made ahead are not checkpointed: resume regenerates them.

Ctrl-C: the current optimiser step finishes, then a checkpoint is written and the process exits
with status 130; ``--resume RUN_DIR`` continues the same run. An iteration cut short is redone
from its start: the task pool and solve counts are rewound to the iteration boundary, its
episodes are rolled out again (none are checkpointed), optimiser steps it already took stay.

What the loop runs on (engine, learner, task pool, validator; under torchrun or Ray too), its
weight pushes, checkpoints and resume: :class:`algos.loop.trainer_state.TrainerState`.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Callable
from typing import Any

from agents.trajectory import Trajectory
from algos.config import ConfigError
from algos.config.policy_gradient import PolicyGradientConfig
from algos.learner.samples import Sample
from algos.loop.metrics import (
    METRICS_FILE,
    RESULT_COLUMNS,
    VAL_COLUMNS,
    EpisodeStats,
    MetricsLogger,
    ProgressBar,
    format_table,
    iteration_row,
    reduce_step_metrics,
)
from algos.loop.run_state import InterruptGuard, broadcast_object, checkpoint_due, save_interrupted
from algos.loop.trainer_state import TrainerState
from algos.loop.validation import metrics_of
from algos.report import save_iteration_episodes
from algos.rollout.branching import branch_metrics
from algos.rollout.collect import Collected, collect, run_rollouts
from algos.rollout.scoring import Counters, EpisodesFailed

# What users import from here (the loop's public names live in the role modules)
__all__ = ["DynamicSamplingExhausted", "Trainer", "run_cli"]

log = logging.getLogger(__name__)


class DynamicSamplingExhausted(RuntimeError):
    """Fewer than ``batch_size`` samples survived the filter after every refill round."""


class Trainer(TrainerState):
    """Runs ``cfg.iterations`` iterations of the loop in the module docstring over the parts
    :class:`~algos.loop.trainer_state.TrainerState` builds (same arguments)."""

    # ------------------------------------------------------------------ one iteration
    def collect_groups(
        self, counters: Counters, tick: Callable[[Trajectory], None] | None = None
    ) -> Collected:
        """Phase 1 up to the survivors: roll out, score, filter, refill (rank 0)."""
        if self.collector is not None:  # rounds rolled out ahead; stale groups dropped
            got, self.staleness = self.collector.collect(
                self.scoring,
                self.reward_fn,
                counters,
                iteration=self.iteration,
                learner_version=self.learner.step,
                solve_counts=self.solve_counts,
                tick=tick,
            )
            return got
        self.policy.model.eval()
        return collect(
            self.plan,
            self.scoring,
            self.rollout_spec,
            self.task_pool,
            self.policy.require_engine(),
            self.reward_fn,
            counters,
            iteration=self.iteration,
            solve_counts=self.solve_counts,
            tick=tick,
        )

    def _make_samples(
        self, counters: Counters, tick: Callable[[Trajectory], None]
    ) -> tuple[list[Sample], Collected]:
        """Phase 1 (rank 0 only under torchrun): the learner's samples and the groups."""
        cfg = self.cfg
        got = self.collect_groups(counters, tick)  # with samples when enough survived
        if len(got.kept) < self.needed:
            msg = (
                f"iteration {self.iteration + 1}: only {len(got.kept)} of batch_size="
                f"{self.needed} samples survived filter={cfg.filter!r} after {got.rounds} "
                f"refill round(s) ({counters.episodes} episodes; {counters.filtered} filtered, "
                f"{counters.rollout_errors} rollout errors, {counters.reward_errors} reward "
                "errors)"
            )
            if cfg.on_exhausted == "error":
                raise DynamicSamplingExhausted(
                    msg + "; raise max_refill_rounds or problems_per_iteration, lower batch_size, "
                    "enable length_penalty so rewards differ, or set on_exhausted=skip"
                )
            log.warning("%s; iteration skipped (on_exhausted=skip)", msg)
            self.skipped_iterations += 1
            got.kept = []
        return got.samples, got

    def train_on(
        self, samples: list[Sample], guard: InterruptGuard
    ) -> tuple[list[dict[str, float]], float]:
        """Phase 2: the samples (the same full list on every rank) shuffled and split into
        mini-batches, one optimiser step each; returns each step's metrics and the seconds
        spent pushing weights (after every step with ``max_staleness``, else after the last)."""
        cfg = self.cfg
        if samples and self.old_logprobs_mode == "recompute":
            lps = self.learner.compute_logprobs(samples, loss_only=True)
            samples = [
                dataclasses.replace(
                    x,
                    proximal_logprobs=[v * m for v, m in zip(lp, x.loss_mask, strict=True)],
                )
                for x, lp in zip(samples, lps, strict=True)
            ]
        step_metrics: list[dict[str, float]] = []
        push_s = 0.0
        if samples:
            order = list(range(len(samples)))
            random.Random(cfg.seed + self.iteration).shuffle(order)
            n_steps = max(1, min(cfg.max_steps_per_iteration, len(samples) // cfg.batch_size))
            for chunk in [order[k::n_steps] for k in range(n_steps)]:
                batch = [samples[j] for j in chunk]
                with guard.critical():
                    metrics = self.learner.train_step(batch)
                    if hasattr(self.learner, "ctx") and self.learner.ctx.distributed:
                        metrics = reduce_step_metrics(metrics, batch, self.learner.ctx)
                step_metrics.append(metrics)
                if self.max_staleness:  # in flight: episodes running now take the new weights
                    push_s += self.push_weights()
            if not self.max_staleness:
                push_s = self.push_weights()
        if self.old_logprobs_mode == "behaviour":
            # the behaviour/learner mismatch compares equal weights only at the first step (the
            # later steps' weights have moved on from the ones that sampled)
            step_metrics[1:] = [
                {k: v for k, v in m.items() if not k.startswith("mismatch_")}
                for m in step_metrics[1:]
            ]
        return step_metrics, push_s

    def iteration_step(
        self, guard: InterruptGuard, tick: Callable[[Trajectory], None]
    ) -> dict[str, Any]:
        """One iteration; returns its metrics row (an empty dict on ranks other than 0)."""
        cfg = self.cfg
        t0 = time.perf_counter()
        counters = Counters()
        branch_row: dict[str, float] = {}
        samples: list[Sample] = []
        got, error = Collected([], 0, [], []), None
        version = self.learner.step  # the weights that sample this iteration
        # 1. collect: roll out, score, filter and refill until the batch is full (rank 0)
        if self.dist.is_main:
            try:
                samples, got = self._make_samples(counters, tick)
                if cfg.branch_at != "none":  # before the episodes are let go, below
                    branch_row = branch_metrics(got.episodes, cfg.group_size)
                if getattr(cfg, "save_episodes", 0) != 0:
                    save_iteration_episodes(
                        self.run_dir,
                        self.iteration + 1,
                        got.episodes,
                        version,
                        cfg.save_episodes,
                        cfg.save_episodes_sampling,
                        cfg.seed,
                    )
                got.episodes = []
            except Exception as e:  # the other ranks wait for the samples: tell them
                if not self.dist.distributed:
                    raise
                error = e
        if self.dist.distributed:  # DistributedLearner takes the same full list on every rank
            samples, error = broadcast_object((samples, error))
            if error is not None:
                raise error
        t_rollout = time.perf_counter() - t0
        # 2. train and push: the optimiser steps on the samples; the engine takes the new
        # weights, versioned by the learner's step
        t1 = time.perf_counter()
        step_metrics, t_push = self.train_on(samples, guard)
        t_train = time.perf_counter() - t1
        if not self.dist.is_main:
            return {}
        # 3. the metrics row (Trainer.run logs it and checkpoints when due)
        self.totals.add(counters)
        row = iteration_row(
            self.iteration + 1,
            counters,
            rounds=got.rounds,
            rewards=got.rewards,
            advantages=[s.advantage for s in got.kept],
            n_samples=len(samples),
            step_metrics=step_metrics,
            learner=self.learner,
            skipped_iterations=self.skipped_iterations,
            times={
                "time_rollout_s": t_rollout,
                "time_train_s": t_train,
                "time_push_s": t_push,
                "time_s": time.perf_counter() - t0,
            },
        )
        if self.max_staleness:
            row.update(self.staleness.row())
        row.update(branch_row)
        return row

    def validate(self) -> dict[str, float]:
        """A validation on the engine's current weights (rank 0); its metrics-row keys."""
        assert self.validator is not None
        self.policy.model.eval()
        plain = dataclasses.replace(self.rollout_spec, branch_at="none")  # independent episodes
        row = self.validator.validate(
            lambda ids, n, seed: run_rollouts(plain, self.policy.require_engine(), ids, n, seed),
            self.iteration,
            self.learner.step,
        )
        return metrics_of(row)

    # ------------------------------------------------------------------ the run
    def run(self) -> list[dict[str, Any]]:
        """All iterations; returns the metric rows. Raises KeyboardInterrupt after saving."""
        cfg = self.cfg
        main = self.dist.is_main  # under torchrun rank 0 alone logs
        logger = (
            MetricsLogger(
                self.run_dir,
                cfg.log,
                self.config_dict,
                cfg.wandb_project,
                resume_from=self.iteration if cfg.resume else None,
            )
            if main
            else None
        )
        bar = ProgressBar(cfg.progress and main, cfg.iterations, self.iteration, self.algo)
        boundary = self._boundary()
        try:
            with InterruptGuard() as guard:
                try:
                    if self.validator is not None and not self.validator.rows:
                        assert logger is not None  # both are rank 0's
                        logger.log({"iteration": 0, **self.validate()})  # before training
                    while self.iteration < cfg.iterations:
                        boundary = self._boundary()
                        stats = EpisodeStats()

                        def tick(traj: Trajectory, stats: EpisodeStats = stats) -> None:
                            stats.add(traj)
                            bar.episodes(stats)

                        row = self.iteration_step(guard, tick)
                        self.iteration += 1
                        if self.validator is not None and self.validator.due(
                            self.iteration, cfg.iterations, cfg.val_every
                        ):
                            row.update(self.validate())
                        if logger is not None:
                            row.update(stats.summary())
                            logger.log(row)
                            self.rows.append(row)
                        bar.iteration(row)
                        if checkpoint_due(self.iteration, cfg.iterations, cfg.checkpoint_every):
                            with guard.critical():
                                self.save()
                except KeyboardInterrupt:
                    bar.close()
                    if self.collector is not None:
                        self.collector.close()
                    self._rewind(boundary)
                    save_interrupted(
                        self.save,
                        f"iteration {self.iteration} (optimizer step {self.learner.step})",
                        self.algo,
                        self.run_dir,
                        self.checkpoint_dir,
                        rank=self.dist.rank,
                    )
                    raise
        finally:
            if self.collector is not None:  # no producer thread outlives run()
                self.collector.close()
            bar.close()
            if logger is not None:
                logger.close()
        return self.rows


def run_cli(cfg: PolicyGradientConfig, algo: str, **kwargs: Any) -> int:
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
    columns: tuple[tuple[str, str, str], ...] = RESULT_COLUMNS
    if trainer.validator is not None:  # the table's first row is then the validation before
        columns = (*RESULT_COLUMNS[:-1], *VAL_COLUMNS, RESULT_COLUMNS[-1])
        rows = [{"iteration": 0, **metrics_of(trainer.validator.rows[0])}, *rows]
    print(format_table(rows, columns))
    if trainer.validator is not None and (line := trainer.validator.summary()):
        print(line)
    print(
        f"metrics: {trainer.run_dir / METRICS_FILE}; checkpoint: {trainer.checkpoint_dir}; "
        f"plot: python -m algos.plot {trainer.run_dir}"
    )
    return 0
