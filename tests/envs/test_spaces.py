"""``UnicodeText``: any string is in the space, and vector envs carry any string."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv
from gymnasium.vector.utils import (
    create_shared_memory,
    read_from_shared_memory,
    write_to_shared_memory,
)

import swe_gym  # noqa: F401  (registers the ids)
from envs.spaces import UnicodeText

TEXTS = ["Привет 🙂", "naïve café\n\ttab", "日本語", "surrogates \udcff \ud800", "", "\x00nul"]


def test_any_string_within_the_bounds_is_in_the_space():
    space = UnicodeText(20)
    assert all(space.contains(t) for t in TEXTS)
    assert not space.contains("x" * 21) and not space.contains(b"bytes")
    assert space.contains(space.sample())


def test_shared_memory_round_trips_any_string_and_stays_live():
    space = UnicodeText(30)
    shm = create_shared_memory(space, n=len(TEXTS))
    view = read_from_shared_memory(space, shm, n=len(TEXTS))  # read once, like AsyncVectorEnv
    for i, text in enumerate(TEXTS):
        write_to_shared_memory(space, i, text, shm)
    assert tuple(view) == tuple(TEXTS)
    write_to_shared_memory(space, 0, "changed", shm)
    assert view[0] == "changed"
    with pytest.raises(ValueError, match="at most 30 characters"):
        write_to_shared_memory(space, 0, "x" * 31, shm)


@pytest.mark.parametrize("shared_memory", [True, False])
def test_async_vector_env_over_the_toy_env(shared_memory):
    prompts = TEXTS[:4]
    venv = AsyncVectorEnv(
        [lambda: gym.make("ToyKeyword-v0", prompts=prompts) for _ in range(2)],
        shared_memory=shared_memory,
    )
    try:
        seen = set()
        for seed in range(6):
            obs, info = venv.reset(seed=seed)
            assert list(obs) == [prompts[int(i.split("-")[1])] for i in info["task_id"]]
            seen.update(obs)
        assert len(seen) > 1  # later resets are not the first reset's strings
        _, reward, terminated, *_ = venv.step(("yes", "no"))
        assert list(reward) == [1.0, 0.0] and all(terminated)
    finally:
        venv.close()


def test_async_vector_env_over_swe_env_with_non_ascii_output(mini_repo):
    row, repos = mini_repo

    def make():
        return gym.make(
            "SWEStarter-v0", tasks=[row], sandbox_options={"repos_dir": str(repos)}, max_turns=5
        )

    for cls in (AsyncVectorEnv, SyncVectorEnv):
        venv = cls([make, make])
        try:
            venv.reset(seed=0)
            obs, *_ = venv.step(("```\necho héllo €\n```", "```\nprintf '日本\\xff'\n```"))
            assert obs[0].startswith("héllo €") and obs[1].startswith("日本\ufffd"), obs
        finally:
            venv.close()
