"""--max-staleness K >= 1 through the real entry point (tiny policy, ToyKeyword-v0): versions on
every turn, the staleness bound, the metrics row, resume, Ctrl-C and configuration errors."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from agents.trajectory import load_jsonl
from algos import grpo
from algos.config import ConfigError
from algos.loop.metrics import read_metrics
from tests.algos import toy_run

ARGS = [
    "--env",
    "ToyKeyword-v0",
    "--env-kwargs",
    '{"target": "w"}',
    "--policy",
    "tiny-random",
    "--max-new-tokens",
    "3",
    "--max-turns",
    "1",
    "--max-context-tokens",
    "128",
    "--group-size",
    "4",
    "--problems-per-iteration",
    "2",
    "--batch-size",
    "8",
    "--lr",
    "1e-3",
    "--concurrency",
    "8",
    "--progress",
    "false",
    "--seed",
    "0",
]
# the same run as a config (toy_run's settings and these)
RUN = dict(
    env_kwargs={"target": "w"},
    group_size=4,
    problems_per_iteration=2,
    batch_size=8,
    lr=1e-3,
    concurrency=8,
    seed=0,
)


def extra_state(run: Path) -> dict:
    """The trainer's part of the latest checkpoint."""
    from algos.learner.checkpoint import resolve_checkpoint

    path = resolve_checkpoint(run / "checkpoint") / "learner_state.pt"
    return torch.load(path, weights_only=False)["extra_state"]


def producers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "rollout-producer" and t.is_alive()]


def test_k1_rows_versions_and_resume(tmp_path: Path):
    run = tmp_path / "run"
    assert (
        grpo.main([*ARGS, "--max-staleness", "1", "--iterations", "3", "--run-dir", str(run)]) == 0
    )
    rows = read_metrics(run)
    assert [r["step"] for r in rows] == [1, 2, 3]  # one optimiser step each, none lost
    for row in rows:
        assert row["dropped_stale"] == 0 and row["staleness_max"] <= 1
        assert sum(row["staleness_hist"].values()) == 2  # both groups, each counted once
        assert "mismatch_kl" in row
    assert rows[0]["staleness_hist"] == {"0": 2}  # the first round: the initial weights
    episodes = sorted((run / "episodes").glob("*.jsonl"))
    versions = [t.policy_version for f in episodes for traj in load_jsonl(f) for t in traj.turns]
    assert versions and all(v is not None for v in versions)
    assert extra_state(run)["async_round"] == 3  # three rounds taken; the one made ahead is not
    assert not producers()  # run() stops its producer
    # resume: the rounds taken are checkpointed, the ones made ahead are redone
    assert (
        grpo.main([*ARGS, "--max-staleness", "1", "--iterations", "4", "--resume", str(run)]) == 0
    )
    rows = read_metrics(run)
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4] and rows[-1]["step"] == 4
    assert rows[-1]["staleness_max"] <= 1 and extra_state(run)["async_round"] == 4
    assert not producers()


def test_ctrl_c_in_the_learner_saves_and_stops_the_producer(tmp_path: Path):
    run = tmp_path / "run"
    calls = {"n": 0}

    def reward(traj) -> float:  # scored on the learner's thread; the 3rd round is interrupted
        calls["n"] += 1
        if calls["n"] > 16:
            raise KeyboardInterrupt
        return float(traj.reward)

    cfg = grpo.GRPOConfig(**toy_run.toy_fields(run, **RUN, max_staleness=2, iterations=5))
    from algos.loop.trainer import Trainer

    trainer = Trainer(cfg, "grpo", reward_fn=reward)
    try:
        with pytest.raises(KeyboardInterrupt):
            trainer.run()
    finally:
        trainer.close()
    assert not producers()
    assert len(read_metrics(run)) == 2
    assert extra_state(run)["iteration"] == 2 and extra_state(run)["async_round"] == 2
    # the interrupted iteration is redone on resume from the round after the last one taken
    assert (
        grpo.main([*ARGS, "--max-staleness", "2", "--iterations", "3", "--resume", str(run)]) == 0
    )
    assert [r["iteration"] for r in read_metrics(run)] == [1, 2, 3]


def test_k1_with_a_shared_module_is_a_config_error(tmp_path: Path):
    from algos.loop.trainer import Trainer
    from algos.policy import build_policy

    cfg = grpo.GRPOConfig(
        **toy_run.toy_fields(tmp_path / "run", **RUN, max_staleness=1, iterations=1)
    )
    policy = build_policy(cfg, tmp_path / "run")  # float32 transformers: shares the module
    assert policy.shares_weights
    with pytest.raises(ConfigError, match="max_staleness=1 needs a rollout engine with its own"):
        Trainer(cfg, "grpo", policy=policy)
    policy.close()


def test_negative_max_staleness_is_rejected():
    with pytest.raises(ConfigError, match="max_staleness must be >= 0.*got -1"):
        grpo.GRPOConfig(max_staleness=-1)
