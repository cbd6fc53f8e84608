"""An episode whose gateway session was rewritten trains on every segment, each token-exact,
with the episode's advantage; the counts reach the metrics row."""

from __future__ import annotations

from agents.gateway import PREFIX_FAILED
from agents.trajectory import Trajectory, Turn
from algos.rollout.scoring import Counters, Scored, to_samples


def _turn(prompt, completion, *, restart=False):
    return Turn(prompt_delta_ids=prompt, completion_ids=completion,
                completion_logprobs=[-0.5] * len(completion), invalid_action=restart,
                invalid_reason=f"{PREFIX_FAILED}: history edited" if restart else None)  # fmt: skip


def test_every_segment_is_a_sample_with_the_episodes_advantage():
    traj = Trajectory(task_id="t", token_exact=True, finish_reason="submitted")
    # Segment 0: turns 0-1 extend one sequence; turn 2 re-renders the edited history whole.
    traj.turns = [
        _turn([1, 2, 3], [4, 5]),
        _turn([6], [7]),
        _turn([1, 2, 9, 9], [8, 8], restart=True),
    ]
    traj.agent = {"segment_starts": [0, 2], "prefix_failures": 1}
    counters = Counters()
    samples = to_samples([Scored(traj, 0, 1.0, advantage=0.75)], counters, max_tokens=100,
                         mask_invalid=True, overlong_filter=False)  # fmt: skip
    assert [s.input_ids for s in samples] == [[1, 2, 3, 4, 5, 6, 7], [1, 2, 9, 9, 8, 8]]
    assert [s.loss_mask for s in samples] == [[0, 0, 0, 1, 1, 0, 1], [0, 0, 0, 0, 1, 1]]
    assert [s.advantage for s in samples] == [0.75, 0.75]
    assert [s.sample_id for s in samples] == ["t/0.0", "t/0.1"]
    assert counters.segments == 2 and counters.row()["segments"] == 2
    # The whole flattened episode, as before, would have put turn 2 after turn 1's context.
    assert sum(len(s.input_ids) for s in samples) == len(traj.to_sample_arrays()[0])


def test_a_plain_episode_is_one_sample_as_before():
    traj = Trajectory(task_id="t", token_exact=True, finish_reason="submitted")
    traj.turns = [_turn([1, 2], [3]), _turn([4], [5])]
    counters = Counters()
    (sample,) = to_samples([Scored(traj, 0, 1.0, advantage=-1.0)], counters, max_tokens=100,
                           mask_invalid=False, overlong_filter=False)  # fmt: skip
    assert sample.input_ids == [1, 2, 3, 4, 5] and sample.sample_id == "t/0"
    assert counters.segments == 1
