"""Branched groups through the trainer on the real starter env (bubblewrap sandboxes, the
tiny random policy learning from a seed-driven scripted sampler): one DAPO iteration end to end
(rows, saved episodes, the report), the fallback, and asynchronous collection (K = 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.trajectory import Trajectory
from algos.dapo import DAPOConfig
from algos.loop.trainer import Trainer
from algos.policy import Policy, load_policy_model
from algos.report import write_report
from tests.branch_script import SeededScript


def _trainer(tmp_path: Path, script_kw: dict, **kw) -> Trainer:
    cfg = DAPOConfig(
        **{
            "run_dir": str(tmp_path / "run"),
            "env": "SWEStarter-v0",
            "tasks": ["starter__tinystats-1"],
            "policy": "tiny-random",
            "rollout_model": "scripted",
            "iterations": 1,
            "problems_per_iteration": 1,
            "group_size": 3,
            "batch_size": 2,
            "max_turns": 6,
            "length_threshold": 1,
            "max_new_tokens": 32,
            "max_context_tokens": 4096,
            "lr": 1e-4,
            "progress": False,
            "concurrency": 3,
            "branch_at": "turn:2",
            **kw,
        }
    )
    model, tok, path = load_policy_model("tiny-random", Path(cfg.run_dir))
    engine = SeededScript(tok, **script_kw)
    return Trainer(cfg, "dapo", policy=Policy(model, tok, path, engine=engine, on_policy=False))


@pytest.mark.slow
def test_one_branched_dapo_iteration_end_to_end(tmp_path: Path):
    trainer = _trainer(tmp_path, {"min_submit": 3, "max_submit": 5}, prefix_credit="none")
    try:
        (row,) = trainer.run()
    finally:
        trainer.close()
    assert row["episodes"] == 3 and row["branched_groups"] == 1 and row["branch_fallbacks"] == 0
    assert row["group_tool_calls"] >= 2 + 3 and row["group_tokens_sampled"] > 0
    assert row["group_env_s"] > 0 and row["optimizer_steps"] >= 1
    # the row's tokens_sampled is the group's cost: the trunk once, not once per branch
    assert row["tokens_sampled"] == row["group_tokens_sampled"]
    run = Path(trainer.cfg.run_dir)
    saved = Trajectory.load_jsonl(run / "episodes" / "iter-000001.jsonl")
    assert len(saved) == 3 and len({t.branch["parent_episode_id"] for t in saved}) == 1
    assert sorted(t.branch["branch_index"] for t in saved) == [0, 1, 2]
    trunk = [t.completion_ids for t in saved[0].turns[:2]]
    assert all([t.completion_ids for t in s.turns[:2]] == trunk for s in saved)
    html = write_report(run).read_text()
    assert "branch 1 of trunk" in html and "at turn 2" in html and "(trunk)" in html


def test_a_trunk_that_submits_first_falls_back_to_a_plain_group(tmp_path: Path):
    trainer = _trainer(
        tmp_path, {"min_submit": 0, "max_submit": 1}, filter="none", length_penalty=False
    )
    try:
        (row,) = trainer.run()
    finally:
        trainer.close()
    assert row["episodes"] == 3 and row["branched_groups"] == 0 and row["branch_fallbacks"] == 1
    assert row["tokens_sampled"] == 3 * row["response_tokens_mean"]  # plain: every token once


def test_async_collection_with_branching(tmp_path: Path):
    trainer = _trainer(
        tmp_path,
        {"min_submit": 3, "max_submit": 4},
        max_staleness=1,
        iterations=2,
        prefix_credit="mean",
        save_episodes=0,
    )
    try:
        rows = trainer.run()
    finally:
        trainer.close()
    assert len(rows) == 2 and trainer.learner.step >= 2
    for row in rows:
        assert row["branched_groups"] + row["branch_fallbacks"] == 1
        assert row["dropped_stale"] == 0 and row["episodes"] == 3
