"""Branched groups in the trainers, without sandboxes: branch_at parsing and its errors,
advantages within each group, the shared prefix's credit (masked or trained once), the metrics
row's group costs and fallbacks."""

from __future__ import annotations

import pytest

from agents.trajectory import Trajectory, Turn
from algos.config import ConfigError
from algos.config.branching import BranchAt, parse_branch_at
from algos.dapo import DAPOConfig
from algos.grpo import GRPOConfig
from algos.rollout.branching import branch_metrics, shared_tokens
from algos.rollout.scoring import Counters, ScoringSpec, score_groups, to_samples

TRUNK = [
    Turn(prompt_delta_ids=[1, 2, 3, 4], completion_ids=[5, 6], completion_logprobs=[-0.5, -0.6],
         tool="bash", env_s=1.0),
    Turn(prompt_delta_ids=[7, 8], completion_ids=[9, 10, 11], completion_logprobs=[-0.1] * 3,
         tool="bash", env_s=2.0),
]  # fmt: skip
TRUNK_TOKENS = 11


def branch(index: int, reward: float, own: list[int], parent: str = "p") -> Trajectory:
    turns = [Turn(**vars(t)) for t in TRUNK]
    turns.append(
        Turn(prompt_delta_ids=[12, 13], completion_ids=own, completion_logprobs=[-0.2] * len(own),
             tool="submit", env_s=0.5)
    )  # fmt: skip
    return Trajectory(
        task_id="t",
        seed=0,
        turns=turns,
        reward=reward,
        token_exact=True,
        finish_reason="submitted",
        branch={"parent_episode_id": parent, "episode_id": f"{parent}{index}", "branch_turn": 2,
                "branch_index": index, "fork_s": 0.25},
    )  # fmt: skip


def group(parent: str, rewards: list[float]) -> list[Trajectory]:
    return [branch(i, r, [20 + i, 30 + i], parent) for i, r in enumerate(rewards)]


def test_branch_at_parsing_and_the_turn_of_each_group():
    assert parse_branch_at("none", 10) == BranchAt("none")
    assert parse_branch_at("turn:3", 10).turn_for(10, 0, "t", 0) == 3
    assert parse_branch_at("fraction:0.5", 10).turn_for(10, 0, "t", 0) == 5
    assert parse_branch_at("fraction:0.01", 10).turn_for(10, 0, "t", 0) == 1  # clamped
    sample = parse_branch_at("sample", 6)
    turns = [sample.turn_for(6, seed, "t", 0) for seed in range(200)]
    assert set(turns) == {1, 2, 3, 4, 5}  # uniform over [1, max_turns - 1]
    assert turns == [sample.turn_for(6, seed, "t", 0) for seed in range(200)]  # reproducible
    for bad, match in [
        ("turn:0", r"\[1, max_turns - 1 = 9\]"),
        ("turn:10", r"\[1, max_turns - 1 = 9\]"),
        ("turn:x", "needs a number"),
        ("fraction:1", r"\(0, 1\)"),
        ("sample:3", "takes no value"),
        ("middle", "choose one of: fraction:F, none, sample, turn:K"),
    ]:
        with pytest.raises(ConfigError, match=match):
            parse_branch_at(bad, 10)


def test_config_errors_name_why_branching_cannot_run(tmp_path):
    base = dict(
        run_dir=str(tmp_path), max_turns=4, length_threshold=2, group_size=2, branch_at="turn:2"
    )
    with pytest.raises(ConfigError, match=r"ToyKeyword-v0.*ToyKeywordEnv\) has no fork"):
        DAPOConfig(env="ToyKeyword-v0", **base)
    with pytest.raises(ConfigError, match="agent=.*agent program's state"):
        GRPOConfig(agent="examples.openai_agent:make_agent", **base)
    with pytest.raises(ConfigError, match="agent_cmd: a harness"):
        GRPOConfig(agent_cmd="true", **base)
    with pytest.raises(ConfigError, match="at least two branches"):
        DAPOConfig(**{**base, "group_size": 1})
    with pytest.raises(ConfigError, match="prefix_credit"):
        DAPOConfig(prefix_credit="all", **base)
    cfg = DAPOConfig(prefix_credit="mean", **base)  # SWEStarter-v0 forks
    assert (cfg.branch_at, cfg.prefix_credit) == ("turn:2", "mean")
    assert DAPOConfig(run_dir=str(tmp_path)).branch_at == "none"  # off by default


def _scored(prefix_credit: str):
    trajs = group("a", [1.0, 0.0, 0.0]) + group("b", [0.0, 1.0, 1.0])
    groups = [0, 0, 0, 1, 1, 1]
    counters = Counters()
    spec = ScoringSpec(prefix_credit=prefix_credit)
    scored, kept = score_groups(trajs, groups, spec, None, counters, "test")
    samples = to_samples(
        kept, counters, max_tokens=100, mask_invalid=False, overlong_filter=False,
        prefix_credit=prefix_credit,
    )  # fmt: skip
    return scored, samples


def test_advantages_compare_the_branches_of_each_group_only():
    scored, samples = _scored("none")
    assert len(samples) == 6  # one sample per branch; the trunk is none of its own
    for g in (0, 1):
        advs = [s.advantage for s in scored if s.group == g]
        assert sum(advs) == pytest.approx(0.0, abs=1e-9)
        assert all(s.prefix_advantage == pytest.approx(0.0, abs=1e-9) for s in scored)
    assert scored[0].advantage > 0 > scored[1].advantage  # group a: branch 0 solved
    assert scored[3].advantage < 0 < scored[4].advantage  # group b: branches 1, 2 solved


def test_prefix_credit_none_masks_the_trunk_in_every_branch():
    _, samples = _scored("none")
    assert shared_tokens(branch(0, 0.0, [1])) == TRUNK_TOKENS
    for s in samples:
        assert s.input_ids[:TRUNK_TOKENS] == samples[0].input_ids[:TRUNK_TOKENS]
        assert s.loss_mask[:TRUNK_TOKENS] == [0] * TRUNK_TOKENS
        assert s.loss_mask[TRUNK_TOKENS:] == [0, 0, 1, 1]  # its own prompt delta, completion
        assert s.behaviour_logprobs[:TRUNK_TOKENS] == [0.0] * TRUNK_TOKENS
        assert isinstance(s.advantage, float)


def test_prefix_credit_mean_trains_the_trunk_once_with_the_group_mean():
    scored, samples = _scored("mean")
    trunk_policy = [0] * 4 + [1, 1] + [0, 0] + [1, 1, 1]
    for g in (0, 1):
        members = samples[3 * g : 3 * g + 3]
        carrier, *rest = members
        assert carrier.loss_mask[:TRUNK_TOKENS] == trunk_policy
        assert carrier.advantage[:TRUNK_TOKENS] == [scored[3 * g].prefix_advantage] * TRUNK_TOKENS
        assert carrier.advantage[TRUNK_TOKENS:] == [scored[3 * g].advantage] * 4
        for s in rest:
            assert s.loss_mask[:TRUNK_TOKENS] == [0] * TRUNK_TOKENS


def test_branch_metrics_count_the_trunk_once_and_the_fallbacks():
    branched = group("a", [1.0, 0.0, 0.0])
    plain = [Trajectory(task_id="u", turns=[Turn(completion_ids=[1, 2], tool="bash", env_s=1.0)],
                        branch={"fallback": "submitted", "planned_turn": 2, "branch_index": j})
             for j in range(3)]  # fmt: skip
    row = branch_metrics(branched + plain, 3)
    assert row["branched_groups"] == 1 and row["branch_fallbacks"] == 1
    # branched: trunk 5 tokens once + 3 x 2 own; plain: 3 x 2
    assert row["group_tokens_sampled"] == pytest.approx(((5 + 6) + 6) / 2)
    assert row["group_tool_calls"] == pytest.approx(((2 + 3) + 3) / 2)
    assert row["group_env_s"] == pytest.approx(((3.0 + 1.5 + 0.25) + 3.0) / 2)


def test_the_rows_tokens_sampled_count_a_branched_trunk_once():
    """``tokens_sampled`` (every run's row) is what the engine generated: plain episodes in full,
    a branched group's trunk once; ``response_tokens_mean`` stays per trajectory."""
    from algos.loop.metrics import EpisodeStats

    stats = EpisodeStats()
    for t in group("a", [1.0, 0.0, 0.0]):
        stats.add(t)
    plain = Trajectory(task_id="u", turns=[Turn(completion_ids=[1, 2], tool="bash")])
    stats.add(plain)
    row = stats.summary()
    assert row["tokens_sampled"] == (5 + 3 * 2) + 2
    assert row["response_tokens_mean"] == pytest.approx((3 * (5 + 2) + 2) / 4)
