"""Policy versions from the engine into the trajectory: every turn records the version of the
weights that sampled it, the trajectory its min/max, and the JSONL keeps them."""

from __future__ import annotations

import json

import gymnasium
import pytest

import swe_gym  # noqa: F401 - registers the env ids
from agents.models.transformers import TransformersModel
from agents.protocols import SamplingParams
from agents.react import run_episode
from agents.trajectory import FORMAT_VERSION, Trajectory, Turn, load_jsonl


def test_episode_turns_carry_the_engine_version_through_jsonl(tiny_paths, tmp_path):
    model = TransformersModel(tiny_paths["tiny0"])
    try:
        model.update_weights(tiny_paths["tiny1"], version=4)
        env = gymnasium.make("ToyKeyword-v0")
        traj = run_episode(
            env, model, seed=1, agent_kwargs={"params": SamplingParams(max_new_tokens=4)}
        )
    finally:
        model.close()
    assert traj.turns and [t.policy_version for t in traj.turns] == [4] * traj.num_turns
    assert traj.policy_version_min == traj.policy_version_max == 4
    path = Trajectory.save_jsonl([traj], tmp_path / "t.jsonl")
    row = json.loads(path.read_text())
    assert row["format_version"] == FORMAT_VERSION == 3
    assert row["policy_version_min"] == row["policy_version_max"] == 4
    (back,) = load_jsonl(path)
    assert back == traj


def test_mixed_versions_min_max_and_round_trip(tmp_path):
    traj = Trajectory(
        task_id="t",
        turns=[Turn(policy_version=3), Turn(policy_version=5), Turn(policy_version=None)],
        token_exact=True,
    )
    assert (traj.policy_version_min, traj.policy_version_max) == (3, 5)
    (back,) = load_jsonl(Trajectory.save_jsonl([traj], tmp_path / "t.jsonl"))
    assert [t.policy_version for t in back.turns] == [3, 5, None]
    assert Trajectory(turns=[Turn()]).policy_version_min is None


def test_format_1_files_still_load_without_versions():
    row = {"format_version": 1, **Trajectory(task_id="old", turns=[Turn(action="x")]).to_dict()}
    row["format_version"] = 1
    for key in ("policy_version_min", "policy_version_max"):
        row.pop(key)
    for turn in row["turns"]:
        turn.pop("policy_version")
    old = Trajectory.from_dict(row)
    assert old.task_id == "old" and old.turns[0].policy_version is None
    with pytest.raises(ValueError, match="format_version 99 is not supported.*1, 2"):
        Trajectory.from_dict({**row, "format_version": 99})
