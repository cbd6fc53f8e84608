"""Faults the RL loop must survive or report clearly (toy env + tiny random policy: fast)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from agents.protocols import Generation
from algos import objectives
from algos.config import ConfigError
from algos.dapo import DAPOConfig
from algos.loop.metrics import read_metrics
from algos.loop.trainer import DynamicSamplingExhausted, Trainer
from algos.policy import Policy, load_policy_model
from tests.algos import toy_run

REPO = Path(__file__).resolve().parents[3]
SIZES = dict(
    group_size=4, problems_per_iteration=2, batch_size=2, lr=1e-3, iterations=1, concurrency=8
)


def toy_cfg(tmp_path: Path, **kw) -> DAPOConfig:
    return toy_run.toy_cfg(tmp_path, **{**SIZES, **kw})


def test_everything_filtered_errors_after_bounded_refills(tmp_path: Path):
    cfg = toy_cfg(tmp_path, env_kwargs={"target": "never-said-xyzzy"}, max_refill_rounds=2)
    trainer = Trainer(cfg, "dapo")
    with pytest.raises(
        DynamicSamplingExhausted,
        match=r"only 0 of batch_size=2 .* after 2 "
        r"refill round.*on_exhausted=skip",
    ):
        trainer.run()
    assert trainer.learner.step == 0


def test_everything_filtered_skip_is_counted(tmp_path: Path):
    cfg = toy_cfg(
        tmp_path,
        env_kwargs={"target": "never-said-xyzzy"},
        max_refill_rounds=1,
        on_exhausted="skip",
        iterations=2,
    )
    rows = Trainer(cfg, "dapo").run()
    assert [r["skipped_iterations"] for r in rows] == [1, 2]
    assert all(r["episodes"] == 16 and r["refill_rounds"] == 1 for r in rows)  # 2 rounds x 8
    assert all(r["optimizer_steps"] == 0 for r in rows)


_calls = {"n": 0}


@objectives.register_policy_loss("nan_on_first_call")
def _nan_on_first_call(logprobs, old_logprobs, advantages, mask, **kwargs):
    loss, metrics = objectives.dapo_loss(logprobs, old_logprobs, advantages, mask, **kwargs)
    _calls["n"] += 1
    if _calls["n"] == 1:
        loss = loss * float("nan")
    return loss, metrics


def test_nan_loss_step_is_skipped_and_run_continues(tmp_path: Path):
    _calls["n"] = 0
    cfg = toy_cfg(
        tmp_path, loss="nan_on_first_call", filter="none", iterations=2, max_steps_per_iteration=1
    )
    trainer = Trainer(cfg, "dapo")
    before = {k: v.clone() for k, v in trainer.policy.model.state_dict().items()}
    rows = trainer.run()
    assert [r["skipped_steps"] for r in rows] == [1, 1]
    assert rows[0]["optimizer_steps"] == 0 and rows[1]["optimizer_steps"] == 1
    assert trainer.learner.step == 1
    after = trainer.policy.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)  # the 2nd step applied


def test_trajectory_longer_than_context_is_truncated_and_counted(tmp_path: Path):
    cfg = toy_cfg(tmp_path, rollout_model="scripted", filter="none", max_context_tokens=64)
    model, tok, path = load_policy_model("tiny-random", Path(cfg.run_dir))
    long_ids = tok.encode(" w" * 200, add_special_tokens=False)

    def reply(conv):  # ignores max_new_tokens, as a misbehaving backend might
        return Generation(
            text=" w" * 200,
            token_ids=long_ids,
            logprobs=[0.0] * len(long_ids),
            finish_reason="length",
        )

    from agents.models import ScriptedModel

    policy = Policy(model, tok, path, engine=ScriptedModel(reply, tokenizer=tok), on_policy=False)
    (row,) = Trainer(cfg, "dapo", policy=policy).run()
    assert row["truncated"] == 8 and row["kept"] == 8 and row["optimizer_steps"] >= 1


def test_reward_function_that_raises_drops_the_sample(tmp_path: Path):
    seen = {"n": 0}

    def flaky(traj):
        seen["n"] += 1
        if seen["n"] % 2:
            raise RuntimeError("grader exploded")
        return float("e" in traj.turns[-1].action)

    cfg = toy_cfg(tmp_path, filter="none")
    (row,) = Trainer(cfg, "dapo", reward_fn=flaky).run()
    assert row["reward_errors"] == 4 and row["kept"] == 4
    assert any("grader exploded" in e for e in row["errors"])


def test_prompt_longer_than_context_fails_before_rollouts(tmp_path: Path):
    cfg = toy_cfg(tmp_path, max_context_tokens=16, max_new_tokens=2)
    with pytest.raises(ConfigError, match="raise max_context_tokens"):
        Trainer(cfg, "dapo")
    assert not (Path(cfg.run_dir) / "metrics.jsonl").exists()


@pytest.mark.slow  # two CLI processes, the first run until two iterations are logged
def test_ctrl_c_writes_checkpoint_and_resume_continues(tmp_path: Path):
    run = tmp_path / "run"
    args = [
        sys.executable,
        "-m",
        "algos.dapo",
        *toy_run.toy_argv(checkpoint_every=0),
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [*args, "--iterations", "1000", "--run-dir", str(run)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics = run / "metrics.jsonl"
    deadline = time.monotonic() + 600  # a bound, not a wait: the loop ends on two logged rows
    while time.monotonic() < deadline and proc.poll() is None:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 2:
            break
        time.sleep(0.2)
    assert proc.poll() is None and metrics.exists() and len(read_metrics(run)) >= 2, (
        "the run ended or logged fewer than two iterations: nothing to interrupt"
    )
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "--resume" in err
    assert (run / "checkpoint" / "learner_state.pt").exists()  # checkpoint_every 0: from Ctrl-C
    done = len(read_metrics(run))
    assert done >= 2
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "algos.dapo",
            "--resume",
            str(run),
            "--iterations",
            str(done + 1),
            "--progress",
            "false",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"resumed {run} at iteration {done}" in res.stderr
    rows = read_metrics(run)
    assert [r["iteration"] for r in rows] == list(range(1, done + 2))
    assert rows[-1]["step"] > rows[done - 1]["step"]  # the optimizer step count carried on


def test_a_checkpoint_that_names_the_task_pool_sampler_still_resumes(tmp_path: Path):
    # Checkpoints written before the rename keep the task pool under "sampler".
    cfg = toy_cfg(tmp_path, iterations=1, checkpoint_every=1)
    first = Trainer(cfg, "dapo")
    first.run()
    pool = first.task_pool.state_dict()
    first.close()
    state_file = Path(cfg.run_dir) / "checkpoint" / "learner_state.pt"
    state = torch.load(state_file, weights_only=False)
    assert state["extra_state"]["task_pool"] == pool
    state["extra_state"]["sampler"] = state["extra_state"].pop("task_pool")
    torch.save(state, state_file)
    resumed = Trainer(toy_cfg(tmp_path, iterations=2, checkpoint_every=1, resume=True), "dapo")
    try:
        assert resumed.iteration == 1 and resumed.task_pool.state_dict() == pool
    finally:
        resumed.close()
