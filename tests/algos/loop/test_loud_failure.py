"""A run whose episodes all fail stops loudly; a few failures below the share do not stop it.

Before this, a run where every rollout failed (a device mismatch on CUDA) or every reward raised
skipped each iteration, printed an empty table and exited 0.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agents.models import ScriptedModel
from algos.config import ConfigError
from algos.dapo import DAPOConfig
from algos.loop.trainer import Trainer
from algos.policy import Policy, load_policy_model
from algos.rollout.scoring import EpisodesFailed
from tests.algos import toy_run

REPO = Path(__file__).resolve().parents[3]
TOY_ARGS = toy_run.toy_argv(
    env_kwargs={"target": "w"},
    lr=None,
    checkpoint_every=0,
    on_exhausted="skip",  # as benchmarks/bench_learning.py: it used to hide the failure
)


def toy_cfg(tmp_path: Path, **kw) -> DAPOConfig:
    return toy_run.toy_cfg(
        tmp_path,
        **{
            **dict(
                group_size=4,
                problems_per_iteration=2,
                batch_size=2,
                filter="none",
                iterations=1,
                concurrency=8,
            ),
            **kw,
        },
    )


def test_cli_run_whose_every_reward_raises_exits_nonzero_with_the_message(tmp_path: Path):
    (tmp_path / "broken_reward.py").write_text(
        "def reward(traj):\n    raise RuntimeError('grader cannot reach its database')\n"
    )
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "algos.dapo",
            *TOY_ARGS,
            "--iterations",
            "2",
            "--reward-fn",
            "broken_reward:reward",
            "--run-dir",
            str(tmp_path / "run"),
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": f"{tmp_path}:{REPO}"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode != 0, res.stdout[-2000:]
    assert "8 of 8 episodes failed" in res.stderr, res.stderr[-2000:]
    assert "RuntimeError: grader cannot reach its database" in res.stderr


def test_every_rollout_failing_stops_the_run_with_the_first_error(tmp_path: Path):
    cfg = toy_cfg(tmp_path)
    model, tok, path = load_policy_model("tiny-random", Path(cfg.run_dir))

    def reply(conversation):
        raise RuntimeError("Expected all tensors to be on the same device")

    policy = Policy(model, tok, path, engine=ScriptedModel(reply, tokenizer=tok), on_policy=False)
    trainer = Trainer(cfg, "dapo", policy=policy)
    with pytest.raises(
        EpisodesFailed,
        match=r"iteration 1: 8 of 8 episodes failed .*first "
        r"error: rollout .*same device",
    ):
        trainer.run()
    assert trainer.learner.step == 0


def _fail_every(n: int):
    seen = {"n": 0}

    def reward(traj):
        seen["n"] += 1
        if seen["n"] % n == 0:
            raise ValueError(f"bad episode {seen['n']}")
        return float("e" in traj.turns[-1].action)

    return reward


def test_failures_above_the_share_stop_the_run(tmp_path: Path):
    cfg = toy_cfg(tmp_path, max_error_share=0.25)  # 4 of 8 fail: above a quarter
    with pytest.raises(EpisodesFailed, match=r"4 of 8 episodes failed .*ValueError: bad episode"):
        Trainer(cfg, "dapo", reward_fn=_fail_every(2)).run()


def test_a_few_failures_below_the_share_are_dropped_and_the_run_goes_on(tmp_path: Path):
    cfg = toy_cfg(tmp_path, iterations=2)  # 1 of 8 fails per iteration; default share 0.5
    rows = Trainer(cfg, "dapo", reward_fn=_fail_every(8)).run()
    assert [r["reward_errors"] for r in rows] == [1, 1]
    assert all(r["kept"] == 7 and r["optimizer_steps"] >= 1 for r in rows)
    assert any("bad episode" in e for e in rows[0]["errors"])


def test_max_error_share_is_validated(tmp_path: Path):
    with pytest.raises(ConfigError, match=r"max_error_share must be in \[0, 1\]; got 1.5"):
        toy_cfg(tmp_path, max_error_share=1.5)


def test_sandbox_and_grading_failures_count_toward_the_share(tmp_path: Path):
    # A dead sandbox or a grader without a verdict is scored as reward 0, yet it is a failure of
    # the run's infrastructure: a run where all of them end that way must stop, not train on 0s.
    from agents.trajectory import Trajectory, Turn
    from algos.rollout.scoring import Counters, check_episode_errors, score_trajectories

    trajs = [
        Trajectory(
            task_id=f"t{i}",
            turns=[Turn(action="x")],
            token_exact=True,
            finish_reason=("sandbox_failed", "grading_error")[i % 2],
            error="container gone",
        )
        for i in range(4)
    ]
    counters = Counters()
    scored = score_trajectories(trajs, [0, 0, 1, 1], None, counters)
    assert [s.reward for s in scored] == [0.0] * 4 and counters.env_failures == 4
    with pytest.raises(
        EpisodesFailed,
        match=r"4 of 4 episodes failed .*4 sandbox/grading "
        r"failures.*first error: env t0: sandbox_failed",
    ):
        check_episode_errors(counters, 0.5, "iteration 1")
    one = Counters()
    score_trajectories(
        trajs[:1]
        + [
            Trajectory(
                task_id="ok", turns=[Turn(action="x")], token_exact=True, finish_reason="submitted"
            )
        ]
        * 3,
        [0, 0, 1, 1],
        None,
        one,
    )
    check_episode_errors(one, 0.5, "iteration 1")  # 1 of 4: below the share, the run goes on
