"""algos/rollout/collect.py: the task pool (one pass per epoch, seeded, resumable), solve counts and one
iteration's collect with its refill rounds (rollouts faked)."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest

from algos.rollout import collect as rollouts
from algos.rollout.collect import CollectPlan, TaskPool, collect, count_solves, roll_out_groups
from algos.rollout.scoring import Counters, ScoringSpec
from tests.algos.fake_episodes import traj


def test_sampler_covers_the_pool_once_per_epoch_and_resumes_where_it_stopped(caplog):
    pool = [f"t{i}" for i in range(5)]
    s = TaskPool(pool, seed=3)
    first = s.sample(5)
    assert sorted(first) == pool
    second = s.sample(5)
    assert sorted(second) == pool and second != first  # a fresh permutation per epoch
    s.sample(2)
    state = s.state_dict()
    assert state == {"epoch": 2, "position": 2, "pool": pool}  # passes made, place in this one
    resumed = TaskPool(pool, seed=3)
    resumed.load_state_dict(state)
    assert resumed.sample(6) == s.sample(6)
    assert TaskPool(pool, seed=3).sample(5) == first  # seeded
    assert TaskPool(pool, seed=4).sample(10) != first + second
    changed = TaskPool(pool + ["t5"], seed=3)
    with caplog.at_level("WARNING", logger="algos.rollout.collect"):
        changed.load_state_dict(state)  # a different pool: starts over, and says so
    assert (changed.epoch, changed.position) == (0, 0)
    assert "task pool changed since the checkpoint" in caplog.text
    with pytest.raises(Exception, match="empty"):
        TaskPool([])


def test_count_solves_accumulates_attempts_and_resolutions():
    counts: dict[str, list[int]] = {"a": [2, 1]}
    count_solves(counts, [traj("a", reward=1.0), traj("a", reward=0.0), traj("b", reward=1.0)])
    assert counts == {"a": [4, 2], "b": [1, 1]}
    assert Counter(TaskPool(["x", "y"], seed=0).sample(6)) == {"x": 3, "y": 3}


def test_collect_refills_keep_every_round_with_groups_numbered_across_rounds(monkeypatch):
    """Three rounds (2 problems, then refills of 1): every round's episodes, rewards and
    survivors are kept, groups are numbered on from the earlier rounds, each episode ticks
    the progress bar once, and each round has its own seed block."""
    calls = []

    def fake_rollouts(spec, engine, task_ids, n_per_task, seed, progress=None):
        calls.append((list(task_ids), seed))
        out = [traj(tid, reward=float(j == 0)) for tid in task_ids for j in range(n_per_task)]
        for t in out:
            if progress:
                progress(t)
        return out

    monkeypatch.setattr(rollouts, "run_rollouts", fake_rollouts)
    cfg = SimpleNamespace(
        problems_per_iteration=2, group_size=2, max_refill_rounds=2, refill_problems=1, seed=7
    )
    plan = CollectPlan.from_config(cfg, needed=100)
    assert plan == CollectPlan(2, 2, 100, 2, 1, 7)
    ticks, solves = [], {}
    got = collect(
        plan,
        ScoringSpec(filter="nonconstant_group"),
        None,
        TaskPool(["a", "b", "c", "d"], seed=0),
        None,
        None,
        Counters(),
        iteration=1,
        solve_counts=solves,
        tick=ticks.append,
    )
    assert [len(tasks) for tasks, _ in calls] == [2, 1, 1]
    # iteration 1's rounds take the seed blocks after iteration 0's three
    assert [seed for _, seed in calls] == [7 + 1000 * k for k in (3, 4, 5)]
    assert got.rounds == 2 and len(got.episodes) == len(ticks) == 8
    assert got.rewards == [1.0, 0.0] * 4
    assert [s.group for s in got.kept] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert sum(a for a, _ in solves.values()) == 8
    trajs, groups = roll_out_groups(None, None, ["a", "b"], 2, seed=0)
    assert groups == [0, 0, 1, 1] and len(trajs) == 4
