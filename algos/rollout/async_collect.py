"""The ``max_staleness >= 1`` counterpart of ``algos.rollout.collect.collect``: rounds rolled out ahead
by a producer thread (``algos.rollout.async_producer``), stale groups dropped, the rest scored and
filtered exactly as in the synchronous loop, and refilled from the next rounds.

A round is ``problems_per_iteration`` tasks drawn from the task pool, ``group_size``
episodes each, seeded ``seed + 1000 * round`` (the round number counts every round of the run, so
a resumed run draws the same tasks and seeds). The producer owns the task pool while it runs;
:attr:`AsyncCollector.position` (next round, task pool state after the last round taken) is what
a checkpoint stores: rounds rolled out but not yet taken are regenerated on resume, from the
checkpoint's weights, never saved.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agents.trajectory import Trajectory
from algos.config import ConfigError
from algos.rollout.async_producer import AsyncRollouts, split_stale, staleness_metrics
from algos.rollout.collect import (
    Collected,
    CollectPlan,
    RolloutEngine,
    RolloutSpec,
    TaskPool,
    count_solves,
    run_rollouts,
)
from algos.rollout.scoring import Counters, Scored, ScoringSpec, score_groups


@dataclass
class ProducedRound:
    """One round as the producer made it."""

    problems: list[str]
    trajs: list[Trajectory]
    pool_state: dict[str, Any]  # the task pool after this round's tasks were drawn


@dataclass
class Staleness:
    """An iteration's staleness record (see ``algos.rollout.async_producer.staleness_metrics``)."""

    ages: list[int] = field(default_factory=list)
    dropped_episodes: int = 0
    dropped_groups: int = 0

    def row(self) -> dict[str, Any]:
        return staleness_metrics(self.ages, self.dropped_episodes, self.dropped_groups)


class AsyncCollector:
    """Rounds produced ahead (at most ``max_staleness`` of them) and taken by :meth:`collect`.

    Args:
        plan: problems per round, group size, refills, base seed.
        spec: the env and agent settings of every episode.
        tasks: the task pool (the producer draws from it while it runs).
        engine: the rollout engine (an ``agents`` model with its own copy of the weights).
        max_staleness: K; also how many rounds the producer may run ahead.
        start_round: the first round's number (a resumed run's ``position[0]``).
    """

    def __init__(
        self,
        plan: CollectPlan,
        spec: RolloutSpec,
        tasks: TaskPool,
        engine: RolloutEngine,
        max_staleness: int,
        start_round: int = 0,
    ):
        self.plan, self.spec, self.tasks, self.engine = plan, spec, tasks, engine
        self.max_staleness = max_staleness
        self.position: tuple[int, dict[str, Any]] = (start_round, tasks.state_dict())
        self._source: AsyncRollouts[ProducedRound] | None = None
        self._stop = threading.Event()

    def start(self) -> None:
        """Start (or restart after :meth:`close`) the producer at :attr:`position`."""
        if self._source is not None:
            return
        round_, state = self.position
        self.tasks.load_state_dict(state)
        self._stop = threading.Event()
        self._source = AsyncRollouts(
            self._produce, max_ahead=self.max_staleness, start=round_, stop_event=self._stop
        )

    def close(self) -> None:
        """Stop the producer (after its current round); what it made ahead is dropped."""
        if self._source is not None:
            self._source.close()
            self._source = None

    def rewind(self, position: tuple[int, dict[str, Any]]) -> None:
        """Go back to ``position`` (Ctrl-C: the unfinished iteration's rounds are redone)."""
        self.close()
        self.position = position

    def _produce(self, index: int) -> ProducedRound:
        problems = self.tasks.sample(self.plan.problems_per_iteration)
        state = self.tasks.state_dict()
        trajs = run_rollouts(
            self.spec, self.engine, problems, self.plan.group_size, self.plan.seed + 1_000 * index
        )
        return ProducedRound(problems, trajs, state)

    def collect(
        self,
        scoring: ScoringSpec,
        reward_fn: Callable[[Trajectory], float] | None,
        counters: Counters,
        *,
        iteration: int,
        learner_version: int,
        solve_counts: dict[str, list[int]],
        tick: Callable[[Trajectory], None] | None = None,
    ) -> tuple[Collected, Staleness]:
        """Take rounds until ``plan.needed`` samples survive (at most ``max_refill_rounds``
        extra rounds; a round whose groups were all too stale is not counted as one). Groups
        more than ``max_staleness`` versions behind ``learner_version`` are dropped whole
        before scoring; the rest are scored, each group against its own members only."""
        if self._source is None:
            self.start()
        assert self._source is not None
        kept: list[Scored] = []
        rewards: list[float] = []
        episodes: list[Trajectory] = []
        stale = Staleness()
        rounds = group_base = 0
        while True:
            got = self._source.get()
            self.position = (got.index + 1, got.value.pool_state)
            trajs = got.value.trajs
            groups = [group_base + i // self.plan.group_size for i in range(len(trajs))]
            group_base += len(got.value.problems)
            split = split_stale(trajs, groups, learner_version, self.max_staleness)
            stale.ages += split.staleness
            stale.dropped_episodes += split.dropped_episodes
            stale.dropped_groups += split.dropped_groups
            fresh = [(t, g) for t, g, k in zip(trajs, groups, split.keep, strict=True) if k]
            if not fresh:
                continue
            fresh_trajs = [t for t, _ in fresh]
            for traj in fresh_trajs:
                if tick is not None:
                    tick(traj)
            count_solves(solve_counts, fresh_trajs)
            scored, survivors = score_groups(
                fresh_trajs,
                [g for _, g in fresh],
                scoring,
                reward_fn,
                counters,
                f"iteration {iteration + 1}",
            )
            episodes += fresh_trajs
            rewards += [s.reward for s in scored]
            kept += survivors
            if len(kept) >= self.plan.needed or rounds >= self.plan.max_refill_rounds:
                break
            rounds += 1
        collected = Collected.finish(
            kept,
            rounds,
            rewards,
            episodes,
            needed=self.plan.needed,
            scoring=scoring,
            counters=counters,
        )
        return collected, stale


def check_async(max_staleness: int, dist: Any, policy: Any) -> None:
    """What ``max_staleness >= 1`` needs: one process, and an engine with its own weights."""
    if not max_staleness:
        return
    if dist.distributed:
        raise ConfigError(
            f"max_staleness={max_staleness} under torchrun is not supported yet; "
            "use max_staleness=0 or one process"
        )
    if policy.shares_weights:
        raise ConfigError(
            f"max_staleness={max_staleness} needs a rollout engine with its own "
            "copy of the weights (the learner would change a shared module under a "
            "running generation); build the policy with share_module=False"
        )
