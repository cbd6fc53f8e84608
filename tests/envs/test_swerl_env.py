"""SWERLEnv: prompt, similarity and execution rewards, gymnasium checks."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.utils.env_checker import check_env

import swe_gym  # noqa: F401  (registers the ids)
from envs.swerl_env import SWERLEnv
from swe_gym.swerl import apply_patch, edits_from_patch, render_response
from swe_gym.tasks import normalise_row


@pytest.fixture
def env(mini_repo):
    row, repos = mini_repo
    e = SWERLEnv(tasks=[row], repos_dir=repos)
    yield e
    e.close()


def oracle_response(env: SWERLEnv, task_id: str) -> str:
    task = env._by_id[task_id]
    files = env.code_context(task).files
    return render_response("Use the gold fix.", edits_from_patch(files, task.patch))


def test_check_env_passes(env) -> None:
    check_env(env)


def test_reset_gives_the_swerl_prompt(env, mini_repo) -> None:
    obs, info = env.reset(seed=0)
    assert info["task_id"] == "local__mini-1"
    assert "<think>" in info["system_prompt"] and "<solution>" in info["system_prompt"]
    assert "add(2, 2) returns 0 instead of 4." in obs
    assert "### calc.py\ndef add(a, b):\n    return a - b\n" in obs  # the gold file, whole
    assert "<<<<<<< SEARCH" in obs and ">>>>>>> REPLACE" in obs
    assert "calc.py" in info["context_files"]
    assert env.observation_space.contains(obs)


def test_perfect_response_scores_one_and_makes_a_git_patch(env, mini_repo) -> None:
    env.reset(options={"task_id": "local__mini-1"})
    obs, reward, terminated, truncated, info = env.step(oracle_response(env, "local__mini-1"))
    assert (obs, reward, terminated, truncated) == ("", 1.0, True, False)
    assert info["format_ok"] and info["reason"] is None
    assert info["similarities"] == {"calc.py": 1.0}
    assert info["edits"][0]["path"] == "calc.py"
    row, _ = mini_repo
    files = env.code_context(normalise_row(row)).files
    assert apply_patch(files, info["patch"]) == apply_patch(files, row["patch"])
    with pytest.raises(ResetNeeded):
        env.step("again")


def test_format_error_is_minus_one_with_reason(env) -> None:
    env.reset(seed=1)
    _, reward, terminated, _, info = env.step(
        "<think>hmm</think><solution>no blocks here</solution>"
    )
    assert reward == -1.0 and terminated
    assert info["reason"] == "no_edit_block" and info["edits"] == [] and info["patch"] == ""


def test_bad_arguments_name_the_value() -> None:
    with pytest.raises(ValueError, match="unknown reward 'similarty'.*similarity"):
        SWERLEnv(tasks=[], reward="similarty")
    with pytest.raises(ValueError, match="context selector"):
        SWERLEnv(tasks="starter", context_selector="bm52")


def test_step_before_reset(env) -> None:
    with pytest.raises(ResetNeeded):
        env.step("x")


def test_registered_id_on_the_starter_suite() -> None:
    env = gym.make("SWERL-v0", max_context_files=2)
    try:
        ids = [t.instance_id for t in env.unwrapped.tasks]
        assert ids
        for task_id in ids[:3]:
            obs, info = env.reset(options={"task_id": task_id})
            assert info["task_id"] == task_id
            _, reward, terminated, _, info = env.step(oracle_response(env.unwrapped, task_id))
            assert terminated and reward == 1.0, info
        check_env(env.unwrapped)
    finally:
        env.close()


def test_execution_reward(mini_repo) -> None:
    row, repos = mini_repo
    env = SWERLEnv(tasks=[row], repos_dir=repos, reward="execution", backend="local")
    env.reset(seed=0)
    _, reward, _, _, info = env.step(oracle_response(env, "local__mini-1"))
    assert reward == 1.0 and info["report"]["resolved"]
    env.reset(seed=0)
    wrong = "```\n### calc.py\n<<<<<<< SEARCH\ndef add(a, b):\n    return a - b\n=======\ndef add(a, b):\n    return 5\n>>>>>>> REPLACE\n```"
    _, reward, _, _, info = env.step(f"<think>a wrong constant</think><solution>{wrong}</solution>")
    assert info["format_ok"] and reward == 0.0 and not info["report"]["resolved"]
    env.reset(seed=0)
    _, reward, _, _, info = env.step("no tags at all")
    assert reward == -1.0 and "report" not in info


def test_env_does_not_import_torch() -> None:
    code = "import sys, swe_gym, envs.swerl_env, swe_gym.curate; assert 'torch' not in sys.modules, 'torch'"
    subprocess.run([sys.executable, "-c", code], check=True)
