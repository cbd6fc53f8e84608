"""``--agent module:factory``: a user's agent program, written against the ``openai`` client,
runs episodes through the gateway; the env rewards them and the gateway records the
token-exact trajectories the learner trains on."""

from __future__ import annotations

import json
import statistics
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("openai")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from agents.chat import ChatTemplate  # noqa: E402
from agents.models import OracleModel, ScriptedModel  # noqa: E402
from agents.protocols import SamplingParams  # noqa: E402
from algos.config import ConfigError  # noqa: E402
from algos.rollout.agent_programs import load_agent_factory, run_agent_rollouts  # noqa: E402

EXAMPLE = "examples.openai_agent:make_agent"


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from agents.models.smollm2 import smollm2_tokenizer_path

    return AutoTokenizer.from_pretrained(str(smollm2_tokenizer_path()))


def _spec(agent=EXAMPLE, env="ToyKeyword-v0", env_kwargs=None, **kw):
    params = SamplingParams(temperature=0.7, max_new_tokens=kw.pop("max_new_tokens", 8))
    return SimpleNamespace(
        agent=agent,
        env=env,
        env_kwargs=env_kwargs or {"target": "w"},
        concurrency=4,
        episode_timeout_s=None,
        agent_kwargs={"params": params, "max_context_tokens": kw.pop("max_context_tokens", 256)},
        **kw,
    )


class _Engine(ScriptedModel):
    """A scripted token engine that keeps what the gateway asked of it."""

    def __init__(self, replies, tokenizer):
        super().__init__(replies, tokenizer=tokenizer, name="policy")
        self.calls = []

    def generate(self, conversation, params):
        self.calls.append((list(conversation.token_ids), dict(conversation.metadata), params))
        return super().generate(conversation, params)


def test_example_agent_episodes_are_rewarded_by_the_env_and_token_exact(tokenizer):
    engine = _Engine(["a wide view"], tokenizer)
    trajs = run_agent_rollouts(_spec(), engine, ["toy-0", "toy-1"], n_per_task=2, seed=5)
    assert [(t.task_id, t.seed) for t in trajs] == [
        ("toy-0", 5),
        ("toy-0", 6),
        ("toy-1", 5),
        ("toy-1", 6),
    ]
    template = ChatTemplate(tokenizer)
    for traj in trajs:
        assert traj.finish_reason == "submitted" and traj.reward == 1.0, traj.error
        assert traj.token_exact and traj.num_turns == 1 and traj.agent["program"] == EXAMPLE
        messages = [{"role": "user", "content": traj.prompt}]
        assert traj.turns[0].prompt_delta_ids == template.initial_ids(messages)
        assert traj.turns[0].action == "a wide view"
        assert "sk-episode" not in json.dumps(traj.to_dict())  # the episode's key is not kept
    # The run's sampling, whatever the program asked: its temperature, at most max_new_tokens,
    # and a seed per (task, episode seed, turn).
    params = [p for _, _, p in engine.calls]
    assert {(p.temperature, p.max_new_tokens, p.top_p) for p in params} == {(0.7, 8, 1.0)}
    assert len({p.seed for p in params}) == 4
    assert {m["task_id"] for _, m, _ in engine.calls} == {"toy-0", "toy-1"}


def test_program_failures_end_the_episode_as_errors(tokenizer, monkeypatch):
    module = types.ModuleType("my_agents")

    def quitter(base_url, api_key, model):
        return lambda env: env.reset()  # never steps

    def crasher(base_url, api_key, model):
        def play(env):
            env.reset()
            raise RuntimeError("agent bug")

        return play

    module.quitter, module.crasher, module.value = quitter, crasher, 3
    monkeypatch.setitem(sys.modules, "my_agents", module)
    engine = _Engine(["w"], tokenizer)
    (quit_,) = run_agent_rollouts(_spec("my_agents:quitter"), engine, ["toy-0"], 1, 0)
    assert quit_.finish_reason == "error" and "returned before" in quit_.error
    (crash,) = run_agent_rollouts(_spec("my_agents:crasher"), engine, ["toy-0"], 1, 0)
    assert crash.finish_reason == "error" and "agent bug" in crash.error
    for bad, words in [
        ("no_such_module_xyz:f", "cannot import module 'no_such_module_xyz'"),
        ("my_agents:missing", "has no attribute 'missing'"),
        ("my_agents:value", "is not callable"),
    ]:
        with pytest.raises(ConfigError, match=words):
            load_agent_factory(bad)


def test_every_segment_of_a_rewritten_history_is_kept_and_trained(tokenizer, monkeypatch):
    """A harness that calls the model again with a rewritten history (a summary instead of the
    conversation) records two segments; both are kept and become samples."""
    import openai

    from algos.rollout.scoring import Counters, Scored, to_samples

    def rewriter(base_url, api_key, model):
        client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)

        def chat(text):
            msgs = [{"role": "user", "content": text}]
            return client.chat.completions.create(model=model, messages=msgs).choices[0]

        def play(env):
            obs, _ = env.reset()
            draft = chat(obs).message.content
            env.step(chat(f"{obs}\nA draft to improve: {draft}").message.content)

        return play

    module = types.ModuleType("rewriting_agents")
    module.rewriter = rewriter
    monkeypatch.setitem(sys.modules, "rewriting_agents", module)
    engine = _Engine(["a draft with w", "the final w"], tokenizer)
    (traj,) = run_agent_rollouts(_spec("rewriting_agents:rewriter"), engine, ["toy-0"], 1, 0)
    assert traj.finish_reason == "submitted" and traj.reward == 1.0, traj.error
    assert traj.num_turns == 2 and traj.agent["segment_starts"] == [0, 1]
    assert traj.agent["prefix_failures"] == 1 and "dropped_turns" not in traj.agent
    counters = Counters()
    samples = to_samples(
        [Scored(traj, 0, 1.0, advantage=0.5)],
        counters,
        max_tokens=4096,
        mask_invalid=True,
        overlong_filter=False,
    )
    assert len(samples) == 2 and counters.segments == 2
    for sample, turn in zip(samples, traj.turns, strict=True):
        trained = [i for i, m in zip(sample.input_ids, sample.loss_mask, strict=True) if m]
        assert trained == turn.completion_ids  # each segment's own reply, in its own context
        assert sample.input_ids[: len(turn.prompt_delta_ids)] == turn.prompt_delta_ids


def test_context_overflow_ends_the_episode(tokenizer):
    engine = _Engine(["w"], tokenizer)
    (traj,) = run_agent_rollouts(_spec(max_context_tokens=4), engine, ["toy-0"], 1, 0)
    assert traj.finish_reason == "context_overflow" and engine.calls == []


def test_config_rejects_a_malformed_agent():
    from algos.dapo import DAPOConfig

    with pytest.raises(ConfigError, match="module:factory.*'examples.openai_agent'"):
        DAPOConfig(agent="examples.openai_agent")
    # A module that does not import fails with the config, before any model loads, and alone
    # (no chained ImportError traceback under it).
    with pytest.raises(ConfigError, match="cannot import module 'no_such_module_xyz'") as e:
        DAPOConfig(agent="no_such_module_xyz:make")
    assert e.value.__cause__ is None and e.value.__suppress_context__


def test_a_trajectory_saves_itself_alone_or_in_a_list(tmp_path):
    from agents.trajectory import Trajectory

    one, two = Trajectory(task_id="a"), Trajectory(task_id="b")
    one.save_jsonl(tmp_path / "one.jsonl")
    Trajectory.save_jsonl([one, two], tmp_path / "two.jsonl")
    assert [t.task_id for t in Trajectory.load_jsonl(tmp_path / "one.jsonl")] == ["a"]
    assert [t.task_id for t in Trajectory.load_jsonl(tmp_path / "two.jsonl")] == ["a", "b"]


def test_swestarter_episode_through_the_gateway(tokenizer):
    # The oracle as the policy engine: it reads the task from the session's metadata.
    from swe_gym.tasks import load_tasks

    task_id = load_tasks("starter")[0].instance_id
    spec = _spec(
        env="SWEStarter-v0",
        env_kwargs={"max_turns": 12, "command_timeout": 30},
        max_new_tokens=512,
        max_context_tokens=16384,
    )
    spec.concurrency = 1
    (traj,) = run_agent_rollouts(spec, OracleModel(tokenizer=tokenizer), [task_id], 1, 0)
    assert traj.finish_reason == "submitted", traj.error
    assert traj.resolved and traj.reward == 1.0 and traj.patch.startswith("diff --git")
    assert traj.token_exact and traj.num_turns >= 2 and traj.agent["segment_starts"] == [0]
    assert traj.system_prompt and traj.prompt


@pytest.mark.slow
def test_dapo_learns_through_the_gateway(tmp_path: Path):
    """The toy learning test (tests/algos/test_learning.py), with the example agent program
    driving every episode through the gateway instead of the built-in agent."""
    from algos import dapo
    from algos.loop.metrics import read_metrics
    from tests.algos.test_learning import LEARNING_ARGS

    run = tmp_path / "run"
    args = [*LEARNING_ARGS, "--agent", EXAMPLE, "--iterations", "16", "--run-dir", str(run)]
    assert dapo.main(args) == 0
    rewards = [r["reward_mean"] for r in read_metrics(run)]
    start, end = rewards[0], statistics.fmean(rewards[-3:])
    print("reward curve:", " ".join(f"{r:.2f}" for r in rewards))
    assert start < 0.35, rewards
    assert end > start + 0.4 and end > 0.65, rewards


def test_a_program_cannot_choose_its_task_seed_sampling_or_reward(tokenizer, monkeypatch):
    """Red team: a program (or a policy steering it) that asks for another task and seed, greedy
    and long sampling, resets twice, steps past the end and returns a reward of its own gets
    none of it: the rollout's task and seed, the run's sampling, the env's reward."""
    import openai

    tried: dict[str, str] = {}

    def greedy(base_url, api_key, model):
        client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)

        def play(env):
            obs, info = env.reset(seed=999, options={"task_id": "toy-1"})
            tried["task"] = info["task_id"]
            reply = client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": obs}],
                temperature=0.0,
                max_tokens=4096,
                top_p=0.5,
                seed=1,
            )
            env.step(reply.choices[0].message.content)
            for name, call in [("reset", env.reset), ("step", lambda: env.step("w"))]:
                try:
                    call()
                except RuntimeError as e:
                    tried[name] = str(e)
            return 99.0  # a reward of its own: ignored

        return play

    module = types.ModuleType("red_agents")
    module.greedy = greedy
    monkeypatch.setitem(sys.modules, "red_agents", module)
    engine = _Engine(["nope"], tokenizer)  # no "w": the env pays 0
    (traj,) = run_agent_rollouts(_spec("red_agents:greedy"), engine, ["toy-0"], 1, 3)
    assert (traj.task_id, traj.seed, tried["task"]) == ("toy-0", 3, "toy-0")
    assert traj.reward == 0.0 and not traj.resolved
    assert "reset() was called twice" in tried["reset"] and "after its end" in tried["step"]
    ((_, meta, params),) = engine.calls
    assert meta["task_id"] == "toy-0"
    assert (params.temperature, params.max_new_tokens, params.top_p) == (0.7, 8, 1.0)


def test_rft_trains_on_the_resolved_episodes_of_an_agent_program(tmp_path: Path):
    """``python -m algos.rft --agent``: the program's episodes (here the example program in
    front of the oracle) are rolled out through the gateway, the resolved ones kept and trained
    on."""
    from agents.trajectory import Trajectory
    from algos import rft
    from algos.loop.metrics import read_metrics

    run = tmp_path / "run"
    tasks = ["starter__tinystats-1", "starter__tinystats-2"]
    assert (
        rft.main(
            [
                "--rollout-model",
                "oracle",
                "--agent",
                EXAMPLE,
                "--tasks",
                ",".join(tasks),
                "--runs-per-task",
                "1",
                "--policy",
                "tiny-random",
                "--batch-size",
                "1",
                "--progress",
                "false",
                "--run-dir",
                str(run),
            ]
        )
        == 0
    )
    kept = Trajectory.load_jsonl(run / "rft_data.jsonl")
    assert sorted(t.task_id for t in kept) == tasks
    assert all(t.resolved and t.token_exact and t.agent["program"] == EXAMPLE for t in kept)
    assert len(read_metrics(run)) == len(kept)  # batch 1, 1 epoch
    with pytest.raises(ConfigError, match="pass one or the other"):
        rft.RFTConfig(agent=EXAMPLE, trajectories=[str(run / "rft_data.jsonl")])
