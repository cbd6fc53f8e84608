"""algos.objectives.aggregation (agg_loss's modes, global counts, masked sums) against values
worked out by hand."""

from __future__ import annotations

import pytest
import torch

from algos import objectives
from tests.algos.objectives.by_hand import T, close

LOSS = T([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])


MASK = T([[1, 1, 0], [1, 0, 0]])


def test_agg_loss_modes():
    assert close(objectives.agg_loss(LOSS, MASK, "token-mean"), 7 / 3)  # (1+2+4)/3
    assert close(objectives.agg_loss(LOSS, MASK, "token-mean", global_token_count=10), 0.7)
    assert close(objectives.agg_loss(LOSS, MASK, "seq-mean-token-mean"), (1.5 + 4) / 2)
    assert close(objectives.agg_loss(LOSS, MASK, "seq-mean-token-sum"), (3 + 4) / 2)
    assert close(objectives.agg_loss(LOSS, MASK, "seq-mean-token-sum", global_seq_count=7), 1.0)
    # a sequence without loss tokens is not counted in the seq mean
    assert close(
        objectives.agg_loss(
            T([[1.0, 2.0], [9.0, 9.0]]), T([[1, 1], [0, 0]]), "seq-mean-token-mean"
        ),
        1.5,
    )
    with pytest.raises(ValueError, match="token-mean"):
        objectives.agg_loss(LOSS, MASK, "tokenmean")


def test_agg_loss_global_count_makes_split_sum_equal_whole():
    whole = objectives.agg_loss(LOSS, MASK, "token-mean")
    parts = sum(
        objectives.agg_loss(LOSS[i : i + 1], MASK[i : i + 1], "token-mean", global_token_count=3)
        for i in range(2)
    )
    assert close(whole, parts)
    whole = objectives.agg_loss(LOSS, MASK, "seq-mean-token-mean")
    parts = sum(
        objectives.agg_loss(
            LOSS[i : i + 1], MASK[i : i + 1], "seq-mean-token-mean", global_seq_count=2
        )
        for i in range(2)
    )
    assert close(whole, parts)


@pytest.mark.parametrize("mode", objectives.AGG_MODES)
def test_agg_loss_empty_mask_is_zero_without_nan(mode):
    x = T([[float("nan"), float("inf")]], requires_grad=True)
    loss = objectives.agg_loss(x, torch.zeros(1, 2), mode)
    loss.backward()
    assert loss.item() == 0.0
    assert torch.equal(x.grad, torch.zeros(1, 2))


# ---------------------------------------------------------------- found by mutation testing
# (benchmarks/mutation.py; each test kills mutants the tests above let survive)


def test_masked_mean_and_sum_along_a_dim():
    v = T([[1.0, 2.0, 4.0], [3.0, float("nan"), 5.0]])
    m = T([[1, 1, 0], [1, 0, 0]])
    assert close(objectives.masked_mean(v, m, dim=-1), [1.5, 3.0])
    assert close(objectives.masked_sum(v, m, dim=-1), [3.0, 3.0])
    assert close(objectives.masked_mean(v, m), 2.0)
