"""What the trainer's scoring (``algos/rollout/scoring.py``) promises, pinned where mutation testing
found the trainer tests silent (see benchmarks/mutation_survivors.md): which episodes are dropped
and counted, the error-share boundary, group-local advantages, the filters, sample ids and
truncation. Task sampling and collect: test_rollouts.py.
"""

from __future__ import annotations

import statistics

import pytest

from agents.trajectory import Trajectory, Turn
from algos.config import ConfigError
from algos.rollout.scoring import (
    Counters,
    EpisodesFailed,
    Scored,
    ScoringSpec,
    apply_filter,
    assign_advantages,
    check_episode_errors,
    load_reward_fn,
    mask_failed_groups,
    score_groups,
    score_trajectories,
    to_samples,
)
from tests.algos.fake_episodes import traj


def test_each_kind_of_failed_episode_is_dropped_and_counted_under_its_own_name():
    trajs = [
        traj("ok"),
        traj("crash", finish="error", error="boom"),
        traj("empty", turns=0),
        traj("text", token_exact=False),
        traj("nan", reward=float("nan")),
        traj("sandbox", reward=0.0, finish="sandbox_failed", error="died"),
    ]
    c = Counters()
    scored = score_trajectories(trajs, [0, 0, 1, 1, 2, 2], None, c)
    assert [s.traj.task_id for s in scored] == ["ok", "sandbox"]  # a dead sandbox scores 0
    assert [s.group for s in scored] == [0, 2]
    assert (c.episodes, c.rollout_errors, c.not_token_exact, c.reward_errors, c.env_failures) == (
        6,
        2,
        1,
        1,
        1,
    )
    assert c.errors[0] == "rollout crash: boom"
    assert c.errors[1] == "rollout empty: no turns"
    assert any("sandbox_failed: died" in e for e in c.errors)


def test_reward_fn_replaces_the_env_reward_and_the_length_penalty_is_added():
    c = Counters()
    scored = score_trajectories(
        [traj(reward=0.0, turns=15)],
        [0],
        lambda t: 1.0,
        c,
        length_penalty=True,
        length_threshold=10,
        max_turns=20,
    )
    assert scored[0].reward == pytest.approx(1.0 + (10 - 15) / (20 - 10))
    scored = score_trajectories([traj(reward=1.0, turns=15)], [0], None, c)
    assert scored[0].reward == 1.0  # no penalty unless asked


def test_a_group_with_a_failed_or_unscored_member_is_masked_whole():
    trajs = [traj("a"), traj("b", finish="timeout"), traj("c"), traj("d"), traj("e"), traj("f")]
    groups = [0, 0, 1, 1, 2, 2]
    c = Counters(failure_masked=2)  # from an earlier round of the iteration
    scored = [Scored(t, g, 1.0) for t, g in zip(trajs, groups, strict=True) if t.task_id != "e"]
    out = mask_failed_groups(trajs, groups, scored, c)
    assert [s.traj.task_id for s in out] == ["c", "d"]
    assert c.failure_masked == 2 + 3  # a, b (group 0) and f (group 2); e was never scored


@pytest.mark.parametrize(
    "failed, episodes, share, raises",
    [
        (0, 4, 0.0, False),
        (1, 4, 0.25, False),
        (2, 4, 0.25, True),
        (4, 4, 1.0, True),
        (1, 4, 0.2, True),
    ],
)
def test_error_share_boundary(failed, episodes, share, raises):
    c = Counters(
        episodes=episodes,
        reward_errors=failed,
        errors=[f"reward t{i}: boom" for i in range(failed)],
    )
    if not raises:
        check_episode_errors(c, share, "iteration 3")
        return
    with pytest.raises(EpisodesFailed) as e:
        check_episode_errors(c, share, "iteration 3")
    assert str(e.value).startswith(f"iteration 3: {failed} of {episodes} episodes failed")
    assert str(e.value).endswith("first error: reward t0: boom")


def test_every_failure_kind_counts_towards_the_share():
    for kind in ("rollout_errors", "env_failures", "not_token_exact", "reward_errors"):
        with pytest.raises(EpisodesFailed):
            check_episode_errors(Counters(episodes=2, **{kind: 2}), 1.0, "x")


def test_advantages_are_per_group_and_sum_to_zero_within_a_group():
    scored = [
        Scored(None, 0, 1.0),
        Scored(None, 0, 0.0),
        Scored(None, 1, 1.0),
        Scored(None, 1, 1.0),
    ]
    assign_advantages(scored, "grpo", normalize_std=True)
    a = [s.advantage for s in scored]
    assert a[0] > 0 > a[1] and a[0] == pytest.approx(-a[1])
    assert a[2] == a[3] == 0.0  # a solved-by-all group teaches nothing
    unnorm = [Scored(None, 0, 1.0), Scored(None, 0, 0.0)]
    assign_advantages(unnorm, "grpo", normalize_std=False)
    assert [s.advantage for s in unnorm] == pytest.approx([0.5, -0.5])


def test_filters_keep_what_they_promise():
    scored = [
        Scored(None, 0, 1.0, 0.5),
        Scored(None, 0, 0.0, -0.5),
        Scored(None, 1, 1.0, 0.0),
        Scored(None, 1, 1.0, 0.0),
    ]
    assert apply_filter("none", scored) == scored
    assert apply_filter("nonzero_advantage", scored) == scored[:2]
    assert apply_filter("nonconstant_group", scored) == scored[:2]
    assert apply_filter("nonzero_advantage", []) == []
    with pytest.raises(
        ValueError,
        match="unknown filter 'bogus'; choose one of: nonconstant_group, none, nonzero_advantage",
    ):
        apply_filter("bogus", scored)


def test_nonconstant_filter_sees_the_rewards_the_advantages_see():
    """Rewards are float64 throughout: a group whose rewards differ below float32's resolution
    gets nonzero advantages, so the DAPO filter must keep it too."""
    scored = [Scored(None, 0, 1.0), Scored(None, 0, 1.0 + 1e-9)]
    assign_advantages(scored, "grpo", normalize_std=False)
    assert scored[0].advantage != 0.0
    assert apply_filter("nonconstant_group", scored) == scored


def test_samples_carry_ids_advantages_truncation_and_drop_overlong_and_empty():
    kept = [
        Scored(traj("a", ids=range(10), mask=[0] * 2 + [1] * 8), 0, 1.0, 0.7),
        Scored(traj("b", finish="max_turns"), 0, 1.0, 0.1),
        Scored(traj("c", last_reason="length"), 1, 1.0, 0.2),
        Scored(traj("d", mask=(0, 0, 0, 0)), 1, 1.0, 0.3),
        Scored(traj("e"), 2, 1.0, -0.4),
    ]
    c = Counters()
    samples = to_samples(kept, c, max_tokens=6, mask_invalid=True, overlong_filter=True)
    assert [s.sample_id for s in samples] == ["a/0", "e/4"]
    assert [s.advantage for s in samples] == [0.7, -0.4]
    assert samples[0].input_ids == list(range(6)) and samples[0].loss_mask == [0, 0, 1, 1, 1, 1]
    assert samples[0].behaviour_logprobs == [0.0, 0.0, -0.5, -0.5, -0.5, -0.5]
    assert (c.truncated, c.overlong_dropped, c.empty) == (1, 2, 1)
    c = Counters()
    kept_all = to_samples(kept, c, max_tokens=6, mask_invalid=True, overlong_filter=False)
    assert [s.sample_id for s in kept_all] == ["a/0", "b/1", "c/2", "e/4"]
    assert c.overlong_dropped == 0


def test_invalid_action_masking_reaches_the_samples_only_when_asked():
    """RFT's invalid-action masking (docs/methods.md#rft): an invalid turn's completion is trained
    on unless ``mask_invalid``; the prompt tokens never are."""
    turns = [
        Turn(
            prompt_delta_ids=[1, 2],
            completion_ids=[3, 4],
            completion_logprobs=[-0.1, -0.2],
            invalid_action=True,
        ),
        Turn(prompt_delta_ids=[5], completion_ids=[6, 7], completion_logprobs=[-0.3, -0.4]),
    ]
    episode = Trajectory(task_id="t", turns=turns, token_exact=True, finish_reason="submitted")
    kept = [Scored(episode, 0, 1.0, 0.5)]
    masked = to_samples(kept, Counters(), max_tokens=100, mask_invalid=True, overlong_filter=False)
    assert masked[0].loss_mask == [0, 0, 0, 0, 0, 1, 1]
    assert masked[0].behaviour_logprobs == [0.0] * 5 + [-0.3, -0.4]
    kept_all = to_samples(
        kept, Counters(), max_tokens=100, mask_invalid=False, overlong_filter=False
    )
    assert kept_all[0].loss_mask == [0, 0, 1, 1, 0, 1, 1]


@pytest.mark.parametrize("normalize_std", [True, False])
def test_score_groups_applies_the_spec_penalty_masking_advantages_and_filter(normalize_std):
    """One round through ``score_groups`` with every switch of the spec on: the turn penalty
    (threshold 2 of 4 turns), a group with a timed-out member masked whole, group advantages
    with or without the std, and the DAPO filter dropping a constant group."""
    trajs = [
        traj("a", reward=1.0, turns=1),
        traj("b", reward=0.0, turns=3),
        traj("c"),
        traj("d", finish="timeout"),
        traj("e"),
        traj("f"),
    ]
    spec = ScoringSpec(
        filter="nonconstant_group",
        normalize_std=normalize_std,
        length_penalty=True,
        length_threshold=2,
        max_turns=4,
        mask_failed_groups=True,
        max_error_share=0.5,
    )
    c = Counters()
    scored, kept = score_groups(trajs, [0, 0, 1, 1, 2, 2], spec, None, c, "iteration 1")
    assert [s.traj.task_id for s in scored] == ["a", "b", "e", "f"]
    assert [s.reward for s in scored] == [1.0, -0.5, 1.0, 1.0]  # b: (2 - 3) / (4 - 2)
    adv = (
        0.75 / (statistics.stdev([1.0, -0.5]) + 1e-6) if normalize_std else 0.75
    )  # group_advantages' eps
    assert [s.traj.task_id for s in kept] == ["a", "b"]
    assert [s.advantage for s in kept] == pytest.approx([adv, -adv], rel=1e-12)
    assert (c.failure_masked, c.filtered, c.episodes) == (2, 2, 6)


def test_counts_add_up_over_episodes_and_rounds():
    c = Counters()
    score_trajectories(
        [traj("x", token_exact=False), traj("y", token_exact=False)], [0, 1], None, c
    )
    assert c.not_token_exact == 2 and "use a token backend" in c.errors[0]
    kept = [Scored(traj(str(i), ids=range(10), mask=[0] + [1] * 9), 0, 1.0) for i in range(2)]
    kept += [Scored(traj(f"e{i}", mask=(0, 0, 0, 0)), 0, 1.0) for i in range(2)]
    to_samples(kept, c, max_tokens=6, mask_invalid=False, overlong_filter=False)
    assert (c.truncated, c.empty) == (2, 2)
    total = Counters(episodes=1, errors=["first"])
    total.add(c)
    assert (total.episodes, total.not_token_exact, total.truncated) == (3, 2, 2)
    assert total.errors == ["first", *c.errors]


def test_error_messages_name_the_episode_and_the_cause(caplog):
    c = Counters()
    long = "x" * 400
    trajs = [
        traj("crash", finish="error", error=long),
        traj("nan", reward=float("nan")),
        traj("dead", finish="sandbox_failed"),
        traj("boom"),
        traj("died", finish="grading_error", error=long),
    ]

    def reward(t):
        if t.task_id == "boom":
            raise KeyError("no verdict")
        return t.reward

    with caplog.at_level("WARNING", logger="algos.rollout.scoring"):
        score_trajectories(trajs, [0, 1, 2, 3, 4], reward, c)
    assert c.errors[0] == "rollout crash: " + "x" * 300  # cut at 300 characters
    assert c.errors[1] == "reward nan: ValueError: reward is nan"
    assert c.errors[2] == "env dead: sandbox_failed: "
    assert c.errors[3] == "reward boom: KeyError: 'no verdict'"
    assert c.errors[4] == "env died: grading_error: " + "x" * 300
    assert "reward function failed on task boom: KeyError: 'no verdict'" in caplog.text
    with pytest.raises(EpisodesFailed, match=r"first error: \(no message\)"):
        check_episode_errors(Counters(episodes=1, rollout_errors=1), 0.5, "iteration 1")
    with pytest.raises(ValueError):  # one group id per episode
        score_trajectories([traj(), traj()], [0], None, Counters())


def test_defaults_are_grpo_with_the_std_and_context_overflow_is_overlong():
    scored = [Scored(None, 0, 1.0), Scored(None, 0, 0.0), Scored(None, 0, 0.0)]
    assign_advantages(scored)
    expected = (1.0 - 1 / 3) / (statistics.stdev([1.0, 0.0, 0.0]) + 1e-6)  # group_advantages' eps
    assert scored[0].advantage == pytest.approx(expected, rel=1e-12)
    kept = [Scored(traj("o", finish="context_overflow"), 0, 1.0), Scored(traj("k"), 0, 1.0)]
    c = Counters()
    assert [
        s.sample_id
        for s in to_samples(kept, c, max_tokens=8, mask_invalid=False, overlong_filter=True)
    ] == ["k/1"]
    assert c.overlong_dropped == 1


def test_samples_keep_exactly_max_tokens_and_two_token_sequences():
    kept = [
        Scored(traj("six", ids=range(6), mask=[0] + [1] * 5), 0, 1.0),
        Scored(traj("two", ids=(1, 2), mask=(0, 1)), 0, 1.0),
    ]
    c = Counters()
    samples = to_samples(kept, c, max_tokens=6, mask_invalid=False, overlong_filter=False)
    assert [len(s.input_ids) for s in samples] == [6, 2]
    assert (c.truncated, c.empty) == (0, 0)


def test_reward_fn_spec_is_loaded_or_refused_with_the_reason(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text("def half(traj):\n    return 0.5\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_reward_fn(None) is None
    fn = load_reward_fn("my_rewards:half")
    assert fn(None) == 0.5
    for bad, words in [
        ("my_rewards", "must be 'module:function'"),
        ("my_rewards:missing", "cannot be imported.*missing"),
        ("no_such_mod_q:f", "cannot be imported.*no_such_mod_q"),
    ]:
        with pytest.raises(ConfigError, match=words) as err:
            load_reward_fn(bad)
        assert repr(bad) in str(err.value)


@pytest.mark.parametrize("algo", ["dapo", "grpo"])
def test_overlong_buffer_of_the_config_reaches_the_reward(algo):
    """``overlong_buffer`` (DAPO's soft overlong punishment, L_cache) set in either algorithm's
    config reaches the rewards through the trainer's ScoringSpec: free up to max_context_tokens
    - overlong_buffer tokens, then linear to -1 at max_context_tokens."""
    from algos.dapo import DAPOConfig
    from algos.grpo import GRPOConfig

    cls = DAPOConfig if algo == "dapo" else GRPOConfig
    cfg = cls(max_context_tokens=2048, max_new_tokens=64, overlong_buffer=1024)
    trajs = [traj("a"), traj("a"), traj("a"), traj("a")]
    for t, n in zip(trajs, [100, 1024, 1536, 4096], strict=True):
        t.num_tokens = n
    scored, _ = score_groups(trajs, [0] * 4, ScoringSpec.from_config(cfg), None, Counters(), "i")
    assert [s.reward for s in scored] == [1.0, 1.0, 0.5, 0.0]
    off = ScoringSpec.from_config(cls(max_context_tokens=2048, max_new_tokens=64))
    scored, _ = score_groups(trajs, [0] * 4, off, None, Counters(), "i")
    assert [s.reward for s in scored] == [1.0] * 4
