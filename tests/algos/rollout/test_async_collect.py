"""algos/rollout/async_collect.py: the asynchronous collector's refill rounds (rollouts faked),
the twin of test_collect.py's synchronous refill test."""

from __future__ import annotations

from algos.rollout import async_collect
from algos.rollout.async_collect import AsyncCollector
from algos.rollout.collect import CollectPlan, TaskPool
from algos.rollout.scoring import Counters, ScoringSpec
from tests.algos.fake_episodes import traj


def test_refill_adds_each_rounds_survivors_to_the_kept_ones(monkeypatch):
    """Two problems a round, the second one's group constant (filtered out): each round keeps
    one group of two, short of the four needed, so one refill round is taken and both rounds'
    groups are kept, numbered on across rounds. Replacing the kept samples with each round's
    survivors instead would never reach four and would use every refill round."""
    calls: list[tuple[list[str], int]] = []

    def fake_rollouts(spec, engine, task_ids, n_per_task, seed, progress=None):
        calls.append((list(task_ids), seed))
        out = []
        for i, tid in enumerate(task_ids):
            for j in range(n_per_task):
                t = traj(tid, reward=float(i == 0 and j == 0))
                t.policy_version_min = 0  # sampled by the learner's current weights: not stale
                out.append(t)
        return out

    monkeypatch.setattr(async_collect, "run_rollouts", fake_rollouts)
    plan = CollectPlan(
        problems_per_iteration=2, group_size=2, needed=4, max_refill_rounds=3, seed=7
    )
    collector = AsyncCollector(
        plan, None, TaskPool(["a", "b", "c", "d"], seed=0), None, max_staleness=1
    )
    ticks, solves = [], {}
    try:
        got, stale = collector.collect(
            ScoringSpec(filter="nonconstant_group"),
            None,
            Counters(),
            iteration=0,
            learner_version=0,
            solve_counts=solves,
            tick=ticks.append,
        )
    finally:
        collector.close()
    (first, _), (second, _) = calls[:2]
    assert got.rounds == 1 and collector.position[0] == 2  # two rounds taken, then enough
    assert len(got.kept) == 4
    assert [s.traj.task_id for s in got.kept] == [first[0]] * 2 + [second[0]] * 2
    assert [s.group for s in got.kept] == [0, 0, 2, 2]
    assert len(got.episodes) == len(ticks) == 8 and got.rewards == [1.0, 0.0, 0.0, 0.0] * 2
    assert sum(a for a, _ in solves.values()) == 8
    assert stale.row()["staleness_hist"] == {"0": 4} and stale.dropped_groups == 0
    assert [seed for _, seed in calls[:2]] == [7, 1007]  # a seed block per round
