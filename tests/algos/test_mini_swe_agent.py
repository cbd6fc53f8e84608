"""A real third-party harness through ``--agent``: mini-swe-agent's ``DefaultAgent``
(examples/mini_swe_agent.py) plays SWEStarter episodes through the gateway; the env grades
them and every recorded turn becomes training tokens."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("minisweagent")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from agents.models import OracleModel, ScriptedModel  # noqa: E402
from agents.protocols import SamplingParams  # noqa: E402
from algos.rollout.agent_programs import run_agent_rollouts  # noqa: E402
from algos.rollout.scoring import Counters, Scored, to_samples  # noqa: E402

AGENT = "examples.mini_swe_agent:make_agent"
TASK = "starter__tinystats-2"


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from agents.models.smollm2 import smollm2_tokenizer_path

    return AutoTokenizer.from_pretrained(str(smollm2_tokenizer_path()))


def _spec(agent=AGENT):
    return SimpleNamespace(
        agent=agent,
        env="SWEStarter-v0",
        env_kwargs={"max_turns": 12, "command_timeout": 30},
        concurrency=1,
        episode_timeout_s=300,
        agent_kwargs={
            "params": SamplingParams(temperature=0.7, max_new_tokens=512),
            "max_context_tokens": 16384,
        },
    )


def _trained(traj) -> tuple[list[int], Counters]:
    """The token ids the learner trains on (loss mask 1), over all the episode's samples."""
    counters = Counters()
    samples = to_samples(
        [Scored(traj, 0, traj.reward, advantage=1.0)],
        counters,
        max_tokens=16384,
        mask_invalid=True,
        overlong_filter=False,
    )
    ids = [i for s in samples for i, m in zip(s.input_ids, s.loss_mask, strict=True) if m]
    return ids, counters


def _recorded(traj) -> list[int]:
    return [i for turn in traj.turns for i in turn.completion_ids]


def test_mini_swe_agent_resolves_a_starter_task_and_every_turn_trains(tokenizer):
    """The oracle as the policy engine, mini-swe-agent's own prompts and loop: its commands
    are the env's actions, the oracle's ``submit`` submits, the env resolves the task."""
    (traj,) = run_agent_rollouts(_spec(), OracleModel(tokenizer=tokenizer), [TASK], 1, 0)
    assert traj.finish_reason == "submitted", traj.error
    assert traj.resolved and traj.reward == 1.0 and traj.patch.startswith("diff --git")
    assert traj.token_exact and traj.num_turns == 5 and traj.agent["program"] == AGENT
    assert traj.agent["segment_starts"] == [0] and traj.agent["prefix_failures"] == 0
    assert "mswea_bash_command" in tokenizer.decode(traj.turns[0].prompt_delta_ids)  # its prompts
    trained, counters = _trained(traj)
    assert trained == _recorded(traj) and counters.segments == 1  # 5 of 5 turns trained


def test_an_early_quit_submits_and_every_segment_trains(tokenizer):
    """One command in mini-swe-agent's own fence, then replies with no command: each format
    error rewrites the history (the reply is dropped, an error message added), so the gateway
    records 3 segments; after 3 in a row the agent quits, the adapter submits, the env grades
    (nothing fixed: reward 0) and all 4 recorded turns train."""
    replies = ["Look first.\n```mswea_bash_command\nls tinystats\n```"] + ["I am done."] * 3
    calls = []

    def script(conversation):
        calls.append(len(conversation.messages))
        return replies[len(calls) - 1]

    (traj,) = run_agent_rollouts(_spec(), ScriptedModel(script, tokenizer=tokenizer), [TASK], 1, 0)
    assert traj.finish_reason == "submitted" and traj.error is None, traj.error
    assert traj.reward == 0.0 and not traj.resolved
    assert traj.num_turns == 4 and traj.agent["segment_starts"] == [0, 2, 3]
    assert traj.agent["prefix_failures"] == 2
    trained, counters = _trained(traj)
    assert trained == _recorded(traj) and counters.segments == 3  # 4 of 4 turns trained


def test_a_gateway_error_ends_the_episode_at_once(tokenizer, monkeypatch):
    """A 400 of the gateway (here: the context limit) is not retried for minutes, as
    mini-swe-agent's litellm models do: the episode ends, recorded as the trainer's error."""
    spec = _spec()
    spec.agent_kwargs["max_context_tokens"] = 64
    (traj,) = run_agent_rollouts(spec, OracleModel(tokenizer=tokenizer), [TASK], 1, 0)
    assert traj.finish_reason == "context_overflow" and traj.wall_s < 60, traj.error


# One DAPO iteration, as small as it goes: 1 problem x group 2 (DAPO's default of 300 problems
# per iteration draws the one task 300 times: 600 graded episodes, what made an earlier attempt
# time out), the scripted oracle without its looking around as the sampler (edit, submit: a
# resolved episode in 2 turns, the shortest trajectory the learner's vocabulary-sized head runs
# over), a tiny random policy, every sample kept (--filter none: equal rewards in the group, so
# DAPO's filter would drop it and refill) and one optimiser step.
TINY_DAPO = [
    "--tasks",
    TASK,
    "--policy",
    "tiny-random",
    "--agent",
    AGENT,
    "--iterations",
    "1",
    "--problems-per-iteration",
    "1",
    "--group-size",
    "2",
    "--batch-size",
    "2",
    "--filter",
    "none",
    "--max-refill-rounds",
    "0",
    "--length-penalty",
    "false",
    "--max-turns",
    "4",
    "--max-new-tokens",
    "512",
    "--max-context-tokens",
    "4096",
    "--progress",
    "false",
]


def test_one_tiny_dapo_iteration_trains_on_mini_swe_agent_episodes(tmp_path: Path):
    """``python -m algos.dapo --agent examples.mini_swe_agent:make_agent``: one iteration end to
    end (rollouts through the gateway, the env's grading, one learner step, a checkpoint)."""
    from agents.trajectory import Trajectory
    from algos import dapo
    from algos.loop.metrics import read_metrics
    from algos.report import EPISODES_DIR
    from swe_gym.oracle import oracle_actions
    from swe_gym.tasks import load_tasks

    (task,) = [t for t in load_tasks("starter") if t.instance_id == TASK]
    script = tmp_path / "oracle.json"
    script.write_text(json.dumps({TASK: oracle_actions(task, explore=False)}), encoding="utf-8")
    run = tmp_path / "run"
    assert (
        dapo.main([*TINY_DAPO, "--rollout-model", f"scripted:{script}", "--run-dir", str(run)]) == 0
    )
    (row,) = read_metrics(run)
    assert (row["episodes"], row["kept"], row["optimizer_steps"]) == (2, 2, 1), row
    assert row["resolved_rate"] == 1.0 and row["rollout_errors"] == 0
    assert row["segments"] == 2 and row["prefix_failures"] == 0  # every turn trained
    episodes = [
        t
        for f in sorted((run / EPISODES_DIR).glob("iter-*.jsonl"))
        for t in Trajectory.load_jsonl(f)
    ]
    assert len(episodes) == 2 and all(t.num_turns == 2 for t in episodes)
    assert all(t.resolved and t.token_exact and t.agent["program"] == AGENT for t in episodes)
    assert (run / "checkpoint").is_dir()
