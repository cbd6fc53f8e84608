"""Sampling in a rollout is reproducible from its seed: each turn's sampling seed comes from
(task id, episode seed, turn), not from the order in which concurrent episodes reach the model."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from agents.models.transformers import TransformersModel  # noqa: E402
from agents.protocols import SamplingParams  # noqa: E402
from agents.rollout import rollout  # noqa: E402

# two tasks with the same prompt: only the task id tells their episodes apart
ENV_KWARGS = {"target": "w", "prompts": ["Say something.", "Say something."]}
TASKS = ["toy-0", "toy-1"]


def completions(model, concurrency: int, seed: int = 0, params=None) -> dict:
    trajs = rollout(
        "ToyKeyword-v0",
        model,
        TASKS,
        n_per_task=4,
        concurrency=concurrency,
        env_kwargs=ENV_KWARGS,
        seed=seed,
        agent_kwargs={"params": params or SamplingParams(max_new_tokens=8)},
    )
    assert all(t.finish_reason == "submitted" for t in trajs), [t.error for t in trajs]
    return {(t.task_id, t.seed): tuple(t.turns[0].completion_ids) for t in trajs}


@pytest.fixture(scope="module")
def engines(tiny_paths):
    # two engines whose own seed streams differ: only the episode seeds can make them agree
    a, b = (
        TransformersModel(tiny_paths["tiny0"], seed=0),
        TransformersModel(tiny_paths["tiny0"], seed=99),
    )
    yield a, b
    a.close()
    b.close()


def test_same_seed_same_samples_whatever_the_concurrency(engines):
    a, b = engines
    batched = completions(a, concurrency=8)
    serial = completions(b, concurrency=1)
    assert batched == serial
    # ... while episodes of a group, and the same episode seed on another task, differ
    assert len({batched[("toy-0", s)] for s in range(4)}) > 1
    assert [batched[("toy-0", s)] for s in range(4)] != [batched[("toy-1", s)] for s in range(4)]
    # another rollout seed gives other samples
    assert list(completions(a, concurrency=8, seed=100).values()) != list(batched.values())


def test_explicit_sampling_seed_wins(engines):
    a, _ = engines
    fixed = completions(a, concurrency=8, params=SamplingParams(max_new_tokens=8, seed=5))
    assert len(set(fixed.values())) == 1  # every episode sampled with seed 5, same prompt
