"""Learner behaviour that mutation testing found unchecked (``benchmarks/mutation.py learner``):
the logged metrics and the loss as reported, the entropy and KL terms as configured, clipping,
skipped steps and the checkpoint's counters. Each test builds a tiny random Llama (seconds)."""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import math
import time

import pytest
import torch
from test_learner import grads_close, make_samples, params_close
from tiny_models import tiny_llama

from algos import core
from algos.data import Sample
from algos.learner import Learner, LearnerConfig, LRSchedule
from algos.logprobs import model_token_logprobs


def _alone(model, samples, entropy=False):
    """Per-sample (log-probs, entropy) of each sample run alone: the reference the packed
    learner must reproduce (float64 for the sums below)."""
    model.eval()
    out = []
    with torch.no_grad():
        for s in samples:
            res = model_token_logprobs(model, torch.tensor([s.input_ids]), return_entropy=entropy)
            lp, ent = res if entropy else (res, None)
            out.append((lp[0].double(), None if ent is None else ent[0].double()))
    model.train()
    return out


def _aggregate(values, samples, agg_mode):
    """agg_loss over a whole step: token-mean or seq-mean-token-mean of per-token ``values``."""
    masks = [torch.tensor(s.loss_mask, dtype=torch.float64) for s in samples]
    sums = [(v * m).sum() for v, m in zip(values, masks, strict=True)]
    if agg_mode == "token-mean":
        return float(sum(sums) / sum(m.sum() for m in masks))
    # sequences without a loss token neither contribute nor count
    per_seq = [s / m.sum() for s, m in zip(sums, masks, strict=True) if m.sum() > 0]
    return float(sum(per_seq) / len(per_seq))


# ---------------------------------------------------------------- what a step reports


def test_logged_metrics_do_not_depend_on_micro_batching():
    """Means are token-weighted over micro-batches, *_max/*_min are the extremes: a run's
    curves must not change with micro_batch_tokens. One sample has a single policy token
    (its micro-batch weighs 1) and a low sampler log-prob (it holds the smallest ratio)."""
    samples = make_samples(6, seed=21)
    samples.append(Sample([3, 4, 5, 6], [0, 0, 1, 0], old_logprobs=[0.0, 0.0, -4.0, 0.0],
                          advantage=-0.7, sample_id="one-token"))
    base = tiny_llama()
    runs = []
    for budget in (100_000, 1):  # one micro-batch; one per sample (a sequence over budget)
        learner = Learner(copy.deepcopy(base),
                          LearnerConfig(lr=1e-3, micro_batch_tokens=budget, log_entropy=True))
        runs.append(learner.train_step(samples))
    one, each = runs
    assert one["micro_batches"] == 1 and each["micro_batches"] == len(samples)
    keys = ("loss", "pg_loss", "approx_kl", "ratio_mean", "ratio_max", "ratio_min",
            "clip_frac_low", "clip_frac_high", "mismatch_kl", "mismatch_ratio_mean",
            "mismatch_ratio_max", "mismatch_ratio_min", "entropy")
    for key in keys:
        assert math.isclose(one[key], each[key], rel_tol=1e-5, abs_tol=1e-7), (key, one, each)
    assert one["ratio_min"] < 0.6  # exp(~-4.85 + 4.0): the one-token sample's
    tokens = sum(len(s) for s in samples)
    assert each["loss_tokens"] == sum(s.num_loss_tokens for s in samples)
    assert each["sequences"] == len(samples) and each["tokens"] == tokens
    assert each["padded_tokens"] == tokens  # packed rows hold no padding


def test_reported_loss_is_the_step_objective_over_all_micro_batches():
    # SFT's token-mean loss is the mean NLL of every policy token in the step
    samples = make_samples(5, seed=22)
    m = Learner(tiny_llama(), LearnerConfig(loss="sft", micro_batch_tokens=40)).train_step(samples)
    assert m["micro_batches"] > 1
    assert math.isclose(m["loss"], m["nll"], rel_tol=1e-5)


def test_step_time_and_throughput_are_consistent():
    samples = make_samples(3, seed=23)
    learner = Learner(tiny_llama(), LearnerConfig())
    t0 = time.perf_counter()
    m = learner.train_step(samples)
    wall = time.perf_counter() - t0
    assert 0 < m["time_s"] <= wall  # measured inside the call
    assert math.isclose(m["tokens_per_s"], m["tokens"] / m["time_s"], rel_tol=1e-9)


# ---------------------------------------------------------------- the terms of the loss


@pytest.mark.parametrize("agg_mode", ["token-mean", "seq-mean-token-mean"])
def test_entropy_bonus_subtracts_the_aggregated_policy_entropy(agg_mode):
    """loss(entropy_coef=c) = loss(0) - c * agg(H), H the entropy at each policy token, with
    the step's aggregation over all micro-batches (c = 1 without log_entropy: the bonus alone
    must turn the entropy on)."""
    samples = make_samples(5, seed=24)
    base = tiny_llama()
    reports = {}
    for coef in (0.0, 1.0):
        cfg = LearnerConfig(lr=1e-3, agg_mode=agg_mode, entropy_coef=coef, micro_batch_tokens=40)
        reports[coef] = Learner(copy.deepcopy(base), cfg).train_step(samples)
    assert reports[1.0]["micro_batches"] > 1
    entropy = _aggregate([e for _, e in _alone(base, samples, entropy=True)], samples, agg_mode)
    # float32 forward: each loss carries ~1e-6 relative error; entropy ~4.8 (log 128)
    assert reports[1.0]["loss"] == pytest.approx(reports[0.0]["loss"] - entropy, abs=1e-4)
    assert "entropy" in reports[1.0]


def test_entropy_is_computed_only_when_logged_or_in_the_loss():
    samples = make_samples(2, seed=25)
    assert "entropy" not in Learner(tiny_llama(), LearnerConfig()).train_step(samples)
    assert "entropy" in Learner(tiny_llama(), LearnerConfig(log_entropy=True)).train_step(samples)


@pytest.mark.parametrize("kind", ["k1", "k2"])  # k3 is the default
def test_kl_penalty_uses_the_configured_estimator_over_the_whole_step(kind):
    """With reference log-probs carried by the samples (no reference model):
    loss(kl_coef=b) = loss(0) + b * token-mean of k(logp, ref) over every micro-batch."""
    samples = [dataclasses.replace(s, ref_logprobs=[(v - 0.3) * m for v, m in
                                                    zip(s.old_logprobs, s.loss_mask, strict=True)])
               for s in make_samples(5, seed=26)]
    base = tiny_llama()
    reports = {}
    for coef in (0.0, 0.5):
        cfg = LearnerConfig(lr=1e-3, loss="grpo", kl_coef=coef, kl_estimator=kind,
                            micro_batch_tokens=40)
        reports[coef] = Learner(copy.deepcopy(base), cfg).train_step(samples)
    assert reports[0.5]["micro_batches"] > 1
    kl = [core.kl_estimate(lp, torch.tensor(s.ref_logprobs, dtype=torch.float64), kind)
          for (lp, _), s in zip(_alone(base, samples), samples, strict=True)]
    want = reports[0.0]["loss"] + 0.5 * _aggregate(kl, samples, "token-mean")
    assert reports[0.5]["loss"] == pytest.approx(want, abs=1e-5)


def test_a_missing_reference_names_the_sample_without_one():
    samples = [dataclasses.replace(s, ref_logprobs=s.old_logprobs, sample_id=f"s{i}")
               for i, s in enumerate(make_samples(3, seed=27))]
    samples[1].ref_logprobs = None
    learner = Learner(tiny_llama(), LearnerConfig(loss="grpo", kl_coef=0.1))
    with pytest.raises(ValueError, match="sample 's1' has none"):
        learner.train_step(samples)


def test_pg_without_sampling_logprobs_normalises_over_the_whole_step():
    # REINFORCE needs no sampler log-probs; split over micro-batches it is still one step
    samples = [dataclasses.replace(s, old_logprobs=None) for s in make_samples(8, seed=28)]
    base = tiny_llama()
    one = Learner(copy.deepcopy(base), LearnerConfig(lr=1e-3, loss="pg"))
    many = Learner(copy.deepcopy(base), LearnerConfig(lr=1e-3, loss="pg", micro_batch_tokens=40))
    m1, m2 = one.train_step(samples), many.train_step(samples)
    assert m1["micro_batches"] == 1 < m2["micro_batches"]
    assert math.isclose(m1["loss"], m1["pg_loss"], rel_tol=1e-5)  # token-mean of -A logp
    assert math.isclose(m1["loss"], m2["loss"], rel_tol=1e-5)
    grads_close(one.model, many.model)
    assert "mismatch_kl" not in m1  # nothing to compare the learner with


def test_a_registered_loss_receives_the_configured_loss_kwargs():
    seen = []

    def scaled_pg(logprobs, old_logprobs, advantages, mask, *, scale=1.0, **kw):
        seen.append(scale)
        return core.pg_loss(logprobs, old_logprobs, advantages * scale, mask, **kw)

    core.register_policy_loss("test_scaled_pg", needs_old_logprobs=False)(scaled_pg)
    core.register_policy_loss("test_scaled_ratio_pg")(scaled_pg)  # one that takes a correction
    try:
        cfg = LearnerConfig(loss="test_scaled_pg", loss_kwargs={"scale": 3.0})
        samples = make_samples(2, seed=29)
        Learner(tiny_llama(), cfg).train_step(samples)  # with sampler log-probs
        Learner(tiny_llama(), cfg).train_step(
            [dataclasses.replace(s, old_logprobs=None) for s in samples])  # without
        corrected = LearnerConfig(loss="test_scaled_ratio_pg", loss_kwargs={"scale": 2.0},
                                  off_policy_correction="tis")
        Learner(tiny_llama(), corrected).train_step(samples)
    finally:
        core.POLICY_LOSSES.pop("test_scaled_pg")
        core.POLICY_LOSSES.pop("test_scaled_ratio_pg")
        core.NEEDS_OLD_LOGPROBS.discard("test_scaled_ratio_pg")
    assert seen == [3.0, 3.0, 2.0]


# ---------------------------------------------------------------- clipping and skipped steps


def test_gradients_are_clipped_to_grad_clip_and_the_norm_before_is_reported():
    samples = make_samples(4, seed=30)
    base = tiny_llama()
    free = Learner(copy.deepcopy(base), LearnerConfig(grad_clip=None))
    norm = free.train_step(samples)["grad_norm"]
    clipped = Learner(copy.deepcopy(base), LearnerConfig(grad_clip=norm / 4))
    m = clipped.train_step(samples)
    assert math.isclose(m["grad_norm"], norm, rel_tol=1e-5)
    after = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in clipped.params]))
    # clip_grad_norm_ scales by max_norm / (norm + 1e-6)
    assert math.isclose(float(after), norm / 4, rel_tol=1e-4)


def test_a_non_finite_gradient_skips_the_step(caplog):
    model = tiny_llama()
    before = copy.deepcopy(model)
    learner = Learner(model, LearnerConfig(lr=1e-3))
    model.lm_head.weight.register_hook(lambda g: g * float("inf"))  # a finite loss, inf grads
    with caplog.at_level(logging.WARNING, logger="algos.learner"):
        m = learner.train_step(make_samples(2, seed=31))
    assert m["skipped"] == 1 and learner.step == 0 and learner.skipped_steps == 1
    assert math.isnan(m["loss"]) and not math.isfinite(m["grad_norm"])
    assert "non-finite gradient norm" in caplog.text
    params_close(model, before, atol=0.0)


def test_skipped_steps_accumulate_report_nan_and_survive_a_checkpoint(tmp_path, caplog):
    learner = Learner(tiny_llama(), LearnerConfig(lr=1e-3))
    bad = make_samples(2, seed=32)
    bad[0].advantage = float("nan")
    with caplog.at_level(logging.WARNING, logger="algos.learner"):
        learner.train_step(bad)
        m = learner.train_step(bad)
    assert m["skipped_steps"] == 2 and learner.skipped_steps == 2
    assert math.isnan(m["loss"]) and math.isnan(m["grad_norm"])  # never a stale number
    assert "step 0 skipped: non-finite loss" in caplog.text
    learner.train_step(make_samples(2, seed=32))
    learner.save_checkpoint(tmp_path / "c")
    resumed = Learner(tiny_llama(seed=1), LearnerConfig(lr=1e-3))
    resumed.load_checkpoint(tmp_path / "c")
    assert resumed.step == 1 and resumed.skipped_steps == 2
    saved = json.loads((tmp_path / "c" / "learner_config.json").read_text())
    assert saved["lr"] == 1e-3 and saved["loss"] == "dapo"  # what the run was trained with


def test_a_checkpoint_without_learner_counters_loads_with_none_skipped(tmp_path):
    # written by algos.checkpoint alone (or before the counter existed): no learner state
    from algos.checkpoint import save_checkpoint

    learner = Learner(tiny_llama(), LearnerConfig(lr=1e-3))
    save_checkpoint(tmp_path / "c", model=learner.model, optimizer=learner.optimizer,
                    scheduler=learner.scheduler, step=3)
    other = Learner(tiny_llama(seed=1), LearnerConfig(lr=1e-3))
    other.skipped_steps = 5
    other.load_checkpoint(tmp_path / "c")
    assert other.step == 3 and other.skipped_steps == 0


# ---------------------------------------------------------------- bf16 compute copy


def test_bf16_compute_copy_trains_the_float32_master_weights_on_cpu():
    samples = make_samples(4, seed=33)
    base = tiny_llama()
    ref = Learner(copy.deepcopy(base), LearnerConfig(lr=1e-3))
    ref.train_step(samples)
    bf = Learner(copy.deepcopy(base), LearnerConfig(lr=1e-3, bf16=True, bf16_compute_copy=True))
    m = bf.train_step(samples)
    assert bf.compute is not None and m["skipped"] == 0
    # on CPU bf16 alone is autocast (no copy), and a copy is made only with bf16
    assert Learner(copy.deepcopy(base), LearnerConfig(bf16=True)).compute is None
    assert Learner(copy.deepcopy(base), LearnerConfig(bf16_compute_copy=True)).compute is None
    assert all(p.dtype == torch.float32 for p in bf.model.parameters())
    assert params_close(bf.model, base, atol=1.0) > 1e-4  # the master weights moved
    g_ref = torch.cat([p.grad.flatten() for p in ref.model.parameters()])
    g_bf = torch.cat([p.grad.flatten() for p in bf.model.parameters()])
    cos = float(torch.nn.functional.cosine_similarity(g_ref, g_bf, dim=0))
    assert cos > 0.99, cos


# ---------------------------------------------------------------- configuration


@pytest.mark.parametrize("field, value, message", [
    ("lr", 0.0, "lr must be > 0; got 0.0"),
    ("schedule", "cosinus", "unknown schedule 'cosinus'; choose one of: constant, cosine"),
    ("warmup_steps", -1, "warmup_steps must be >= 0; got -1"),
    ("micro_batch_tokens", 0, "micro_batch_tokens must be >= 1; got 0"),
    ("grad_clip", 0.0, "grad_clip must be > 0 or None; got 0.0"),
    ("agg_mode", "tokens", "unknown agg_mode 'tokens'; choose one of: seq-mean-token-mean,"),
    ("kl_estimator", "k4", "unknown kl_estimator 'k4'; choose one of: k1, k2, k3"),
    ("kl_coef", -0.1, "kl_coef must be >= 0; got -0.1"),
    ("off_policy_correction", "tsi",
     "unknown off_policy_correction 'tsi'; choose one of: decoupled, none, tis"),
    ("is_cap", 0.0, "is_cap must be > 0; got 0.0"),
])
def test_config_errors_name_the_field_the_value_and_the_choices(field, value, message):
    with pytest.raises(ValueError) as err:
        LearnerConfig(**{field: value})
    assert message in str(err.value)


def test_config_boundaries_that_are_accepted():
    LearnerConfig(micro_batch_tokens=1)  # every sequence in a micro-batch of its own
    LearnerConfig(is_cap=0.5)  # a cap below 1 only truncates harder
    LearnerConfig(loss="pg", off_policy_correction="tis")  # REINFORCE has a ratio to weight
    LearnerConfig(schedule="cosine", warmup_steps=2, total_steps=3)
    with pytest.raises(ValueError, match="total_steps=2, warmup_steps=2"):
        LearnerConfig(schedule="cosine", warmup_steps=2, total_steps=2)


def test_constant_schedule_holds_the_peak_lr_after_warm_up():
    learner = Learner(tiny_llama(), LearnerConfig(lr=1e-2, warmup_steps=2))
    lrs = [learner.train_step(make_samples(2, seed=34))["lr"] for _ in range(4)]
    assert lrs == pytest.approx([5e-3, 1e-2, 1e-2, 1e-2])


def test_cosine_schedule_reaches_min_lr_at_total_steps_and_stays_there():
    sched = LRSchedule(warmup_steps=0, schedule="cosine", total_steps=1, min_lr_ratio=0.1)
    assert [sched(k) for k in range(4)] == pytest.approx([1.0, 0.1, 0.1, 0.1])
    half = LRSchedule(warmup_steps=1, schedule="cosine", total_steps=3, min_lr_ratio=0.2)
    assert half(2) == pytest.approx(0.2 + 0.8 * 0.5)  # half-way down the cosine


# ---------------------------------------------------------------- the optimiser and layouts


def test_a_step_without_gradient_decays_only_the_matrices_by_lr_times_weight_decay():
    # pg with zero advantages has an all-zero gradient: AdamW's update is 0 and only the
    # decoupled decay p -= lr * wd * p acts, on matrices; biases and norm weights keep theirs
    model = tiny_llama()
    before = copy.deepcopy(model)
    cfg = LearnerConfig(lr=1e-2, weight_decay=0.1, loss="pg")
    Learner(model, cfg).train_step([dataclasses.replace(s, advantage=0.0)
                                    for s in make_samples(2, seed=35)])
    for (name, p), q in zip(model.named_parameters(), before.parameters(), strict=True):
        want = q * (1 - 1e-2 * 0.1) if p.ndim >= 2 else q
        torch.testing.assert_close(p, want, rtol=1e-6, atol=0.0, msg=name)


def test_the_configured_adam_hyper_parameters_reach_the_optimiser():
    learner = Learner(tiny_llama(), LearnerConfig(lr=3e-4, betas=[0.5, 0.9], eps=1e-6))
    for group in learner.optimizer.param_groups:
        assert group["betas"] == (0.5, 0.9) and group["eps"] == 1e-6 and group["lr"] == 3e-4


def test_the_padded_baseline_reports_its_padding():
    samples = make_samples(6, seed=36)
    m = Learner(tiny_llama(), LearnerConfig(packing=False, micro_batch_tokens=200)).train_step(
        samples)
    assert m["padded_tokens"] > m["tokens"] == sum(len(s) for s in samples)


def test_log_probs_are_taken_at_the_sampling_temperature():
    model = tiny_llama()
    sample = make_samples(1, seed=37)[0]
    got = Learner(model, LearnerConfig(temperature=0.7)).compute_logprobs([sample])[0]
    with torch.no_grad():
        logits = model(torch.tensor([sample.input_ids])).logits[0].double()
    ids = torch.tensor(sample.input_ids)
    want = torch.log_softmax(logits[:-1] / 0.7, dim=-1).gather(1, ids[1:, None])[:, 0]
    torch.testing.assert_close(torch.tensor(got[1:], dtype=torch.float64), want,
                               atol=2e-5, rtol=1e-5)
    assert got[0] == 0.0


def test_an_empty_step_is_refused():
    with pytest.raises(ValueError, match="train_step needs at least one sample"):
        Learner(tiny_llama(), LearnerConfig()).train_step([])


def test_seq_mean_counts_only_the_sequences_that_hold_a_loss_token():
    """seq-mean-token-mean over a step with a sequence of observations only (no loss token)
    and one with a single loss token, each in a micro-batch of its own: the mean is over the
    sequences that have loss tokens (pg: the per-token loss is -A * logp)."""
    samples = [dataclasses.replace(s, old_logprobs=None) for s in make_samples(3, seed=38)]
    samples += [Sample([5, 6, 7], [0, 0, 0], advantage=1.5, sample_id="no-loss"),
                Sample([8, 9, 10], [0, 1, 0], advantage=-0.5, sample_id="one-token")]
    base = tiny_llama()
    cfg = LearnerConfig(loss="pg", agg_mode="seq-mean-token-mean", micro_batch_tokens=1)
    m = Learner(copy.deepcopy(base), cfg).train_step(samples)
    per_token = [-s.advantage * lp for (lp, _), s in zip(_alone(base, samples), samples,
                                                           strict=True)]
    want = _aggregate(per_token, samples, "seq-mean-token-mean")
    assert m["loss"] == pytest.approx(want, rel=1e-5)


# ---------------------------------------------------------------- the sampler/learner gap


def _recomputed(seed: int) -> list[Sample]:
    """Samples whose old log-probs were recomputed by the learner (-1 on policy tokens) and
    whose sampler's were -1.5: weight exp(0.5) = 1.648721 on every policy token."""
    mask = [0, 0, 1, 1, 0, 1, 1, 1]
    return [Sample(list(range(3 + i, 11 + i)), mask, old_logprobs=[-1.0 * x for x in mask],
                   sampler_logprobs=[-1.5 * x for x in mask], advantage=1.0 - i, sample_id=i)
            for i in range(3)]


def test_without_recomputed_logprobs_the_mismatch_is_this_steps_policy_against_the_sampler():
    # the proximal policy is then the step's own forward: exp(logp - sampler) per token, the
    # same ratio the clipped loss sees before the update
    m = Learner(tiny_llama(), LearnerConfig(lr=1e-3)).train_step(make_samples(4, seed=39))
    assert m["ratio_max"] > 1.05  # the sampler's log-probs differ from the policy's
    for key in ("mean", "max", "min"):
        assert m[f"mismatch_ratio_{key}"] == pytest.approx(m[f"ratio_{key}"], rel=1e-5)


def test_decoupled_correction_drops_the_tokens_over_the_cap():
    m = Learner(tiny_llama(), LearnerConfig(lr=1e-3, off_policy_correction="decoupled",
                                            is_cap=1.2)).train_step(_recomputed(40))
    assert m["is_capped_frac"] == 1.0 and m["is_weight_mean"] == 0.0  # tis would keep 1.2
    assert m["loss"] == 0.0


def test_truncated_correction_normalises_over_the_whole_step():
    base = tiny_llama()
    reports = []
    for budget in (100_000, 1):
        cfg = LearnerConfig(lr=1e-3, off_policy_correction="tis", is_cap=1.2,
                            micro_batch_tokens=budget)
        reports.append(Learner(copy.deepcopy(base), cfg).train_step(_recomputed(41)))
    one, each = reports
    assert one["micro_batches"] == 1 and each["micro_batches"] == 3
    assert math.isclose(one["loss"], each["loss"], rel_tol=1e-5)
    assert one["is_weight_mean"] == pytest.approx(1.2)


# ---------------------------------------------------------------- second mutation pass


def test_the_step_metric_counts_the_optimiser_steps_taken():
    learner = Learner(tiny_llama(), LearnerConfig(lr=1e-3))
    samples = make_samples(2, seed=5)
    assert [learner.train_step(samples)["step"] for _ in range(2)] == [1.0, 2.0]
