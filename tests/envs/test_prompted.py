"""Prompt styles of the SWE envs (envs/prompted.py): the compact tool description a small model
trains on, the short first observation, the observation budget, and nothing changed by default."""

from __future__ import annotations

import gymnasium as gym
import pytest

import swe_gym  # noqa: F401  (registers the ids)
from envs.prompted import PromptStyle, cut_middle
from envs.swe_env import SWEEnv
from swe_gym.tools.docs import compact_system_prompt, system_prompt

TASK = "starter__tinystats-1"


def test_default_make_is_the_plain_env_with_the_full_prompt():
    env = gym.make("SWEStarter-v0")
    try:
        assert type(env.unwrapped) is SWEEnv
        assert not any(isinstance(w, PromptStyle) for w in _chain(env))
        assert env.unwrapped.system_prompt == system_prompt("fenced", env.unwrapped.command_timeout)
    finally:
        env.close()


def _chain(env):
    while isinstance(env, gym.Wrapper):
        yield env
        env = env.env


@pytest.mark.parametrize("fmt", ["fenced", "json"])
def test_compact_prompt_is_a_fraction_of_the_full_one(fmt):
    from transformers import AutoTokenizer

    from agents.models.smollm2 import smollm2_tokenizer_path

    tok = AutoTokenizer.from_pretrained(str(smollm2_tokenizer_path()))
    compact = len(tok(compact_system_prompt(fmt))["input_ids"])
    full = len(tok(system_prompt(fmt))["input_ids"])
    assert compact < 300 and compact < full / 3, (compact, full)
    # it still documents every tool the env has
    for tool in ("str_replace_editor", "submit", "bash"):
        assert tool in compact_system_prompt(fmt)


def test_compact_env_shows_compact_text_and_still_grades():
    from swe_gym.oracle import oracle_actions
    from swe_gym.tasks import load_tasks

    env = gym.make("SWEStarter-v0", prompt="compact", max_observation_chars=300, max_turns=10)
    try:
        obs, info = env.reset(options={"task_id": TASK})
        assert info["system_prompt"] == compact_system_prompt("fenced")
        task = env.unwrapped.task
        assert obs.startswith("<issue>\n") and task.problem_statement.strip() in obs
        assert "You have 10 turns." in obs and "Start by exploring" not in obs
        obs, *_ = env.step("```\ncat tinystats/*.py\n```")
        assert len(obs) <= 300 and "characters cut" in obs
        assert obs.endswith(f"(Current directory: {env.unwrapped.sandbox.workdir})")
        (row,) = [t for t in load_tasks("starter") if t.instance_id == TASK]
        for action in oracle_actions(row, explore=False):
            obs, reward, terminated, truncated, info = env.step(action)
        assert terminated and reward == 1.0 and info["end_reason"] == "submitted"
    finally:
        env.close()


def test_prompt_options_are_checked():
    with pytest.raises(ValueError, match="unknown prompt 'short'.*compact, full"):
        gym.make("SWEStarter-v0", prompt="short")
    with pytest.raises(ValueError, match="max_observation_chars must be >= 200"):
        gym.make("SWEStarter-v0", max_observation_chars=50)


def test_cut_middle_keeps_head_and_tail_within_the_limit():
    text = "H" * 500 + "T" * 500
    out = cut_middle(text, 300)
    assert len(out) <= 300 and out.startswith("H") and out.endswith("T")
    assert "characters cut" in out
    assert cut_middle("short", 300) == "short"
