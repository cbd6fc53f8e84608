"""Validation during an RL run (algos/loop/validation.py): pass@1 on a fixed task set with the same
episode seeds each time, its gain over the first validation paired over tasks, in
validation.jsonl, the metrics and the table."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from agents.trajectory import Trajectory, Turn
from algos.config import ConfigError
from algos.loop.metrics import read_metrics
from algos.loop.trainer import Trainer, run_cli
from algos.loop.validation import VAL_FILE, Validator, mean_se
from tests.algos.toy_run import toy_cfg as toy_run_cfg


def toy_cfg(tmp_path: Path, **kw):
    """The toy DAPO run (tests/algos/toy_run.py): 2 problems x 4 episodes, a step of 2."""
    sizes = {
        "group_size": 4,
        "problems_per_iteration": 2,
        "batch_size": 2,
        "lr": 1e-3,
        "iterations": 1,
        "concurrency": 8,
    }
    return toy_run_cfg(tmp_path, **{**sizes, **kw})


def fake_episodes(outcomes: dict[str, list[bool]], seeds: list[int]):
    """run_episodes returning ``outcomes[task]`` per run; records the seed it was given."""

    def run(task_ids, n, seed):
        seeds.append(seed)
        return [
            Trajectory(
                task_id=t,
                seed=seed + j,
                resolved=outcomes[t][j],
                turns=[Turn(invalid_action=not outcomes[t][j])],
            )
            for t in task_ids
            for j in range(n)
        ]

    return run


def test_mean_and_standard_error():
    assert mean_se([1.0, 0.0]) == (0.5, 0.5)  # sample std 0.7071 / sqrt(2)
    assert mean_se([0.25]) == (0.25, 0.0)
    assert all(math.isnan(x) for x in mean_se([]))


def test_gain_is_paired_over_tasks_and_seeds_repeat(tmp_path: Path):
    seeds: list[int] = []
    v = Validator(["a", "b", "c"], runs=2, seed=3, run_dir=tmp_path)
    first = v.validate(
        fake_episodes({"a": [True, False], "b": [False, False], "c": [True, True]}, seeds), 0, 0
    )
    assert first["pass1"] == pytest.approx(0.5) and first["gain"] == 0.0
    assert first["pass1_se"] == pytest.approx(math.sqrt(0.25 / 3))  # rates 0.5, 0, 1
    assert first["format_valid"] == pytest.approx(3 / 6)
    later = v.validate(
        fake_episodes({"a": [True, True], "b": [True, False], "c": [True, True]}, seeds), 4, 9
    )
    # per-task gains 0.5, 0.5, 0: mean 1/3, s.e. sqrt(var 1/12 / 3)
    assert later["gain"] == pytest.approx(1 / 3)
    assert later["gain_se"] == pytest.approx(math.sqrt((1 / 12) / 3))
    assert seeds[0] == seeds[1]  # the same episode seeds every time: a paired comparison
    rows = [json.loads(x) for x in (tmp_path / VAL_FILE).read_text().splitlines()]
    assert [(r["iteration"], r["policy_version"]) for r in rows] == [(0, 0), (4, 9)]
    assert "0.500 +- 0.289 (iteration 0) -> 0.833" in v.summary()
    assert "gain +0.333 +- 0.167 (paired over tasks)" in v.summary()


def test_a_resumed_run_keeps_its_earlier_validations_and_baseline(tmp_path: Path):
    runs = fake_episodes({"a": [False], "b": [True]}, [])
    v = Validator(["a", "b"], runs=1, seed=0, run_dir=tmp_path)
    for it in (0, 2, 4):
        v.validate(runs, it, it)
    resumed = Validator(["a", "b"], runs=1, seed=0, run_dir=tmp_path, upto=2)
    assert [r["iteration"] for r in resumed.rows] == [0, 2]
    assert resumed.baseline == {"a": 0.0, "b": 1.0}
    fresh = Validator(["a", "b"], runs=1, seed=0, run_dir=tmp_path)  # a new run in that folder
    assert fresh.rows == [] and fresh.baseline is None
    # the earlier run's validations are set aside, not mixed in and not lost
    assert not (tmp_path / VAL_FILE).exists()
    old = (tmp_path / f"{VAL_FILE}.1.old").read_text().splitlines()
    assert [json.loads(x)["iteration"] for x in old] == [0, 2]


def test_a_task_with_no_episode_is_an_error(tmp_path: Path):
    v = Validator(["a", "b"], runs=1, seed=0, run_dir=tmp_path)
    with pytest.raises(RuntimeError, match=r"no episode for tasks \['b'\]"):
        v.validate(lambda ids, n, seed: [Trajectory(task_id="a", resolved=True)], 0, 0)


def test_bad_validation_settings_name_the_value(tmp_path: Path):
    with pytest.raises(ConfigError, match="val_runs must be >= 0; got -1"):
        toy_cfg(tmp_path, val_runs=-1)
    with pytest.raises(ValueError, match="val_runs must be >= 1 to validate; got 0"):
        Validator(["a"], runs=0, seed=0, run_dir=tmp_path)


def test_run_validates_before_every_k_and_after_the_last_iteration(tmp_path: Path, capsys):
    cfg = toy_cfg(tmp_path, iterations=3, val_runs=2, val_every=2, lr=1e-12)
    assert run_cli(cfg, "dapo") == 0
    out = capsys.readouterr().out
    run = Path(cfg.run_dir)
    rows = [json.loads(x) for x in (run / VAL_FILE).read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 2, 3]
    assert all(r["episodes"] == 2 * r["tasks"] for r in rows)
    # weights that barely move + the same seeds: every validation sees the same episodes
    assert [r["per_task"] for r in rows[1:]] == [rows[0]["per_task"]] * 2
    assert [r["gain"] for r in rows] == [0.0, 0.0, 0.0]
    metrics = read_metrics(run)
    assert [m["iteration"] for m in metrics if "val_pass1" in m] == [0, 2, 3]
    assert "val_pass1" in out and "validation pass@1 on" in out and "(paired over tasks)" in out


def test_validation_is_off_by_default(tmp_path: Path):
    trainer = Trainer(toy_cfg(tmp_path), "dapo")
    trainer.run()
    assert trainer.validator is None and not (Path(trainer.run_dir) / VAL_FILE).exists()
