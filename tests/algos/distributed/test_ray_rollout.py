"""Ray rollouts on a local cluster: SWEStarter episodes, a worker killed mid-iteration."""

from __future__ import annotations

import os
import time

import pytest

ray = pytest.importorskip("ray")

from algos.distributed.ray_rollout import RayRolloutConfig, RayRolloutPool  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    ray.init(
        num_cpus=4,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}},
    )
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def task_ids():
    from swe_gym.tasks import load_tasks

    return [t.instance_id for t in load_tasks("starter")][:3]


def _holding(base, task_id, flag):
    """``base`` whose first episode on ``task_id`` hangs (a flag file marks it held).

    The first job goes to ``pool.workers[0]`` (dispatch fills workers in list order), so the
    tests kill that worker while its episode is surely in flight, not after it finished; the
    retried episode finds the flag and runs through.
    """

    class Holding(base):  # local class: pickled by value into the Ray actors
        def generate(self, conversation, params):
            if self._task(conversation).instance_id == task_id and not os.path.exists(flag):
                open(flag, "w").close()
                time.sleep(60)  # the kill ends it; a missed kill fails the asserts, no hang
            return super().generate(conversation, params)

    return Holding


def test_config_names_bad_policy():
    with pytest.raises(ValueError, match="unknown on_failure policy 'retyr'.*Did you mean 'retry'"):
        RayRolloutConfig(on_failure="retyr")


@pytest.mark.slow  # two workers, one killed mid-episode and its episodes run again (36 s wall)
def test_killed_worker_costs_only_its_episodes_which_are_retried(local_ray, task_ids, tmp_path):
    cfg = RayRolloutConfig(
        num_workers=2,
        worker_concurrency=2,
        worker_num_cpus=1,
        max_sandbox_starts_per_node=1,
        on_failure="retry",
        episode_timeout_s=120,
    )
    from agents.models.scripted import OracleModel

    model = _holding(OracleModel, task_ids[0], str(tmp_path / "held"))
    pool = RayRolloutPool(cfg, model_factory=model)
    pool.wait_ready()
    victim = pool.workers[0]
    killed = []

    def kill_once(job, traj):
        if not killed:
            killed.append(job)
            ray.kill(victim, no_restart=True)

    try:
        res = pool.run([(t, 0) for t in task_ids], progress=kill_once)
        stats = pool.limiter_stats()
    finally:
        pool.shutdown()
    assert res.dead_workers == 1
    assert res.retried >= 1  # the victim had at least one episode in flight
    assert res.failed == 0 and res.dropped == 0
    assert [t.task_id for t in res.trajectories] == task_ids  # job order, none missing
    assert all(t.finish_reason == "submitted" for t in res.trajectories), [
        (t.finish_reason, t.error) for t in res.trajectories
    ]
    assert sum(res.episodes_per_node.values()) == len(task_ids)
    (node,) = stats.values()  # one node: at most one sandbox start at a time
    assert node["peak"] == 1 and node["total"] >= len(task_ids)


def test_engine_actor_serves_workers_gets_weights_and_record_policy(local_ray, task_ids, tmp_path):
    from agents.models.scripted import OracleModel

    class VersionedOracle(
        _holding(OracleModel, task_ids[0], str(tmp_path / "held"))
    ):  # local class: pickled by value into the engine actor
        def update_weights(self, source):
            self.loaded = source

    cfg = RayRolloutConfig(
        num_workers=2,
        worker_concurrency=1,
        worker_num_cpus=0.5,
        num_engines=1,
        engine_num_cpus=0.5,
        on_failure="record",
        replace_dead_workers=False,
    )
    pool = RayRolloutPool(cfg, model_factory=VersionedOracle)
    pool.wait_ready()
    try:
        assert pool.push_weights("/ckpt/step-1") == 1
        assert pool.push_weights({"w": [1.0, 2.0]}) == 2  # a state dict through the object store
        assert ray.get(pool.engines[0].version.remote()) == 2
        victim = pool.workers[0]
        killed = []

        def kill_once(job, traj):
            if not killed:
                killed.append(job)
                ray.kill(victim, no_restart=True)

        res = pool.run([(t, 0) for t in task_ids], progress=kill_once)
    finally:
        pool.shutdown()
    assert res.dead_workers == 1 and res.failed == 1
    failed = [t for t in res.trajectories if t.finish_reason == "error"]
    assert [t.task_id for t in failed] == task_ids[:1]  # the held episode, recorded
    assert "rollout worker died" in failed[0].error
    ok = [t for t in res.trajectories if t.finish_reason != "error"]
    assert ok and all(t.finish_reason == "submitted" and t.model == "oracle" for t in ok)
