"""The env on the Docker backend: the oracle solves every bundled task through the env's tools."""

from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym

import swe_gym  # noqa: F401
from swe_gym.oracle import oracle_actions


def test_oracle_gets_reward_one_on_every_task_in_docker(starter, run_id):
    def episode(task):
        opts = {"run_id": run_id}
        with gym.make("SWEStarter-v0", backend="docker", sandbox_options=opts, max_turns=50) as env:
            obs, info = env.reset(options={"task_id": task.instance_id})
            assert "/testbed" in obs
            for action in oracle_actions(task):
                obs, reward, terminated, truncated, info = env.step(action)
                assert not info["invalid_action"], obs
                if terminated or truncated:
                    break
            return task.instance_id, reward, info["report"]["reason"]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(episode, starter))
    assert [r for r in results if r[1] != 1.0] == []
