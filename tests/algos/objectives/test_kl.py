"""algos.objectives.kl (KL estimators, entropy) against values worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from algos import objectives
from tests.algos.objectives.by_hand import T, close


def test_kl_estimators():
    logp, ref = T([-1.0, -1.5]), T([-1.5, -1.0])  # diff +0.5, -0.5
    assert close(objectives.kl_estimate(logp, ref, "k1"), [0.5, -0.5])
    assert close(objectives.kl_estimate(logp, ref, "k2"), [0.125, 0.125])
    assert close(
        objectives.kl_estimate(logp, ref, "k3"), [math.exp(-0.5) + 0.5 - 1, math.exp(0.5) - 0.5 - 1]
    )
    loss, m = objectives.kl_loss(logp[None], ref[None], T([[1, 0]]), kind="k2")
    assert close(loss, 0.125) and close(m["kl"], 0.125)
    with pytest.raises(ValueError, match="k3"):
        objectives.kl_estimate(logp, ref, "k4")


def test_entropy_from_logits():
    h = objectives.entropy_from_logits(T([[0.0, 0.0, 0.0, 0.0], [0.0, math.log(3.0), -1e9, -1e9]]))
    assert close(h, [math.log(4), -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))], 1e-5)


# ---------------------------------------------------------------- found by mutation testing
# (benchmarks/mutation.py; each test kills mutants the tests above let survive)


def test_entropy_of_a_batch_equals_each_row_alone():
    logits = torch.randn(2, 3, 7, generator=torch.Generator().manual_seed(1))
    ent = objectives.entropy_from_logits(logits)
    assert ent.shape == (2, 3)
    for b in range(2):
        assert close(ent[b], objectives.entropy_from_logits(logits[b]))


def test_k3_log_ratio_is_clamped_both_ways():
    # logp - ref = +-30 is clamped to +-20 before exp (docstring): k3 = e^r - r - 1 with r = -+20
    k3 = objectives.kl_estimate(T([30.0, -30.0]), T([0.0, 0.0]), "k3")
    want = T([math.exp(-20) + 20 - 1, math.exp(20) - 20 - 1])
    assert torch.allclose(k3, want, rtol=1e-6, atol=0)
