"""algos.objectives.advantages (group advantages) against values worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from algos import objectives
from tests.algos.objectives.by_hand import T, close


def test_group_advantages_grid_layout_std_normalised():
    # group 0: mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = 0.57735 -> +-0.5 / 0.57735 = +-0.866025
    # group 1: all equal -> 0 (not NaN)
    adv = objectives.group_advantages(T([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]]))
    s = 0.5 / math.sqrt(1 / 3)
    assert close(adv, [[s, -s, -s, s], [0, 0, 0, 0]], 1e-5)


def test_group_advantages_index_layout_and_single_sample_group():
    rewards = T([0.0, 5.0, 1.0, 2.0, 3.0, 5.0])
    groups = T([4, 9, 4, 4, 7, 7])
    # group 4: [0, 1, 2] mean 1, std 1 -> [-1, 0, 1]; group 9: single -> 0;
    # group 7: [3, 5] mean 4, std sqrt(2) -> [-1/sqrt2, 1/sqrt2]
    adv = objectives.group_advantages(rewards, groups, eps=0.0)
    r2 = 1 / math.sqrt(2)
    assert close(adv, [-1, 0, 0, 1, -r2, r2])
    # mean-centred only
    adv = objectives.group_advantages(rewards, groups, normalize_std=False)
    assert close(adv, [-1, 0, 0, 1, -1, 1])


def test_group_advantages_eps_and_bad_shape():
    # rounding must not leave a tiny nonzero advantage in an all-equal group (0.1 * 3 / 3)
    adv = objectives.group_advantages(T([[0.1, 0.1, 0.1]], dtype=torch.float64), eps=0.0)
    assert adv.tolist() == [[0.0, 0.0, 0.0]]
    assert not objectives.keep_nonzero_advantage(adv.reshape(-1)).any()
    adv = objectives.group_advantages(T([[0.0, 1.0]]), eps=1.0)  # std 0.7071 + 1
    assert close(adv, [[-0.5 / (math.sqrt(0.5) + 1), 0.5 / (math.sqrt(0.5) + 1)]])
    with pytest.raises(ValueError, match="group_index"):
        objectives.group_advantages(T([1.0, 2.0]))


# ---------------------------------------------------------------- found by mutation testing
# (benchmarks/mutation.py; each test kills mutants the tests above let survive)


def test_group_advantages_flat_layout_honours_normalize_std_and_dtypes():
    rewards, index = T([1.0, 0.0, 3.0, 1.0]), T([0, 0, 1, 1])
    centred = objectives.group_advantages(rewards, index, normalize_std=False)
    assert close(centred, [0.5, -0.5, 1.0, -1.0])
    assert (
        objectives.group_advantages(T([[1, 0], [0, 0]]), normalize_std=False).dtype == torch.float32
    )
    assert objectives.group_advantages(rewards.double(), index).dtype == torch.float64
    # a group whose only max is negative: the max is not taken against a 0 start value
    assert close(
        objectives.group_advantages(T([-1.0, -3.0]), T([0, 0]), normalize_std=False), [1.0, -1.0]
    )
