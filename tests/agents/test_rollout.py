"""Batched rollouts: concurrent, isolated, and never stalled by one bad episode."""

from __future__ import annotations

import threading

import gymnasium
import pytest

from agents.models import OracleModel
from agents.rollout import rollout


def _env(**kw):
    return gymnasium.make("SWEStarter-v0", max_turns=12, command_timeout=30, **kw)


class _BarrierModel:
    """Oracle whose first call of each episode waits until ``parties`` episodes are in flight:
    it only gets through if the rollout really runs them at once."""

    def __init__(self, parties: int):
        self.inner = OracleModel()
        self.name = "barrier-oracle"
        self.barrier = threading.Barrier(parties, timeout=60)

    def generate(self, conversation, params):
        if conversation.metadata["turn"] == 0:
            self.barrier.wait()
        return self.inner.generate(conversation, params)


def test_episodes_run_concurrently_and_in_task_order(starter_task_ids):
    tasks = starter_task_ids[:3]
    envs = []

    def factory():
        envs.append(_env())
        return envs[-1]

    trajs = rollout(factory, _BarrierModel(3), tasks, n_per_task=1, concurrency=3)
    assert [t.task_id for t in trajs] == tasks
    assert all(t.finish_reason == "submitted" and t.resolved for t in trajs), [
        (t.finish_reason, t.error) for t in trajs
    ]
    assert len(envs) == 3 and all(e.unwrapped.sandbox is None for e in envs)  # each closed


def test_n_per_task_is_task_major_with_distinct_seeds(starter_task_ids):
    tasks = starter_task_ids[:2]
    trajs = rollout(
        "SWEStarter-v0",
        OracleModel(),
        tasks,
        n_per_task=2,
        concurrency=2,
        env_kwargs={"max_turns": 12},
        seed=10,
    )
    assert [(t.task_id, t.seed) for t in trajs] == [
        (tasks[0], 10),
        (tasks[0], 11),
        (tasks[1], 10),
        (tasks[1], 11),
    ]
    assert all(t.resolved for t in trajs)


class _HangingModel:
    """Oracle, except for one task where the first call blocks until released."""

    def __init__(self, hang_task: str):
        self.inner = OracleModel()
        self.name = "hanging-oracle"
        self.hang_task = hang_task
        self.release = threading.Event()

    def generate(self, conversation, params):
        if conversation.metadata["task_id"] == self.hang_task:
            self.release.wait(timeout=120)
        return self.inner.generate(conversation, params)


@pytest.mark.slow  # 15 s: waits out a hanging episode's timeout
def test_failing_and_hanging_episodes_do_not_stall_the_others(starter_task_ids):
    tasks = starter_task_ids[:4]
    model = _HangingModel(hang_task=tasks[1])
    calls = []
    lock = threading.Lock()

    def factory():
        with lock:
            calls.append(1)
            first = len(calls) == 1
        if first:
            raise RuntimeError("sandbox backend unavailable")
        return _env()

    seen = []
    try:
        # concurrency 2: the hung episode holds a slot; the rest must still get through.
        trajs = rollout(
            factory, model, tasks, concurrency=2, episode_timeout_s=15, progress=seen.append
        )
    finally:
        model.release.set()  # released only after rollout returned: it did not wait for it
    by_task = {t.task_id: t for t in trajs}
    assert [t.task_id for t in trajs] == tasks
    assert by_task[tasks[0]].finish_reason == "error"
    assert "sandbox backend unavailable" in by_task[tasks[0]].error
    assert by_task[tasks[1]].finish_reason == "timeout"
    assert "episode_timeout_s" in by_task[tasks[1]].error
    for tid in tasks[2:]:
        assert by_task[tid].finish_reason == "submitted" and by_task[tid].resolved
    assert len(seen) == len(tasks)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="concurrency must be >= 1"):
        rollout(_env, OracleModel(), ["x"], concurrency=0)
