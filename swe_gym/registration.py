"""Gymnasium registration as data. Entry points are strings, so importing ``swe_gym`` does not
import ``envs`` (the env classes load on ``gym.make``)."""

from __future__ import annotations

import gymnasium

# id -> (entry point, default kwargs). Every id takes tasks=, backend= and env options as overrides;
# the SWE ids also take prompt= and max_observation_chars= (envs/prompted.py).
ENV_SPECS: dict[str, tuple[str, dict]] = {
    "SWEStarter-v0": ("envs.prompted:make_swe_env", {"tasks": "starter", "backend": "local"}),
    "SWERebench-v0": (
        "envs.prompted:make_swe_env",
        {"tasks": "nebius/SWE-rebench", "split": "test", "backend": "docker"},
    ),
    "SWEBenchVerified-v0": (
        "envs.prompted:make_swe_env",
        {"tasks": "SWE-bench/SWE-bench_Verified", "split": "test", "backend": "docker"},
    ),
    "SWEGym-v0": (
        "envs.prompted:make_swe_env",
        {"tasks": "SWE-Gym/SWE-Gym", "split": "train", "backend": "docker"},
    ),
    "SWERL-v0": ("envs.swerl_env:SWERLEnv", {"tasks": "starter"}),
    "ToyKeyword-v0": ("envs.toy:ToyKeywordEnv", {}),
}


def register_all() -> None:
    for env_id, (entry_point, kwargs) in ENV_SPECS.items():
        if env_id not in gymnasium.registry:
            # No max_episode_steps: the env truncates itself at max_turns and grades the diff.
            gymnasium.register(
                env_id, entry_point=entry_point, kwargs=dict(kwargs), disable_env_checker=True
            )
