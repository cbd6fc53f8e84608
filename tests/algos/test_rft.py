"""RFT end to end: oracle rollouts of 2 starter tasks -> SFT of a tiny random model (SmolLM2's
tokenizer); trajectory files with an invalid turn -> that turn masked out of the loss."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.models import ScriptedModel
from agents.rollout import rollout
from agents.trajectory import Trajectory
from algos import report, rft
from algos.config import ConfigError
from algos.loop import rft_loop
from algos.loop.metrics import read_metrics
from algos.loop.rft_loop import build_samples
from algos.rft import RFTConfig
from algos.rollout.scoring import Counters

TASKS = ["starter__tinystats-1", "starter__tinystats-2"]


def test_rft_on_oracle_rollouts(tmp_path: Path, capsys):
    run = tmp_path / "run"
    assert (
        rft.main(
            [
                "--rollout-model",
                "oracle",
                "--tasks",
                ",".join(TASKS),
                "--runs-per-task",
                "1",
                "--policy",
                "tiny-random",
                "--epochs",
                "3",
                "--batch-size",
                "1",
                "--lr",
                "1e-3",
                "--progress",
                "false",
                "--run-dir",
                str(run),
            ]
        )
        == 0
    )
    kept = Trajectory.load_jsonl(run / "rft_data.jsonl")
    assert kept and all(t.resolved for t in kept)  # only passing runs are trained on
    rows = read_metrics(run)
    assert len(rows) == 3 * len(kept)  # batch 1, 3 epochs
    assert rows[-1]["nll"] < rows[0]["nll"]  # SFT lowers the NLL of the oracle's tokens
    assert rows[0]["lr"] < max(r["lr"] for r in rows)  # linear warm-up
    assert (run / "checkpoint" / "learner_state.pt").exists()
    assert "nll" in capsys.readouterr().out
    # every rolled-out episode is saved as the run's iteration 1, and the report shows them
    saved = Trajectory.load_jsonl(run / "episodes" / "iter-000001.jsonl")
    assert sorted(t.task_id for t in saved) == sorted(TASKS)
    meta = json.loads((run / "episodes" / "iter-000001.meta.json").read_text())
    assert meta["iteration"] == 1 and meta["policy_version"] == 0 and meta["episodes"] == 2
    html = report.write_report(run).read_text()
    assert all(task in html for task in TASKS)


@pytest.fixture(scope="module")
def trajectories_with_invalid_turn(tmp_path_factory, smollm2_tok):
    from swe_gym.oracle import oracle_actions
    from swe_gym.tasks import load_tasks

    task = next(t for t in load_tasks("starter") if t.instance_id == TASKS[0])
    script = {task.instance_id: ["I will think first, no command here.", *oracle_actions(task)]}
    model = ScriptedModel(script, tokenizer=smollm2_tok)
    trajs = rollout("SWEStarter-v0", model, [task.instance_id], n_per_task=1)
    path = tmp_path_factory.mktemp("trajs") / "t.jsonl"
    Trajectory.save_jsonl(trajs, path)
    return path


@pytest.fixture(scope="module")
def smollm2_tok():
    from transformers import AutoTokenizer

    from agents.models.smollm2 import smollm2_tokenizer_path

    return AutoTokenizer.from_pretrained(str(smollm2_tokenizer_path()))


def test_invalid_turns_are_masked_out_of_the_loss(trajectories_with_invalid_turn, tmp_path):
    (traj,) = Trajectory.load_jsonl(trajectories_with_invalid_turn)
    assert traj.turns[0].invalid_action and traj.resolved
    cfg = RFTConfig(trajectories=[str(trajectories_with_invalid_turn)], policy="tiny-random")
    (sample,) = build_samples(cfg, [traj], Counters())
    first = len(traj.turns[0].prompt_delta_ids)
    n0 = len(traj.turns[0].completion_ids)
    assert sample.loss_mask[first : first + n0] == [0] * n0  # the invalid turn: no loss
    later = sum(len(t.completion_ids) for t in traj.turns[1:])
    assert sample.num_loss_tokens == later  # every valid completion token is trained on
    run = tmp_path / "run"
    assert (
        rft.main(
            [
                "--trajectories",
                str(trajectories_with_invalid_turn),
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
    assert read_metrics(run)[0]["loss_tokens"] == later
    assert not (run / "episodes").exists()  # read files are not copied into the run


def test_mask_invalid_false_trains_on_the_invalid_turn(trajectories_with_invalid_turn, tmp_path):
    """The config value reaches the loss: without masking every completion token counts."""
    (traj,) = Trajectory.load_jsonl(trajectories_with_invalid_turn)
    run = tmp_path / "run"
    assert (
        rft.main(
            [
                "--trajectories",
                str(trajectories_with_invalid_turn),
                "--policy",
                "tiny-random",
                "--batch-size",
                "1",
                "--progress",
                "false",
                "--mask-invalid",
                "false",
                "--run-dir",
                str(run),
            ]
        )
        == 0
    )
    every = sum(len(t.completion_ids) for t in traj.turns)
    assert (
        read_metrics(run)[0]["loss_tokens"]
        == every
        > sum(len(t.completion_ids) for t in traj.turns[1:])
    )


def test_save_episodes_is_validated():
    with pytest.raises(ConfigError, match=r"save_episodes must be >= 0 or none \(all\); got -1"):
        RFTConfig(save_episodes=-1)
    with pytest.raises(ValueError, match="unknown save_episodes_sampling 'grups'"):
        RFTConfig(save_episodes_sampling="grups")


def test_tree_packing_switch_reaches_the_learner(
    trajectories_with_invalid_turn, smollm2_tok, tmp_path
):
    """``--tree-packing`` (on by default, as in GRPO/DAPO): two runs of one task in a batch share
    its prompt, computed once when on, twice when off; the same loss either way."""
    from agents.models import OracleModel

    (scripted,) = Trajectory.load_jsonl(trajectories_with_invalid_turn)
    oracle = rollout(
        "SWEStarter-v0", OracleModel(tokenizer=smollm2_tok, explore=False), [TASKS[0]], n_per_task=1
    )
    path = tmp_path / "two_runs.jsonl"
    Trajectory.save_jsonl([scripted, *oracle], path)
    rows = {}
    for switch in ("true", "false"):
        run = tmp_path / f"run-{switch}"
        assert (
            rft.main(
                [
                    "--trajectories",
                    str(path),
                    "--policy",
                    "tiny-random",
                    "--batch-size",
                    "2",
                    "--tree-packing",
                    switch,
                    "--progress",
                    "false",
                    "--run-dir",
                    str(run),
                ]
            )
            == 0
        )
        (rows[switch],) = read_metrics(run)
    on, off = rows["true"], rows["false"]
    assert on["tokens_plain"] == off["tokens_plain"] == off["tokens_computed"]
    assert on["tokens_computed"] < on["tokens_plain"]  # the shared prompt once
    assert on["loss"] == pytest.approx(off["loss"], rel=1e-5)
    assert RFTConfig().learner_config(1).tree_packing


def test_ctrl_c_checkpoints_the_steps_done_and_resume_runs_the_rest(
    trajectories_with_invalid_turn, tmp_path, capsys
):
    """Ctrl-C in a step ends RFT as it ends the RL loop (run_state.save_interrupted): the steps done
    are checkpointed, the command that continues is printed, and --resume runs the rest."""
    from algos.loop.trainer_state import default_learner_factory

    def interrupted_at_step_2(model, lcfg, **kw):
        learner = default_learner_factory(model, lcfg, **kw)
        step, calls = learner.train_step, []

        def train_step(batch):
            calls.append(1)
            if len(calls) == 2:
                raise KeyboardInterrupt
            return step(batch)

        learner.train_step = train_step
        return learner

    run = tmp_path / "run"
    cfg = RFTConfig(
        trajectories=[str(trajectories_with_invalid_turn)],
        policy="tiny-random",
        batch_size=1,
        epochs=3,
        progress=False,
        run_dir=str(run),
    )
    with pytest.raises(KeyboardInterrupt):
        rft_loop.train_rft(cfg, learner_factory=interrupted_at_step_2)
    err = capsys.readouterr().err
    assert "interrupted: saving a checkpoint at step 1" in err
    assert f"continue with: python -m algos.rft --resume {run}" in err
    assert [r["step"] for r in read_metrics(run)] == [1]
    assert rft.main(["--resume", str(run), "--progress", "false"]) == 0
    assert [r["step"] for r in read_metrics(run)] == [1, 2, 3]
