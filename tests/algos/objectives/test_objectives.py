"""GSPO, RLOO, failure masking and the off-policy correction against values worked by hand; the
package's error messages name the value and the choices."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from algos import objectives
from algos.learner.learner import Learner
from algos.learner.learner_config import LearnerConfig
from algos.learner.samples import Sample
from algos.rollout.scoring import Counters, Scored, assign_advantages, mask_failed_groups

T = torch.tensor


def close(a, b, tol=1e-5):
    return torch.allclose(
        torch.as_tensor(a, dtype=torch.float64),
        torch.as_tensor(b, dtype=torch.float64),
        atol=tol,
        rtol=0,
    )


# ---------------------------------------------------------------- GSPO

# seq 0: policy tokens 1-2, log-ratios 0.2 and 0 -> s0 = exp(0.1) = 1.105171, A = +1
# seq 1: policy token 1 only, log-ratio -0.2 -> s1 = exp(-0.2) = 0.818731, A = -2
# (its masked token 2 holds a wild log-prob that must not count)
GSPO_LP = [[0.0, -1.0, -2.0], [0.0, -0.5, 9.0]]
GSPO_OLD = T([[0.0, -1.2, -2.0], [0.0, -0.3, 0.0]])
GSPO_MASK = T([[0, 1, 1], [0, 1, 0]])
GSPO_ADV = T([1.0, -2.0])


def test_gspo_sequence_ratio_and_clip():
    lp = T(GSPO_LP, requires_grad=True)
    # eps 0.1/0.2: s0 = 1.105 < 1.2 is unclipped: L0 = -1.105171; s1 = 0.819 < 0.9 with A < 0 is
    # clipped: L1 = max(2 * 0.818731, 2 * 0.9) = 1.8. seq-mean: (-1.105171 + 1.8) / 2
    loss, m = objectives.get_policy_loss_fn("gspo")(
        lp, GSPO_OLD, GSPO_ADV, GSPO_MASK, eps_low=0.1, eps_high=0.2
    )
    assert close(loss, (-1.105171 + 1.8) / 2)
    loss.backward()
    # dL0/dlp_t = -A s0 / |y0| per policy token, then / 2 sequences; seq 1 is clipped: 0
    g = -1.105171 / 2 / 2
    assert close(lp.grad, [[0.0, g, g], [0.0, 0.0, 0.0]])
    assert close(m["ratio_max"], 1.105171) and close(m["ratio_min"], 0.818731)
    assert close(m["clip_frac_low"], 1 / 3) and m["clip_frac_high"] == 0.0


def test_gspo_token_mean_weights_sequences_by_length_and_clips_high():
    # eps_high 0.05: s0 = 1.105 > 1.05 with A > 0 -> L0 = -1.05 on its 2 tokens; L1 = 1.8
    loss, m = objectives.gspo_loss(
        T(GSPO_LP), GSPO_OLD, GSPO_ADV, GSPO_MASK, eps_low=0.1, eps_high=0.05, agg_mode="token-mean"
    )
    assert close(loss, (2 * -1.05 + 1.8) / 3)
    assert close(m["clip_frac_high"], 2 / 3)


def test_gspo_gives_a_token_decoupled_ppo_drops_no_gradient():
    # proximal -1 on the three policy tokens, sampler -1.2, -2, -1: w = exp(0.2) = 1.221403,
    # exp(1) > cap 2 (dropped: 0), exp(0) = 1. Current -0.9, -1, -1: log-ratios 0.1, 0, 0, so
    # s = exp(0.1 / 3) = 1.033895 (the dropped token's log-ratio still counts in its value),
    # inside the clip. A = 1, seq-mean-token-mean: loss = -(w1 + 0 + w3) s / 3; a kept token's
    # gradient is -(w1 + w3) s / 3 / 3 (ds/dlp = s / 3); the dropped one's exactly 0, where the
    # other tokens' shares of L used to train it through s.
    prox, sampler, mask = (
        T([[0.0, -1.0, -1.0, -1.0]]),
        T([[0.0, -1.2, -2.0, -1.0]]),
        T([[0, 1, 1, 1]]),
    )
    w, _ = objectives.off_policy_weights(prox, sampler, mask, kind="decoupled", cap=2.0)
    assert close(w[0, 1:], [1.221403, 0.0, 1.0])
    lp = T([[0.0, -0.9, -1.0, -1.0]], requires_grad=True)
    loss, m = objectives.gspo_loss(
        lp, prox, T([1.0]), mask, eps_low=0.2, eps_high=0.2, token_weights=w
    )
    s = math.exp(0.1 / 3)
    assert close(m["ratio_max"], s, tol=1e-6)
    assert close(loss, -(1.221403 + 1.0) * s / 3, tol=1e-6)
    loss.backward()
    assert lp.grad[0, 2].item() == 0.0
    g = -(1.221403 + 1.0) * s / 9
    assert close(lp.grad, [[0.0, g, 0.0, g]], tol=1e-6)


# ---------------------------------------------------------------- RLOO


def test_rloo_leave_one_out_baseline():
    # group 0: [3, 1, 2] -> 3 - 1.5, 1 - 2.5, 2 - 2; group 5: single -> 0; group 7: equal -> 0
    adv = objectives.rloo_advantages(T([3.0, 1.0, 2.0, 5.0, 4.0, 4.0]), T([0, 0, 0, 5, 7, 7]))
    assert close(adv, [1.5, -1.5, 0.0, 0.0, 0.0, 0.0])
    assert close(objectives.rloo_advantages(T([[1.0, 0.0], [0.0, 0.0]])), [[1.0, -1.0], [0.0, 0.0]])
    with pytest.raises(ValueError, match="advantage estimator"):
        objectives.compute_advantages("rlo", T([1.0]), T([0]))


def test_trainer_advantages_by_name():
    scored = [Scored(None, 0, r) for r in (1.0, 0.0, 0.0)]
    assign_advantages(scored, estimator="rloo", normalize_std=True)
    # 1 - 0, 0 - 0.5, 0 - 0.5
    assert close([s.advantage for s in scored], [1.0, -0.5, -0.5])


# ---------------------------------------------------------------- failure masking


def test_keep_groups_without_failures():
    keep = objectives.keep_groups_without_failures(
        T([False, True, False, False, False]), T([0, 0, 1, 1, 2])
    )
    assert keep.tolist() == [False, False, True, True, True]


def _traj(task, reason="submitted"):
    return SimpleNamespace(task_id=task, finish_reason=reason)


def test_mask_failed_groups_drops_the_whole_group_of_a_failed_episode():
    trajs = [
        _traj("a"),
        _traj("a", "error"),
        _traj("b"),
        _traj("b", "max_turns"),
        _traj("c", "timeout"),
        _traj("c"),
        _traj("d", "sandbox_failed"),
        _traj("d"),
        _traj("e"),
        _traj("e", "grading_error"),
    ]
    groups = [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    # score_trajectories dropped the errored episode; the others were scored (reward 0)
    scored = [
        Scored(t, g, 0.0) for t, g in zip(trajs, groups, strict=True) if t.finish_reason != "error"
    ]
    counters = Counters()
    kept = mask_failed_groups(trajs, groups, scored, counters)
    assert [s.traj for s in kept] == trajs[2:4]  # hitting max_turns is the policy's doing
    assert counters.failure_masked == 7  # a's survivor, both of c, d and e


# ---------------------------------------------------------------- off-policy correction

# learner (proximal) vs sampler log-probs on three policy tokens:
# w = exp(0.5) = 1.648721, exp(-0.8) = 0.449329, exp(-2) = 0.135335
PROX = T([[0.0, -1.0, -1.0, -3.0]])
SAMPLER = T([[0.0, -1.5, -0.2, -1.0]])
MASK = T([[0, 1, 1, 1]])


def test_tis_truncates_and_decoupled_drops_above_the_cap():
    w, m = objectives.off_policy_weights(PROX, SAMPLER, MASK, kind="tis", cap=1.5)
    assert close(w[0, 1:], [1.5, 0.449329, 0.135335])
    assert close(m["is_weight_mean"], (1.5 + 0.449329 + 0.135335) / 3)
    assert close(m["is_capped_frac"], 1 / 3)
    w, _ = objectives.off_policy_weights(PROX, SAMPLER, MASK, kind="decoupled", cap=1.5)
    assert close(w[0, 1:], [0.0, 0.449329, 0.135335])
    w, _ = objectives.off_policy_weights(PROX, SAMPLER, MASK, kind="none", cap=1.5)
    assert close(w, torch.ones(1, 4))
    with pytest.raises(ValueError, match="off-policy correction"):
        objectives.off_policy_weights(PROX, SAMPLER, MASK, kind="is")


def test_mismatch_metrics():
    # ratios exp(0.1) = 1.105171, exp(-0.5) = 0.606531; k3 = r - 1 - log r per token
    m = objectives.mismatch_metrics(T([[-1.0, -2.0, 5.0]]), T([[-1.1, -1.5, 0.0]]), T([[1, 1, 0]]))
    assert close(m["mismatch_ratio_mean"], (1.105171 + 0.606531) / 2)
    assert close(m["mismatch_ratio_max"], 1.105171) and close(m["mismatch_ratio_min"], 0.606531)
    k3 = ((1.105171 - 1 - 0.1) + (0.606531 - 1 + 0.5)) / 2
    assert close(m["mismatch_kl"], k3)


def test_token_weights_multiply_the_clipped_loss_and_its_gradient():
    # ratio 1 everywhere, A = 2: L_t = -2 * w_t = -1, -3; token-mean over 2 tokens = -2
    lp = T([[0.0, -1.0, -1.0]], requires_grad=True)
    loss, _ = objectives.dapo_loss(
        lp, lp.detach().clone(), T([2.0]), T([[0, 1, 1]]), token_weights=T([[0.0, 0.5, 1.5]])
    )
    assert close(loss, -2.0)
    loss.backward()
    assert close(lp.grad, [[0.0, -0.5, -1.5]])


def test_decoupled_ppo_clips_around_the_proximal_policy():
    # proximal -1.0, sampler -1.5 (w = exp(0.5) = 1.648721 < cap 2), current -0.8: the ratio to
    # the proximal policy, exp(0.2) = 1.221403, is inside 1 + 0.3 (the ratio to the sampler,
    # exp(0.7) = 2.01, would be clipped and give no gradient)
    lp = T([[0.0, -0.8]], requires_grad=True)
    prox, sampler, mask = T([[0.0, -1.0]]), T([[0.0, -1.5]]), T([[0, 1]])
    w, _ = objectives.off_policy_weights(prox, sampler, mask, kind="decoupled", cap=2.0)
    loss, _ = objectives.ppo_loss(lp, prox, T([1.0]), mask, clip_eps=0.3, token_weights=w)
    # L = -A * ratio * w = -1.221403 * 1.648721; dL/dlp = the same (d ratio / d lp = ratio)
    assert close(loss, -1.221403 * 1.648721)
    loss.backward()
    assert close(lp.grad, [[0.0, -1.221403 * 1.648721]])


def _tiny_learner(**kw):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=64,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    return Learner(LlamaForCausalLM(cfg), LearnerConfig(lr=1e-3, loss="dapo", grad_clip=None, **kw))


def test_learner_logs_the_mismatch_between_proximal_and_behaviour_logprobs():
    # the samples carry the learner's recomputed log-probs (-1 on policy tokens) and the
    # sampler's (-1.5): ratio exp(0.5) = 1.648721 on every policy token, whatever the model;
    # k3 = 1.648721 - 1 - 0.5; tis with cap 1.2 truncates every weight to 1.2
    mask = [0, 0, 1, 1, 0, 1]
    samples = [
        Sample(
            list(range(3 + i, 9 + i)),
            mask,
            proximal_logprobs=[-1.0 * x for x in mask],
            behaviour_logprobs=[-1.5 * x for x in mask],
            advantage=1.0 - 2 * i,
        )
        for i in range(2)
    ]
    m = _tiny_learner(off_policy_correction="tis", is_cap=1.2).train_step(samples)
    assert close(m["mismatch_ratio_mean"], 1.648721) and close(m["mismatch_ratio_max"], 1.648721)
    assert close(m["mismatch_kl"], 1.648721 - 1.5)
    assert close(m["is_weight_mean"], 1.2) and m["is_capped_frac"] == 1.0
    with pytest.raises(ValueError, match="off_policy_correction"):
        LearnerConfig(off_policy_correction="tsi")
    with pytest.raises(ValueError, match="no importance ratio"):
        LearnerConfig(loss="sft", off_policy_correction="tis")


def test_learner_correction_equals_weighting_by_hand():
    # a step with tis must give the gradient of the plain loss on advantages scaled by
    # min(w, C) per token (the clip is inactive at ratio 1 and w >= 0 scales the loss linearly)
    mask = [0, 1, 1, 1]
    w = [0.0, math.exp(0.1), 1.2, math.exp(-0.4)]  # exp(0.9) is capped at 1.2
    base = dict(input_ids=[5, 6, 7, 8], loss_mask=mask)
    a = _tiny_learner(off_policy_correction="tis", is_cap=1.2)
    lps = a.compute_logprobs([Sample(**base)])[0]
    prox = [lp * m for lp, m in zip(lps, mask, strict=True)]
    behaviour = [
        p - math.log(x) if m and x > 0 else 0.0
        for p, x, m in zip(
            prox, [1, math.exp(0.1), math.exp(0.9), math.exp(-0.4)], mask, strict=True
        )
    ]
    ma = a.train_step(
        [Sample(**base, proximal_logprobs=prox, behaviour_logprobs=behaviour, advantage=1.0)]
    )
    b = _tiny_learner()
    b.train_step([Sample(**base, behaviour_logprobs=prox, advantage=w)])
    for pa, pb in zip(a.model.parameters(), b.model.parameters(), strict=True):
        assert torch.allclose(pa.grad, pb.grad, atol=1e-6, rtol=1e-5)
    assert any(p.grad.abs().max() > 1e-3 for p in a.model.parameters())
    assert close(ma["is_capped_frac"], 1 / 3)


# ---------------------------------------------------------------- error messages (found by
# mutation testing, benchmarks/mutation.py)


def test_error_messages_name_the_value_and_the_choices():
    with pytest.raises(ValueError, match=r"unknown loss aggregation mode 'tok'; choose one of"):
        objectives.agg_loss(T([[1.0]]), T([[1]]), "tok")
    with pytest.raises(ValueError, match=r"loss_mat shape \(1, 2\) != mask shape \(1, 1\)"):
        objectives.agg_loss(T([[1.0, 2.0]]), T([[1]]))
    with pytest.raises(ValueError, match=r"needs a \[B, T\] loss, got shape \(2,\)"):
        objectives.agg_loss(T([1.0, 2.0]), T([1, 1]), "seq-mean-token-mean")
    with pytest.raises(ValueError, match="unknown policy loss 'dapoo'.*Did you mean 'dapo'"):
        objectives.get_policy_loss_fn("dapoo")
    with pytest.raises(ValueError, match="unknown KL estimator 'k4'"):
        objectives.kl_estimate(T([0.0]), T([0.0]), "k4")
    with pytest.raises(
        ValueError,
        match=r"rewards must be 1-D .* got rewards \(2,\), "
        r"group_index \(3,\)",
    ):
        objectives.group_advantages(T([1.0, 0.0]), T([0, 0, 1]))
    with pytest.raises(ValueError, match=r"rewards of shape \(4,\) need a group_index \[N\]"):
        objectives.keep_nonconstant_groups(T([1.0, 0.0, 1.0, 1.0]))
