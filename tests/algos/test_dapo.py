"""End-to-end DAPO runs on a tiny budget: the CLI on the toy env, and the multi-turn starter
env through the same Trainer with a scripted rollout model whose episodes differ in length."""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path

import pytest

from agents.models import ScriptedModel
from algos import dapo
from algos.dapo import DAPOConfig
from algos.loop.metrics import read_metrics
from algos.loop.trainer import Trainer
from algos.policy import Policy, load_policy_model
from tests.algos.toy_run import toy_argv

TOY = toy_argv()


def test_dapo_cli_two_iterations(tmp_path: Path, capsys):
    run = tmp_path / "run"
    # one step per iteration, so the logged ratio is the first step's: sampler == learner
    assert (
        dapo.main(
            [*TOY, "--iterations", "2", "--max-steps-per-iteration", "1", "--run-dir", str(run)]
        )
        == 0
    )
    rows = read_metrics(run)
    assert [r["iteration"] for r in rows] == [1, 2]
    for r in rows:
        assert r["episodes"] >= 8 and r["kept"] >= 2 and r["optimizer_steps"] == 1
        assert 0 <= r["filtered_frac"] <= 1 and r["entropy"] > 0
        assert r["ratio_mean"] == pytest.approx(1.0, abs=1e-3)  # on-policy sampler log-probs
    assert (run / "checkpoint" / "learner_state.pt").exists()
    assert (run / "config.yaml").exists()
    rates = json.loads((run / "solve_rates.json").read_text())
    assert sum(v["attempts"] for v in rates.values()) == sum(r["episodes"] for r in rows)
    out = capsys.readouterr().out
    assert "reward" in out and "filtered" in out  # the results table


def _varied_script(tokenizer):
    """Alternate episodes: submit at once (1 turn) or look first (2 turns)."""
    lock = threading.Lock()
    plan: dict[int, bool] = {}
    counter = itertools.count()

    def reply(conv):
        with lock:
            if id(conv) not in plan:
                plan[id(conv)] = next(counter) % 2 == 0
            quick = plan[id(conv)]
        turn = sum(1 for m in conv.messages if m["role"] == "assistant")
        if quick or turn >= 1:
            return "Done.\n```\nsubmit\n```"
        return "Look.\n```\nls\n```"

    return ScriptedModel(reply, tokenizer=tokenizer, name="varied")


def test_dapo_multi_turn_one_iteration(tmp_path: Path):
    cfg = DAPOConfig(
        run_dir=str(tmp_path / "run"),
        env="SWEStarter-v0",
        tasks=["starter__tinystats-1"],
        policy="tiny-random",
        rollout_model="scripted",
        iterations=1,
        problems_per_iteration=1,
        group_size=4,
        batch_size=2,
        max_turns=3,
        length_threshold=1,
        max_new_tokens=32,
        max_context_tokens=4096,
        lr=1e-4,
        progress=False,
        concurrency=4,
    )
    model, tok, path = load_policy_model("tiny-random", Path(cfg.run_dir))
    policy = Policy(model, tok, path, engine=_varied_script(tok), on_policy=False)
    trainer = Trainer(cfg, "dapo", policy=policy)
    rows = trainer.run()
    (row,) = rows
    assert row["episodes"] == 4 and row["turns_mean"] == pytest.approx(1.5)
    # 1 turn -> penalty 0, 2 turns -> (1 - 2) / (3 - 1) = -0.5: nonzero advantages for all
    assert row["kept"] == 4 and row["filtered"] == 0 and row["optimizer_steps"] == 2
    assert trainer.old_logprobs_mode == "recompute"  # off-policy rollouts
    assert trainer.learner.step == 2
