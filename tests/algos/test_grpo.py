"""End-to-end GRPO on a tiny budget: multi-turn (oracle rollouts) and single-turn SWERL-v0."""

from __future__ import annotations

from pathlib import Path

from algos import grpo
from algos.loop.metrics import read_metrics

COMMON = [
    "--policy",
    "tiny-random",
    "--iterations",
    "1",
    "--problems-per-iteration",
    "1",
    "--group-size",
    "2",
    "--batch-size",
    "2",
    "--progress",
    "false",
    "--lr",
    "1e-4",
]


def test_grpo_multi_turn_one_iteration(tmp_path: Path):
    run = tmp_path / "run"
    assert (
        grpo.main(
            [
                *COMMON,
                "--env",
                "SWEStarter-v0",
                "--tasks",
                "starter__tinystats-1",
                "--rollout-model",
                "oracle",
                "--max-turns",
                "20",
                "--max-context-tokens",
                "16384",
                "--run-dir",
                str(run),
            ]
        )
        == 0
    )
    (row,) = read_metrics(run)
    assert row["episodes"] == 2 and row["kept"] == 2 and row["optimizer_steps"] == 1
    assert row["turns_mean"] >= 3
    assert row["kl"] == 0.0  # first step: the policy is the reference
    assert row["resolved_rate"] == 1.0 and row["reward_mean"] == 1.0  # the oracle resolves


def test_grpo_swerl_single_turn_one_iteration(tmp_path: Path):
    run = tmp_path / "run"
    assert (
        grpo.main(
            [
                *COMMON,
                "--env",
                "SWERL-v0",
                "--env-kwargs",
                '{"max_context_files": 0}',
                "--max-new-tokens",
                "16",
                "--max-context-tokens",
                "16384",
                "--run-dir",
                str(run),
            ]
        )
        == 0
    )
    (row,) = read_metrics(run)
    assert row["episodes"] == 2 and row["turns_mean"] == 1.0
    assert row["reward_mean"] == -1.0  # random text is a format error under the SWE-RL reward
    assert row["optimizer_steps"] == 1 and row["kept"] == 2
