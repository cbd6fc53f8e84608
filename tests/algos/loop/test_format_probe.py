"""RFT's format probe and its stopping rule: the greedy probe counts a turn when greedy decoding
reproduces its reply; ``format_patience`` ends the run once the probe stops rising, with the
rate logged before the first epoch and after each."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agents.trajectory import Trajectory, Turn
from algos import rft
from algos.config import ConfigError
from algos.loop import format_probe
from algos.loop.format_probe import greedy_match_rate
from algos.loop.metrics import read_metrics
from algos.rft import RFTConfig

VOCAB = 16


class NextTokenOracle(torch.nn.Module):
    """A 'model' whose argmax at each position is ``truth[position + 1]``: greedy decoding
    reproduces ``truth`` exactly."""

    def __init__(self, truth: list[int]):
        super().__init__()
        self.truth = truth
        self.lm_head = torch.nn.Identity()
        self.w = torch.nn.Parameter(torch.zeros(1))  # a parameter, for the device

    def model(self, input_ids: torch.Tensor):  # noqa: D401  (HF's base-model attribute)
        nxt = self.truth[1:] + [0]
        hidden = torch.nn.functional.one_hot(torch.tensor(nxt[: input_ids.shape[1]]), VOCAB)
        return type("Out", (), {"last_hidden_state": hidden.float()[None]})


def _traj(prompt: list[int], reply: list[int], prompt2: list[int], reply2: list[int]):
    return Trajectory(
        task_id="t",
        token_exact=True,
        turns=[
            Turn(prompt_delta_ids=prompt, completion_ids=reply),
            Turn(prompt_delta_ids=prompt2, completion_ids=reply2),
        ],
    )


def test_greedy_probe_counts_turns_whose_reply_greedy_decoding_reproduces():
    truth = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    model = NextTokenOracle(truth)
    exact = _traj([1, 2], [3, 4, 5], [6], [7, 8, 9, 10])
    assert greedy_match_rate(model, [exact], limit=10) == 1.0
    off_by_one_token = _traj([1, 2], [3, 4, 5], [6], [7, 8, 11, 10])  # turn 2 differs once
    assert greedy_match_rate(model, [off_by_one_token], limit=10) == 0.5
    invalid = _traj([1, 2], [3, 4, 5], [6], [7, 8, 11, 10])
    invalid.turns[1].invalid_action = True  # a rejected reply is not a target
    assert greedy_match_rate(model, [invalid], limit=10) == 1.0
    assert model.training  # the probe restores the mode it found


def test_patience_needs_the_probe_and_probe_names_are_checked():
    with pytest.raises(ConfigError, match="format_patience stops on the format probe"):
        RFTConfig(policy="tiny-random", format_patience=1)
    with pytest.raises(ValueError, match="unknown probe 'beam'"):
        RFTConfig(policy="tiny-random", probe="beam", probe_contexts=4)


@pytest.fixture(scope="module")
def oracle_file(tmp_path_factory) -> Path:
    from transformers import AutoTokenizer

    from agents.models import OracleModel
    from agents.models.smollm2 import smollm2_tokenizer_path
    from agents.rollout import rollout

    tok = AutoTokenizer.from_pretrained(str(smollm2_tokenizer_path()))
    model = OracleModel(tokenizer=tok, explore=False)
    trajs = rollout(
        "SWEStarter-v0",
        model,
        ["starter__tinystats-1", "starter__tinystats-2"],
        n_per_task=1,
        env_kwargs={"prompt": "compact"},
    )
    assert all(t.resolved and len(t.turns) <= 3 for t in trajs)  # edits, then submit
    path = tmp_path_factory.mktemp("oracle") / "t.jsonl"
    Trajectory.save_jsonl(trajs, path)
    return path


def test_rft_stops_once_the_format_probe_stops_rising(
    oracle_file: Path, tmp_path: Path, monkeypatch
):
    rates = iter([0.1, 0.4, 0.6, 0.6, 0.9, 1.0])  # epoch 0 (before training), 1, 2, 3, ...
    monkeypatch.setattr(format_probe, "greedy_match_rate", lambda *a, **k: next(rates))
    run = tmp_path / "run"
    assert (
        rft.main(
            [
                "--trajectories",
                str(oracle_file),
                "--policy",
                "tiny-random",
                "--epochs",
                "6",
                "--batch-size",
                "2",
                "--probe-contexts",
                "4",
                "--format-patience",
                "1",
                "--progress",
                "false",
                "--run-dir",
                str(run),
            ]
        )
        == 0
    )
    rows = read_metrics(run)
    probe = [(r["epoch"], r["format_valid"]) for r in rows if "format_valid" in r]
    assert probe == [(0, 0.1), (1, 0.4), (2, 0.6), (3, 0.6)]  # epoch 3 did not rise: stop
    assert max(r["epoch"] for r in rows) == 3
    assert (run / "checkpoint" / "learner_state.pt").exists()
