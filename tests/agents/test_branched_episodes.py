"""Branched groups (``agents.branching``) on the real starter env: a trunk forked into branches
that share its turns token-exactly and differ after, their bookkeeping, and the fallback."""

from __future__ import annotations

import gymnasium
import pytest

from agents.branching import branched_rollout, can_fork, run_branched_group
from agents.react import ReActAgent
from agents.trajectory import Trajectory
from tests.branch_script import SeededScript

TASK = "starter__tinystats-1"


def _make_env():
    return gymnasium.make("SWEStarter-v0", max_turns=8, command_timeout=30)


def _ids(turn):
    return (turn.prompt_delta_ids, turn.completion_ids, turn.completion_logprobs)


@pytest.fixture(scope="module")
def script(smollm2_tokenizer):
    return SeededScript(smollm2_tokenizer, min_submit=3, max_submit=5)


def test_branches_share_the_trunk_token_exactly_and_differ_after(script, tmp_path):
    group = run_branched_group(_make_env, lambda: ReActAgent(script, max_turns=8), TASK, 7, 3, 2)
    assert len(group) == 3
    first = group[0]
    parent = first.branch["parent_episode_id"]
    assert parent and first.branch_turn == 2
    assert [t.branch["branch_index"] for t in group] == [0, 1, 2]
    own = {t.branch["episode_id"] for t in group}
    assert len(own) == 3 and parent not in own
    for traj in group:
        assert traj.token_exact and traj.seed == 7 and traj.task_id == TASK
        assert traj.branch["parent_episode_id"] == parent and traj.branch["fork_s"] >= 0
        assert traj.finish_reason == "submitted", traj.error
        assert [_ids(t) for t in traj.turns[:2]] == [_ids(t) for t in first.turns[:2]]
        assert traj.num_turns > 2
    # after the branch turn each branch sampled with its own seeds
    assert len({tuple(t.turns[2].completion_ids) for t in group}) > 1
    # saved and loaded: the bookkeeping comes back
    back = Trajectory.load_jsonl(Trajectory.save_jsonl(group, tmp_path / "g.jsonl"))
    assert [b.branch for b in back] == [t.branch for t in group]
    # the same seed gives the same group (the seeds come from task, seed and branch index)
    again = run_branched_group(_make_env, lambda: ReActAgent(script, max_turns=8), TASK, 7, 3, 2)
    assert [[_ids(t) for t in a.turns] for a in again] == [
        [_ids(t) for t in g.turns] for g in group
    ]


def test_a_trunk_that_ends_before_the_branch_turn_falls_back_to_plain_episodes(smollm2_tokenizer):
    quick = SeededScript(smollm2_tokenizer, min_submit=0, max_submit=0)  # submits at turn 0
    trajs = branched_rollout(
        _make_env,
        lambda: ReActAgent(quick, max_turns=8),
        [TASK],
        3,
        [2],
        concurrency=3,
        seed=11,
    )
    assert [t.seed for t in trajs] == [11, 12, 13]
    assert [t.branch for t in trajs] == [
        {"fallback": "submitted", "planned_turn": 2, "branch_index": j} for j in range(3)
    ]
    assert all(t.finish_reason == "submitted" and t.num_turns == 1 for t in trajs)


def test_can_fork_tells_swe_envs_from_the_toy_env():
    swe, toy = _make_env(), gymnasium.make("ToyKeyword-v0")
    try:
        assert can_fork(swe) and not can_fork(toy)
    finally:
        swe.close()
        toy.close()
