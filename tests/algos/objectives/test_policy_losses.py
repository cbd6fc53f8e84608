"""algos.objectives.policy_losses (the clipped losses, sft, pg, the registry) against values
worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from algos import objectives
from tests.algos.objectives.by_hand import T, close

RATIOS = [1.0, 1.5, 0.5, 1.5, 0.5]


ADVS = [1.0, 1.0, 1.0, -1.0, -1.0]


def _clip_inputs(ratios, advs):
    logp = torch.log(T([ratios], dtype=torch.float64)).requires_grad_(True)
    return logp, torch.zeros_like(logp), T([advs], dtype=torch.float64), torch.ones_like(logp)


def test_dapo_clip_asymmetric_values_grads_and_metrics():
    logp, old, adv, mask = _clip_inputs(RATIOS, ADVS)
    loss, m = objectives.get_policy_loss_fn("dapo")(logp, old, adv, mask)  # eps 0.2 / 0.28
    # per token: -1 | max(-1.5, -1.28) = -1.28 | max(-0.5, -0.8) = -0.5 | max(1.5, 1.28) = 1.5
    #            | max(0.5, 0.8) = 0.8 ; mean = -0.48 / 5
    assert close(loss, -0.48 / 5)
    loss.backward()
    # d/dlogp of -A r / 5 = -A r / 5 where unclipped; 0 where the clip is active (t1, t4)
    assert close(logp.grad, [[-0.2, 0.0, -0.1, 0.3, 0.0]])
    assert close(m["clip_frac_high"], 0.2) and close(m["clip_frac_low"], 0.2)
    assert close(m["ratio_mean"], 1.0) and close(m["ratio_max"], 1.5)
    assert close(m["ratio_min"], 0.5) and m["dual_clip_frac"] == 0.0
    # approx_kl: k3 of KL(old || new) = mean(r - log r - 1)
    want = sum(r - math.log(r) - 1 for r in RATIOS) / 5
    assert close(m["approx_kl"], want)


def test_ppo_symmetric_clip():
    logp, old, adv, mask = _clip_inputs(RATIOS, ADVS)
    loss, _ = objectives.get_policy_loss_fn("ppo")(logp, old, adv, mask, clip_eps=0.2)
    assert close(loss, (-1 - 1.2 - 0.5 + 1.5 + 0.8) / 5)
    assert objectives.get_policy_loss_fn("grpo") is objectives.get_policy_loss_fn("ppo")


def test_dual_clip_bounds_negative_advantage_and_extreme_ratio_stays_finite():
    logp, old, adv, mask = _clip_inputs([10.0, 10.0], [-1.0, 2.0])
    loss, m = objectives.clipped_policy_loss(logp, old, adv, mask, eps_low=0.2, eps_high=0.28)
    assert close(loss, (10.0 - 2 * 1.28) / 2)  # negative A: unbounded ratio term wins
    loss, m = objectives.clipped_policy_loss(
        logp, old, adv, mask, eps_low=0.2, eps_high=0.28, dual_clip=3.0
    )
    assert close(loss, (3.0 - 2 * 1.28) / 2)  # min(10, -A * c = 3)
    loss.backward()
    assert close(logp.grad, [[0.0, 0.0]])  # both clipped: no gradient
    assert m["dual_clip_frac"] == 0.5
    # log-ratio of 50 is clamped to 20 before exp: finite loss and metrics
    logp, old, adv, mask = _clip_inputs([1.0], [-1.0])
    loss, m = objectives.clipped_policy_loss(logp + 50.0, old, adv, mask)
    assert math.isfinite(loss.item()) and close(loss, math.exp(20.0), 1.0)
    with pytest.raises(ValueError, match="dual_clip"):
        objectives.clipped_policy_loss(logp, old, adv, mask, dual_clip=0.5)


def test_per_sequence_advantage_broadcasts_and_empty_mask():
    logp = T([[-1.0, -2.0], [-0.5, -0.1]])
    old = logp - 0.1
    per_seq = T([1.0, -1.0])
    a, _ = objectives.get_policy_loss_fn("dapo")(logp, old, per_seq, torch.ones(2, 2))
    b, _ = objectives.get_policy_loss_fn("dapo")(
        logp, old, per_seq[:, None].expand(2, 2), torch.ones(2, 2)
    )
    assert close(a, b)
    loss, m = objectives.get_policy_loss_fn("dapo")(logp, old, per_seq, torch.zeros(2, 2))
    assert loss.item() == 0.0 and all(math.isfinite(v) for v in m.values())


def test_sft_and_pg_losses():
    logp = T([[-1.0, -2.0, -4.0]])
    mask = T([[0, 1, 1]])
    loss, m = objectives.get_policy_loss_fn("sft")(logp, logp, T([0.0]), mask)
    assert close(loss, 3.0) and close(m["nll"], 3.0)
    loss, _ = objectives.get_policy_loss_fn("pg")(logp, logp, T([-0.5]), mask)
    assert close(loss, -0.5 * 3.0)  # -A * logp averaged: 0.5 * (-2 - 4) / 2
    assert "sft" not in objectives.NEEDS_OLD_LOGPROBS and "dapo" in objectives.NEEDS_OLD_LOGPROBS


def test_registry_unknown_name_lists_accepted():
    with pytest.raises(ValueError) as e:
        objectives.get_policy_loss_fn("dapoo")
    assert "dapo" in str(e.value) and "ppo" in str(e.value) and "Did you mean" in str(e.value)
    with pytest.raises(ValueError, match="already registered"):
        objectives.register_policy_loss("dapo")(lambda *a, **k: None)


@pytest.mark.parametrize("name", sorted(objectives.POLICY_LOSSES))
def test_every_registered_loss_takes_the_learners_keywords(name):
    # PolicyLossFn: the learner passes agg_mode, both global counts and (with an off-policy
    # correction) token_weights; sft took no token_weights before the protocol was checked.
    logp, mask = T([[-2.0, -4.0]]), T([[1.0, 1.0]])
    loss, metrics = objectives.get_policy_loss_fn(name)(
        logp,
        logp,
        T([1.0]),
        mask,
        agg_mode="token-mean",
        global_token_count=2,
        global_seq_count=1,
        token_weights=T([[1.0, 0.0]]),
    )
    assert loss.dim() == 0 and all(isinstance(v, float) for v in metrics.values())
    plain, _ = objectives.get_policy_loss_fn(name)(logp, logp, T([1.0]), mask, global_token_count=2)
    assert not close(loss, plain) or close(plain, 0.0)  # the weights count


# ---------------------------------------------------------------- found by mutation testing
# (benchmarks/mutation.py; each test kills mutants the tests above let survive)


def test_ratio_is_new_over_old_with_nonzero_old_logprobs():
    lp = T([[-1.0, -2.0]], requires_grad=True)
    old = T([[-1.5, -1.0]])
    loss, m = objectives.clipped_policy_loss(
        lp, old, T([1.0]), T([[1, 1]]), eps_low=10.0, eps_high=10.0
    )
    r = torch.exp(lp.detach() - old)  # e^0.5, e^-1: inside the (wide) clip band
    assert close(m["ratio_mean"], r.mean()) and close(m["ratio_max"], r.max())
    assert close(m["ratio_min"], r.min()) and close(loss, -r.mean())
    # approx_kl is the k3 estimate of KL(old || new)
    assert close(m["approx_kl"], objectives.kl_estimate(old, lp.detach(), "k3").mean())


def test_clip_fractions_count_only_the_clipped_side():
    # tokens: (ratio, advantage) = (0.5, -1) clipped low; (0.5, 0) and (0.5, +0.5) not clipped
    # (no gradient cut on that side); (0.9, -1) inside 1 - eps_low; (1.5, +1) clipped high;
    # (1.5, 0) not; (1.1, +1) inside 1 + eps_high
    ratio = T([[0.5, 0.5, 0.5, 0.9, 1.5, 1.5, 1.1]])
    adv = T([[-1.0, 0.0, 0.5, -1.0, 1.0, 0.0, 1.0]])
    _, m = objectives.clipped_policy_loss(
        ratio.log(),
        torch.zeros_like(ratio),
        adv,
        torch.ones_like(ratio),
        eps_low=0.2,
        eps_high=0.28,
    )
    assert close(m["clip_frac_low"], 1 / 7) and close(m["clip_frac_high"], 1 / 7)


def test_dual_clip_touches_only_negative_advantages():
    ratio = T([[8.0, 8.0, 8.0]])
    adv = T([[-1.0, 0.0, 0.5]])
    loss, m = objectives.clipped_policy_loss(
        ratio.log(),
        torch.zeros_like(ratio),
        adv,
        torch.ones_like(ratio),
        dual_clip=3.0,
        global_token_count=1,
    )
    # -1: max(8, 0.8) = 8 -> bounded at 3; 0: 0; +0.5: max(-4, -0.6) = -0.6 (not bounded)
    assert close(loss, 3.0 + 0.0 - 0.6, 1e-5) and close(m["dual_clip_frac"], 1 / 3)
    objectives.clipped_policy_loss(
        ratio.log(), torch.zeros_like(ratio), adv, torch.ones_like(ratio), dual_clip=1.5
    )  # any c > 1 is accepted
    with pytest.raises(ValueError, match=r"dual_clip must be > 1 \(or None\); got 1.0"):
        objectives.clipped_policy_loss(ratio.log(), ratio, adv, ratio, dual_clip=1.0)


def test_clip_eps_checks_name_both_values():
    x = T([[0.0]])
    for low, high in ((-0.1, 0.2), (0.2, -0.1)):
        with pytest.raises(ValueError, match=f"eps_low={low}, eps_high={high}"):
            objectives.clipped_policy_loss(x, x, T([1.0]), x + 1, eps_low=low, eps_high=high)
    objectives.clipped_policy_loss(x, x, T([1.0]), x + 1, eps_low=0.0, eps_high=0.0)  # 0 is allowed
    # the defaults are the symmetric 0.2 of PPO/GRPO: ratio 1.25 is clipped high, 0.75 low
    _, m = objectives.clipped_policy_loss(
        T([[1.25, 0.75]]).log(), T([[0.0, 0.0]]), T([[1.0, -1.0]]), T([[1, 1]])
    )
    assert close(m["clip_frac_high"], 0.5) and close(m["clip_frac_low"], 0.5)


def test_global_counts_reach_the_aggregation():
    lp, mask = T([[-1.0, -2.0, 0.0]]), T([[1, 1, 0]])
    adv = T([1.0])
    whole, _ = objectives.clipped_policy_loss(lp, lp, adv, mask)
    half, _ = objectives.clipped_policy_loss(lp, lp, adv, mask, global_token_count=4)
    assert close(half, whole / 2)
    seq, _ = objectives.clipped_policy_loss(
        lp, lp, adv, mask, agg_mode="seq-mean-token-mean", global_seq_count=2
    )
    assert close(seq, whole / 2)


def test_sequence_advantages_broadcast_when_batch_and_length_differ():
    lp = torch.randn(2, 5, generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 5)
    adv = T([1.0, -2.0])
    a, _ = objectives.clipped_policy_loss(lp, lp - 0.1, adv, mask)
    b, _ = objectives.clipped_policy_loss(lp, lp - 0.1, adv[:, None].expand(2, 5), mask)
    assert close(a, b)
    assert objectives.pg_loss(lp, None, adv.double(), mask)[0].dtype == lp.dtype
