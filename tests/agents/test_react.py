"""The ReAct loop on the real starter env: oracle episodes, limits and model faults."""

from __future__ import annotations

import pytest

from agents.chat import ChatTemplate
from agents.models import OracleModel, ScriptedModel
from agents.protocols import Generation, SamplingParams
from agents.react import ReActAgent, run_episode
from swe_gym.tools.parsing import ToolCall, format_action

LS = "Let me look.\n```bash\nls\n```"
SUBMIT = format_action(ToolCall("submit"))


def test_oracle_episode_resolves_a_task(make_env, starter_task_ids, smollm2_tokenizer):
    task_id = starter_task_ids[0]
    traj = run_episode(make_env(), OracleModel(tokenizer=smollm2_tokenizer), task_id=task_id)
    assert traj.finish_reason == "submitted", traj.error
    assert traj.resolved and traj.reward == 1.0
    assert traj.task_id == task_id
    assert traj.patch.startswith("diff --git")
    assert traj.report and traj.report["resolved"]
    assert traj.token_exact and traj.model == "oracle"
    assert traj.system_prompt and traj.prompt
    assert not any(t.invalid_action for t in traj.turns)
    assert traj.to_swebench_prediction()["model_patch"] == traj.patch


def test_invalid_action_goes_back_to_the_model(make_env, recording):
    model = recording(ScriptedModel(["no command here", LS, SUBMIT]))
    traj = run_episode(make_env(), model)
    assert traj.finish_reason == "submitted", traj.error
    first = traj.turns[0]
    assert first.invalid_action and first.invalid_reason
    # The env's complaint is exactly what the model read next.
    assert model.seen[1].messages[-1] == {"role": "user", "content": first.observation}
    assert not traj.token_exact  # no tokenizer: a text-level run


def test_consecutive_invalid_cap_ends_the_episode(make_env):
    model = ScriptedModel(["nothing", "still nothing", "", LS, SUBMIT])
    traj = run_episode(make_env(), model, agent_kwargs={"max_consecutive_invalid": 3})
    assert traj.finish_reason == "invalid_actions"
    assert len(traj.turns) == 3 and all(t.invalid_action for t in traj.turns)
    assert "3 invalid actions in a row" in traj.error
    assert traj.reward == 0.0 and not traj.resolved


def test_valid_action_resets_the_invalid_count(make_env):
    model = ScriptedModel(["nothing", LS, "nothing", LS, SUBMIT])
    traj = run_episode(make_env(), model, agent_kwargs={"max_consecutive_invalid": 2})
    assert traj.finish_reason == "submitted", traj.error


def test_empty_reply_is_an_invalid_action_not_a_crash(make_env, smollm2_tokenizer):
    traj = run_episode(make_env(), ScriptedModel(["", SUBMIT], tokenizer=smollm2_tokenizer))
    assert traj.finish_reason == "submitted", traj.error
    empty = traj.turns[0]
    assert empty.invalid_action and empty.action == ""
    # A real model samples at least its end-of-turn token; that one is a policy token.
    assert empty.completion_ids == ChatTemplate(smollm2_tokenizer).end_of_turn_ids[:1]


def test_over_long_reply_is_cut_and_closed(make_env, smollm2_tokenizer, recording):
    long_reply = "```bash\n" + "echo hello; " * 200 + "\n```"
    model = recording(ScriptedModel([long_reply, SUBMIT], tokenizer=smollm2_tokenizer))
    traj = run_episode(
        make_env(), model, agent_kwargs={"params": SamplingParams(max_new_tokens=32)}
    )
    assert traj.finish_reason == "submitted", traj.error
    cut = traj.turns[0]
    assert cut.completion_finish_reason == "length" and len(cut.completion_ids) == 32
    assert cut.invalid_action  # the fence never closed
    eot = ChatTemplate(smollm2_tokenizer).end_of_turn_ids
    assert traj.turns[1].prompt_delta_ids[: len(eot)] == eot
    assert model.seen[1].token_ids == traj.conditioned_ids(1)


def test_undecodable_reply_is_cleaned_before_the_env(make_env, tiny_tokenizer):
    # Byte tokens of "h" and the first byte of "é": the text decodes with a replacement char.
    ids = tiny_tokenizer.encode("hé", add_special_tokens=False)[:2]
    broken = Generation(
        text=tiny_tokenizer.decode(ids) + "\udcff",
        token_ids=ids,
        logprobs=[-1.0, -2.0],
        finish_reason="length",
    )
    traj = run_episode(make_env(), ScriptedModel([broken, SUBMIT], tokenizer=tiny_tokenizer))
    assert traj.finish_reason == "submitted", traj.error
    action = traj.turns[0].action
    action.encode("utf-8")  # valid UTF-8 now
    assert action.startswith("h\ufffd")
    assert traj.turns[0].completion_ids == ids  # the sampled ids are kept as they were
    assert traj.turns[0].completion_logprobs == [-1.0, -2.0]


def test_context_overflow_mid_episode(make_env, smollm2_tokenizer, recording, starter_task_ids):
    task_id = starter_task_ids[0]  # the same task twice: the same prompt and observations
    model = recording(ScriptedModel([LS, LS, LS, LS, SUBMIT], tokenizer=smollm2_tokenizer))
    ct = ChatTemplate(smollm2_tokenizer)
    env = make_env()
    # Measure one turn, then allow about two.
    probe = run_episode(
        env, ScriptedModel([LS, SUBMIT], tokenizer=smollm2_tokenizer), task_id=task_id
    )
    first = len(probe.turns[0].prompt_delta_ids) + len(probe.turns[0].completion_ids)
    second = len(probe.turns[1].prompt_delta_ids)
    budget = first + second + 8
    assert budget > first + len(ct.end_of_turn_ids)
    traj = run_episode(env, model, task_id=task_id, agent_kwargs={"max_context_tokens": budget})
    assert traj.finish_reason == "context_overflow", traj.error
    assert 1 <= len(traj.turns) < 5
    assert "max_context_tokens" in traj.error
    # No generation was ever asked for more tokens than were left.
    for conv, params in zip(model.seen, model.params_seen, strict=True):
        assert len(conv.token_ids) + params.max_new_tokens <= budget
    assert traj.num_tokens <= budget


def test_turn_limit_of_the_agent(make_env):
    traj = run_episode(make_env(), ScriptedModel([LS] * 5), agent_kwargs={"max_turns": 2})
    assert traj.finish_reason == "max_turns" and len(traj.turns) == 2


def test_env_turn_limit_truncates_and_grades(make_env):
    traj = run_episode(make_env(max_turns=2), ScriptedModel([LS] * 5))
    assert traj.finish_reason == "max_turns" and len(traj.turns) == 2
    assert traj.report is not None and not traj.resolved


def test_model_error_is_recorded_and_env_closed(make_env):
    env = make_env()
    traj = run_episode(env, ScriptedModel([LS]))  # the script runs out on turn 2
    assert traj.finish_reason == "error"
    assert "ScriptExhausted" in traj.error
    assert env.unwrapped.sandbox is None


def test_bad_agent_settings_are_named():
    with pytest.raises(ValueError, match="max_context_tokens must be >= 1"):
        ReActAgent(ScriptedModel([]), max_context_tokens=0)


def test_time_budget_is_checked_before_each_model_call(make_env):
    traj = run_episode(
        make_env(), ScriptedModel([LS, SUBMIT]), agent_kwargs={"time_budget_s": 1e-9}
    )
    assert traj.finish_reason == "time_budget" and traj.turns == []
    assert "time_budget_s" in traj.error


def test_a_sandbox_dying_mid_episode_is_recorded_as_the_envs_failure(make_env):
    env = make_env()

    class KillsItsSandbox:  # a plain agent whose sandbox dies under it (as an OOM kill would)
        def reset(self, observation, info):
            pass

        def act(self, observation, info):
            env.unwrapped.sandbox.close()
            return LS

    traj = run_episode(env, KillsItsSandbox())
    # Not "max_turns": training must be able to tell an infrastructure failure from a turn limit.
    assert traj.finish_reason == "sandbox_failed" and traj.reward == 0.0
    assert traj.error and len(traj.turns) == 1
