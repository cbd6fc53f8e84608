"""A branched group (algos.rollout.branching) trained as one tree: the shared-prefix packing
finds the trunk from the token ids, and the step equals training the branches as separate
samples, for both prefix credits. Tolerances: the module docstring of test_tree.py (float64
model, float32 head; LP_ATOL for log-probs and loss, GRAD_RTOL for gradients)."""

from __future__ import annotations

import pytest
import torch

from agents.trajectory import Trajectory, Turn
from algos.learner.tree import find_trees
from algos.rollout.branching import shared_tokens
from algos.rollout.scoring import Counters, ScoringSpec, score_groups, to_samples
from tests.algos.learner.test_tree import assert_same, run_step
from tests.algos.tiny_models import tiny_llama


def _ids(g: torch.Generator, n: int) -> list[int]:
    return torch.randint(0, 128, (n,), generator=g).tolist()


def branched_group(n: int, seed: int = 0) -> list[Trajectory]:
    """n branches of one trunk of 3 turns (random ids), each with two turns of its own."""
    g = torch.Generator().manual_seed(seed)
    trunk = [
        Turn(prompt_delta_ids=_ids(g, 30 if i == 0 else 8), completion_ids=_ids(g, 12),
             completion_logprobs=[-1.0] * 12)
        for i in range(3)
    ]  # fmt: skip
    obs = _ids(g, 6)  # the observation after the trunk's last turn: the same for every branch
    out = []
    for b in range(n):
        own = [
            Turn(prompt_delta_ids=obs if i == 0 else _ids(g, 6),
                 completion_ids=_ids(g, 10 + b), completion_logprobs=[-2.0] * (10 + b))
            for i in range(2)
        ]  # fmt: skip
        out.append(
            Trajectory(
                task_id="t", turns=[Turn(**vars(t)) for t in trunk] + own,
                reward=float(b % 2) + 0.1 * b, token_exact=True, finish_reason="submitted",
                branch={"parent_episode_id": "p", "episode_id": f"p{b}", "branch_turn": 3,
                        "branch_index": b, "fork_s": 0.0},
            )
        )  # fmt: skip
    return out


def branch_samples(prefix_credit: str):
    trajs = branched_group(4)
    counters = Counters()
    spec = ScoringSpec(prefix_credit=prefix_credit)
    _, kept = score_groups(trajs, [0] * 4, spec, None, counters, "test")
    samples = to_samples(
        kept, counters, max_tokens=10_000, mask_invalid=False, overlong_filter=False,
        prefix_credit=prefix_credit,
    )  # fmt: skip
    return trajs, samples


@pytest.mark.parametrize("prefix_credit", ["none", "mean"])
@pytest.mark.parametrize(
    "loss", [{"loss": "dapo", "agg_mode": "token-mean"}, {"loss": "grpo", "kl_coef": 0.05}]
)
def test_a_branched_group_trains_as_one_tree_equal_to_separate_samples(prefix_credit, loss):
    torch.set_default_dtype(torch.float64)
    try:
        trajs, samples = branch_samples(prefix_credit)
        trunk = shared_tokens(trajs[0])
        (tree,) = find_trees(samples, min_prefix=16)  # one tree: the four branches
        assert sorted(tree.members) == [0, 1, 2, 3] and tree.prefix >= trunk
        model = tiny_llama(seed=0)
        ref = tiny_llama(seed=1) if loss.get("kl_coef") else None
        n = sum(len(s) for s in samples)
        as_tree = run_step(model, samples, tree=True, ref=ref, **loss)
        separate = run_step(model, samples, tree=False, ref=ref, **loss)
        # the prefix is computed once: three copies of it fewer
        assert as_tree[3]["tokens_computed"] == n - 3 * tree.prefix
        assert separate[3]["tokens_computed"] == n
        assert_same(as_tree, separate, n)
    finally:
        torch.set_default_dtype(torch.float32)
