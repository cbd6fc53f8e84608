"""The learner on a tiny random Llama (built from a config, nothing downloaded)."""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import math
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from transformers import LlamaForCausalLM

from algos import objectives
from algos.learner.learner import Learner
from algos.learner.learner_config import LearnerConfig, LRSchedule
from algos.learner.logprobs import model_token_logprobs
from algos.learner.samples import Sample, pack_samples, pad_samples
from tests.algos.tiny_models import tiny_llama

REPO = Path(__file__).resolve().parents[3]


def make_samples(n: int, lo: int = 6, hi: int = 40, seed: int | None = None) -> list[Sample]:
    """Random trajectories: prompt (mask 0), then action tokens (mask 1) with an observation
    (mask 0) in between. Uses the global torch RNG unless a seed is given."""
    g = torch.Generator().manual_seed(seed) if seed is not None else None
    out = []
    for i in range(n):
        length = int(torch.randint(lo, hi + 1, (1,), generator=g))
        ids = torch.randint(0, 128, (length,), generator=g).tolist()
        mask = [0] * length
        for t in range(length // 3, length):
            mask[t] = 0 if t % 5 == 0 else 1
        old = [(-4.85 + 0.3 * float(torch.rand(1, generator=g))) * m for m in mask]
        adv = float(torch.randn(1, generator=g))
        out.append(Sample(ids, mask, behaviour_logprobs=old, advantage=adv, sample_id=i))
    return out


# Equivalence of two updates is checked on the gradients, not on the weights after AdamW: its
# step is about lr * g / (|g| + eps), so where |g| is near eps (1e-8) a 3e-11 difference in
# reduction order moves a weight by ~1e-6 (issue 16). fp32 sums of n terms differ by about
# sqrt(n) * 1.2e-7 relative; 1e-4 of each tensor's norm leaves a wide margin for n ~ 1e4 and
# still fails a real difference (a dropped micro-batch or position changes the norm by >1%).
GRAD_RTOL = 1e-4


def grads_close(a: torch.nn.Module, b: torch.nn.Module, rtol: float = GRAD_RTOL) -> float:
    """Largest ||g_a - g_b|| / ||g_a|| over the parameters (the learner leaves the last step's
    clipped gradients in ``.grad``); fails above ``rtol``."""
    worst = 0.0
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert p.grad is not None and q.grad is not None, f"{name}: no gradient"
        scale = p.grad.norm().item()
        rel = (p.grad - q.grad).norm().item() / scale if scale else q.grad.norm().item()
        worst = max(worst, rel)
    assert worst <= rtol, f"largest relative gradient difference {worst} > {rtol}"
    return worst


def params_close(a: torch.nn.Module, b: torch.nn.Module, atol: float) -> float:
    worst = 0.0
    for (_, p), (_, q) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        worst = max(worst, (p - q).abs().max().item())
    assert worst <= atol, f"max parameter difference {worst} > {atol}"
    return worst


# ---------------------------------------------------------------- Sample and packing


def test_sample_validation():
    with pytest.raises(ValueError, match="loss_mask has 2 entries"):
        Sample([1, 2, 3], [0, 1])
    with pytest.raises(ValueError, match=r"loss_mask\[0\] must be 0"):
        Sample([1, 2], [1, 1])
    with pytest.raises(ValueError, match="advantage has 1 entries"):
        Sample([1, 2], [0, 1], advantage=[0.5])
    assert Sample([1, 2, 3], [0, 1, 1], advantage=[0.0, 1.0, 2.0]).num_loss_tokens == 2


def test_packing_respects_budget_and_keeps_every_sample_once():
    samples = make_samples(20, seed=1)
    batches = pack_samples(samples, micro_batch_tokens=64)
    seen = sorted(i for mb in batches for i in mb.sample_indices)
    assert seen == list(range(20))
    for mb in batches:
        assert mb.input_ids.shape[0] == 1 and mb.num_tokens <= 64
        assert mb.num_real_tokens == mb.num_tokens  # no padding in packed rows
    # an over-budget sequence gets a micro-batch of its own
    big = pack_samples(make_samples(3, lo=30, hi=30, seed=2), micro_batch_tokens=10)
    assert [mb.num_tokens for mb in big] == [30, 30, 30]
    padded = pad_samples(samples, micro_batch_tokens=64)
    assert sum(mb.num_tokens for mb in padded) > sum(len(s) for s in samples)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_packed_logprobs_equal_unpacked(attn):
    model = tiny_llama(attn=attn)
    samples = make_samples(6, seed=3)
    learner = Learner(model, LearnerConfig(micro_batch_tokens=10_000, loss="sft"))
    assert len(pack_samples(samples, 10_000)) == 1  # all six share one row
    packed = learner.compute_logprobs(samples)
    learner.config.packing = False
    padded = learner.compute_logprobs(samples)
    model.eval()
    for s, got, got_pad in zip(samples, packed, padded, strict=True):
        with torch.no_grad():
            alone = model_token_logprobs(model, torch.tensor([s.input_ids]))[0]
        torch.testing.assert_close(torch.tensor(got), alone, atol=2e-5, rtol=1e-5)
        torch.testing.assert_close(torch.tensor(got_pad), alone, atol=2e-5, rtol=1e-5)


def test_packed_attention_runs_per_sequence_without_a_mask_and_matches_the_mask_path(monkeypatch):
    """packed_sdpa (the default for sdpa models) gives the 4D-mask path's log-probs and update,
    also under activation checkpointing (the backward recomputes attention), and never builds
    the [L, L] mask for a packed row."""
    import transformers.masking_utils as mu

    samples = make_samples(8, seed=3)
    base = tiny_llama()
    built = []
    real_sdpa_mask = mu.sdpa_mask
    monkeypatch.setattr(mu, "sdpa_mask", lambda *a, **k: built.append(1) or real_sdpa_mask(*a, **k))
    runs = {}
    for name, cfg in {
        "mask": {"packed_attention": False},
        "segments": {},
        "segments+ckpt": {"grad_checkpointing": True},
    }.items():
        model = copy.deepcopy(base)
        learner = Learner(model, LearnerConfig(lr=1e-3, micro_batch_tokens=10_000, **cfg))
        built.clear()
        lp = learner.compute_logprobs(samples)
        metrics = learner.train_step(samples)
        runs[name] = (model, lp, metrics, len(built))
    assert runs["mask"][0].config._attn_implementation == "sdpa"
    for name in ("segments", "segments+ckpt"):
        model, lp, metrics, n_built = runs[name]
        assert model.config._attn_implementation == "packed_sdpa"
        assert n_built == 0, f"{name}: a causal mask was built for a packed row"
        for a, b in zip(runs["mask"][1], lp, strict=True):
            torch.testing.assert_close(torch.tensor(b), torch.tensor(a), atol=2e-5, rtol=1e-5)
        assert math.isclose(metrics["loss"], runs["mask"][2]["loss"], rel_tol=1e-5)
        grads_close(runs["mask"][0], model)
    # outside the learner the switched model is plain sdpa: padded batches keep their mask
    switched, plain = runs["segments"][0], copy.deepcopy(runs["segments"][0])
    plain.set_attn_implementation("sdpa")
    ids = torch.randint(0, 128, (2, 12))
    pad = torch.ones(2, 12, dtype=torch.long)
    pad[1, :5] = 0
    with torch.no_grad():
        torch.testing.assert_close(
            switched(ids, attention_mask=pad).logits, plain(ids, attention_mask=pad).logits
        )


# ---------------------------------------------------------------- the update


@pytest.mark.parametrize("agg_mode", ["token-mean", "seq-mean-token-mean"])
def test_one_vs_eight_micro_batches_same_update(agg_mode):
    samples = make_samples(16, seed=4)
    base = tiny_llama()
    results = []
    for budget in (100_000, 46):
        model = copy.deepcopy(base)
        cfg = LearnerConfig(lr=1e-3, micro_batch_tokens=budget, agg_mode=agg_mode, loss="dapo")
        learner = Learner(model, cfg)
        m1 = learner.train_step(samples)
        results.append((model, m1))
    (one, a1), (eight, b1) = results
    assert a1["micro_batches"] == 1 and b1["micro_batches"] == 8
    assert math.isclose(a1["loss"], b1["loss"], rel_tol=1e-5, abs_tol=1e-7)
    assert math.isclose(a1["grad_norm"], b1["grad_norm"], rel_tol=1e-5)
    grads_close(one, eight)
    assert params_close(one, base, atol=1.0) > 1e-4  # and the step did move the weights


def test_grad_checkpointing_gives_the_same_update_and_bf16_runs():
    samples = make_samples(4, seed=5)
    base = tiny_llama()
    plain, ckpt = copy.deepcopy(base), copy.deepcopy(base)
    Learner(plain, LearnerConfig(lr=1e-3)).train_step(samples)
    Learner(ckpt, LearnerConfig(lr=1e-3, grad_checkpointing=True)).train_step(samples)
    grads_close(plain, ckpt)
    bf = copy.deepcopy(base)
    learner = Learner(bf, LearnerConfig(lr=1e-3, bf16=True, log_entropy=True))
    m = learner.train_step(samples)
    assert m["skipped"] == 0 and math.isfinite(m["loss"]) and 0 < m["entropy"] < math.log(128) + 0.1
    assert bf.model.embed_tokens.weight.dtype == torch.float32  # autocast, not a cast


def test_per_token_advantages_equal_broadcast_sequence_advantage():
    samples = make_samples(4, seed=11)
    per_token = [
        Sample(s.input_ids, s.loss_mask, s.behaviour_logprobs, [s.advantage] * len(s))
        for s in samples
    ]
    base = tiny_llama()
    a, b = copy.deepcopy(base), copy.deepcopy(base)
    Learner(a, LearnerConfig(lr=1e-3)).train_step(samples)
    Learner(b, LearnerConfig(lr=1e-3)).train_step(per_token)
    params_close(a, b, atol=0.0)


def test_sft_lowers_nll_on_its_data():
    samples = make_samples(4, seed=6)
    learner = Learner(tiny_llama(), LearnerConfig(lr=3e-3, loss="sft", weight_decay=0.0))
    first = learner.train_step(samples)["nll"]
    for _ in range(5):
        last = learner.train_step(samples)["nll"]
    assert last < first - 0.1


def test_kl_uses_reference_model_and_requires_one():
    samples = make_samples(4, seed=7)
    model = tiny_llama()
    cfg = LearnerConfig(lr=1e-3, loss="grpo", kl_coef=0.1, agg_mode="seq-mean-token-mean")
    learner = Learner(model, cfg, ref_model=copy.deepcopy(model))
    m = learner.train_step(samples)
    assert abs(m["kl"]) < 1e-6  # policy == reference at the first step
    learner.train_step(samples)
    assert learner.train_step(samples)["kl"] > 1e-7  # and diverges once trained
    with pytest.raises(ValueError, match="ref_model"):
        Learner(tiny_llama(), cfg).train_step(samples)
    with pytest.raises(ValueError, match="behaviour_logprobs"):
        Learner(tiny_llama(), LearnerConfig()).train_step([Sample([1, 2, 3], [0, 1, 1])])


def test_nan_loss_skips_the_step_and_training_goes_on():
    model = tiny_llama()
    before = copy.deepcopy(model)
    learner = Learner(model, LearnerConfig(lr=1e-3))
    bad = make_samples(4, seed=8)
    bad[2].advantage = float("nan")
    m = learner.train_step(bad)
    assert m["skipped"] == 1 and m["skipped_steps"] == 1 and learner.step == 0
    params_close(model, before, atol=0.0)
    m = learner.train_step(make_samples(4, seed=8))
    assert m["skipped"] == 0 and learner.step == 1 and m["skipped_steps"] == 1


def test_lr_schedule_and_config_errors():
    sched = LRSchedule(warmup_steps=2, schedule="cosine", total_steps=6, min_lr_ratio=0.0)
    want = [
        0.5,
        1.0,
        1.0,
        0.5 * (1 + math.cos(math.pi / 4)),
        0.5,
        0.5 * (1 + math.cos(3 * math.pi / 4)),
        0.0,
    ]
    assert [round(sched(k), 6) for k in range(7)] == [round(w, 6) for w in want]
    learner = Learner(
        tiny_llama(), LearnerConfig(lr=1e-2, warmup_steps=2, schedule="cosine", total_steps=6)
    )
    lrs = [learner.train_step(make_samples(2, seed=9))["lr"] for _ in range(4)]
    assert lrs == pytest.approx([1e-2 * w for w in want[:4]])
    with pytest.raises(ValueError, match="total_steps"):
        LearnerConfig(schedule="cosine")
    with pytest.raises(ValueError, match="betas must be two floats"):
        LearnerConfig(betas=[0.9])  # a JSON/CLI list: checked here, not inside AdamW
    assert LearnerConfig(betas=[0.8, 0.9]).betas == (0.8, 0.9)
    with pytest.raises(ValueError, match="Did you mean 'dapo'"):
        LearnerConfig(loss="dapoo")
    with pytest.raises(ValueError, match="token-mean"):
        LearnerConfig(agg_mode="token_mean")


# ---------------------------------------------------------------- checkpoints


def _cfg() -> LearnerConfig:
    return LearnerConfig(
        lr=1e-3, micro_batch_tokens=120, warmup_steps=1, schedule="cosine", total_steps=10
    )


def test_resume_from_checkpoint_matches_uninterrupted(tmp_path):
    torch.manual_seed(123)
    ref = Learner(tiny_llama(), _cfg())
    for _ in range(4):
        ref.train_step(make_samples(6))  # batches drawn from the global RNG

    torch.manual_seed(123)
    first = Learner(tiny_llama(), _cfg())
    for _ in range(2):
        first.train_step(make_samples(6))
    first.save_checkpoint(tmp_path / "ckpt", extra_state={"sampler": {"cursor": 12}})
    del first
    torch.manual_seed(999)  # a different process state: other init, other RNG position
    resumed = Learner(tiny_llama(seed=5), _cfg())
    extra = resumed.load_checkpoint(tmp_path / "ckpt")
    assert extra == {"sampler": {"cursor": 12}} and resumed.step == 2
    for _ in range(2):
        resumed.train_step(make_samples(6))
    params_close(ref.model, resumed.model, atol=0.0)
    # the directory is a Hugging Face model directory
    hf = LlamaForCausalLM.from_pretrained(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "model.safetensors").exists()
    assert hf.model.norm.weight.shape == (32,)


def _word_tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(WordLevel({"[UNK]": 0, "fix": 1, "the": 2, "bug": 3}, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")


def test_tied_embeddings_checkpoint_roundtrip_with_tokenizer(tmp_path):
    from transformers import AutoTokenizer

    learner = Learner(tiny_llama(tied=True), LearnerConfig(lr=1e-3), tokenizer=_word_tokenizer())
    learner.train_step(make_samples(2, seed=10))
    learner.save_checkpoint(tmp_path / "c")
    assert AutoTokenizer.from_pretrained(tmp_path / "c")("fix the bug")["input_ids"] == [1, 2, 3]
    other = Learner(tiny_llama(seed=3, tied=True), LearnerConfig(lr=1e-3))
    other.load_checkpoint(tmp_path / "c")
    params_close(learner.model, other.model, atol=0.0)
    assert other.model.lm_head.weight is other.model.model.embed_tokens.weight


def test_checkpoint_survives_a_kill_between_the_two_renames(tmp_path):
    learner = Learner(tiny_llama(), LearnerConfig(lr=1e-3))
    learner.train_step(make_samples(2, seed=12))
    learner.save_checkpoint(tmp_path / "c", extra_state={"n": 1})
    # what a kill right after "rename old checkpoint aside" leaves: no c, a .c.old-* sibling,
    # and a finished or torn .c.tmp-* that must not be trusted
    (tmp_path / "c").rename(tmp_path / ".c.old-1-abcd")
    (tmp_path / ".c.tmp-1-ef01").mkdir()
    other = Learner(tiny_llama(seed=4), LearnerConfig(lr=1e-3))
    assert other.load_checkpoint(tmp_path / "c") == {"n": 1} and other.step == 1
    params_close(learner.model, other.model, atol=0.0)
    other.save_checkpoint(tmp_path / "c")  # the next save clears the torn temp dir
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        other.load_checkpoint(tmp_path / "missing")


SCRIPT = textwrap.dedent("""
    import os, signal, sys, torch
    sys.path[:0] = [{tests!r}, {repo!r}]
    torch.set_num_threads(1)
    from test_learner import tiny_llama, make_samples, _cfg
    from algos.learner.learner import Learner
    mode, ckpt, out = sys.argv[1], sys.argv[2], sys.argv[3]
    torch.manual_seed(123)
    learner = Learner(tiny_llama(), _cfg())
    if mode == "resume":
        torch.manual_seed(7)
        learner = Learner(tiny_llama(seed=9), _cfg())
        assert learner.load_checkpoint(ckpt) == {{"cursor": learner.step}}
    while learner.step < 4:
        learner.train_step(make_samples(6))
        if mode == "killed" and learner.step == 3:
            real = learner.model.save_pretrained
            def dying_save(path, **kw):  # die half-way through writing step 3's checkpoint
                real(path, **kw)
                os.kill(os.getpid(), signal.SIGKILL)
            learner.model.save_pretrained = dying_save
        if mode != "reference":
            learner.save_checkpoint(ckpt, extra_state={{"cursor": learner.step}})
    torch.save(learner.model.state_dict(), out)
""")


@pytest.mark.slow  # 16-30 s: three training processes, one killed mid-checkpoint
def test_killed_process_resumes_from_last_complete_checkpoint(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(tests=str(Path(__file__).parent), repo=str(REPO)))
    ckpt = tmp_path / "ckpt"

    def start(mode: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, str(script), mode, str(ckpt), str(tmp_path / f"{mode}.pt")],
            cwd=REPO,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def run(mode: str) -> subprocess.CompletedProcess:
        proc = start(mode)
        out, err = proc.communicate(timeout=300)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    reference = start("reference")  # uninterrupted 4 steps, in parallel (no checkpoints)
    killed = run("killed")
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not (tmp_path / "killed.pt").exists()
    assert any(p.name.startswith(".ckpt.tmp-") for p in tmp_path.iterdir())  # the torn save
    state = torch.load(ckpt / "learner_state.pt", weights_only=False)
    assert state["step"] == 2  # the previous checkpoint survived the kill
    resumed = run("resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    _, err = reference.communicate(timeout=300)
    assert reference.returncode == 0, err[-2000:]
    got = torch.load(tmp_path / "resume.pt")
    want = torch.load(tmp_path / "reference.pt")
    for k in want:
        torch.testing.assert_close(got[k], want[k], atol=0.0, rtol=0.0, msg=k)


# ================================================================ found by mutation testing
# Learner behaviour that mutation testing found unchecked (benchmarks/mutation.py learner):
# the logged metrics and the loss as reported, the entropy and KL terms as configured,
# clipping, skipped steps and the checkpoint's counters.


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
    samples.append(
        Sample(
            [3, 4, 5, 6],
            [0, 0, 1, 0],
            behaviour_logprobs=[0.0, 0.0, -4.0, 0.0],
            advantage=-0.7,
            sample_id="one-token",
        )
    )
    base = tiny_llama()
    runs = []
    for budget in (100_000, 1):  # one micro-batch; one per sample (a sequence over budget)
        learner = Learner(
            copy.deepcopy(base), LearnerConfig(lr=1e-3, micro_batch_tokens=budget, log_entropy=True)
        )
        runs.append(learner.train_step(samples))
    one, each = runs
    assert one["micro_batches"] == 1 and each["micro_batches"] == len(samples)
    keys = (
        "loss",
        "pg_loss",
        "approx_kl",
        "ratio_mean",
        "ratio_max",
        "ratio_min",
        "clip_frac_low",
        "clip_frac_high",
        "mismatch_kl",
        "mismatch_ratio_mean",
        "mismatch_ratio_max",
        "mismatch_ratio_min",
        "entropy",
    )
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
    samples = [
        dataclasses.replace(
            s,
            ref_logprobs=[
                (v - 0.3) * m for v, m in zip(s.behaviour_logprobs, s.loss_mask, strict=True)
            ],
        )
        for s in make_samples(5, seed=26)
    ]
    base = tiny_llama()
    reports = {}
    for coef in (0.0, 0.5):
        cfg = LearnerConfig(
            lr=1e-3, loss="grpo", kl_coef=coef, kl_estimator=kind, micro_batch_tokens=40
        )
        reports[coef] = Learner(copy.deepcopy(base), cfg).train_step(samples)
    assert reports[0.5]["micro_batches"] > 1
    kl = [
        objectives.kl_estimate(lp, torch.tensor(s.ref_logprobs, dtype=torch.float64), kind)
        for (lp, _), s in zip(_alone(base, samples), samples, strict=True)
    ]
    want = reports[0.0]["loss"] + 0.5 * _aggregate(kl, samples, "token-mean")
    assert reports[0.5]["loss"] == pytest.approx(want, abs=1e-5)


def test_a_missing_reference_names_the_sample_without_one():
    samples = [
        dataclasses.replace(s, ref_logprobs=s.behaviour_logprobs, sample_id=f"s{i}")
        for i, s in enumerate(make_samples(3, seed=27))
    ]
    samples[1].ref_logprobs = None
    learner = Learner(tiny_llama(), LearnerConfig(loss="grpo", kl_coef=0.1))
    with pytest.raises(ValueError, match="sample 's1' has none"):
        learner.train_step(samples)


def test_pg_without_sampling_logprobs_normalises_over_the_whole_step():
    # REINFORCE needs no sampler log-probs; split over micro-batches it is still one step
    samples = [dataclasses.replace(s, behaviour_logprobs=None) for s in make_samples(8, seed=28)]
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
        return objectives.pg_loss(logprobs, old_logprobs, advantages * scale, mask, **kw)

    objectives.register_policy_loss("test_scaled_pg", needs_old_logprobs=False)(scaled_pg)
    objectives.register_policy_loss("test_scaled_ratio_pg")(
        scaled_pg
    )  # one that takes a correction
    try:
        cfg = LearnerConfig(loss="test_scaled_pg", loss_kwargs={"scale": 3.0})
        samples = make_samples(2, seed=29)
        Learner(tiny_llama(), cfg).train_step(samples)  # with sampler log-probs
        Learner(tiny_llama(), cfg).train_step(
            [dataclasses.replace(s, behaviour_logprobs=None) for s in samples]
        )  # without
        corrected = LearnerConfig(
            loss="test_scaled_ratio_pg", loss_kwargs={"scale": 2.0}, off_policy_correction="tis"
        )
        Learner(tiny_llama(), corrected).train_step(samples)
    finally:
        objectives.POLICY_LOSSES.pop("test_scaled_pg")
        objectives.POLICY_LOSSES.pop("test_scaled_ratio_pg")
        objectives.NEEDS_OLD_LOGPROBS.discard("test_scaled_ratio_pg")
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
    with caplog.at_level(logging.WARNING, logger="algos.learner.learner"):
        m = learner.train_step(make_samples(2, seed=31))
    assert m["skipped"] == 1 and learner.step == 0 and learner.skipped_steps == 1
    assert math.isnan(m["loss"]) and not math.isfinite(m["grad_norm"])
    assert "non-finite gradient norm" in caplog.text
    params_close(model, before, atol=0.0)


def test_skipped_steps_accumulate_report_nan_and_survive_a_checkpoint(tmp_path, caplog):
    learner = Learner(tiny_llama(), LearnerConfig(lr=1e-3))
    bad = make_samples(2, seed=32)
    bad[0].advantage = float("nan")
    with caplog.at_level(logging.WARNING, logger="algos.learner.learner"):
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
    # written by algos.learner.checkpoint alone (or before the counter existed): no learner state
    from algos.learner.checkpoint import save_checkpoint

    learner = Learner(tiny_llama(), LearnerConfig(lr=1e-3))
    save_checkpoint(
        tmp_path / "c",
        model=learner.model,
        optimizer=learner.optimizer,
        scheduler=learner.scheduler,
        step=3,
    )
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


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("lr", 0.0, "lr must be > 0; got 0.0"),
        ("schedule", "cosinus", "unknown schedule 'cosinus'; choose one of: constant, cosine"),
        ("warmup_steps", -1, "warmup_steps must be >= 0; got -1"),
        ("micro_batch_tokens", 0, "micro_batch_tokens must be >= 1; got 0"),
        ("grad_clip", 0.0, "grad_clip must be > 0 or None; got 0.0"),
        ("agg_mode", "tokens", "unknown agg_mode 'tokens'; choose one of: seq-mean-token-mean,"),
        ("kl_estimator", "k4", "unknown kl_estimator 'k4'; choose one of: k1, k2, k3"),
        ("kl_coef", -0.1, "kl_coef must be >= 0; got -0.1"),
        (
            "off_policy_correction",
            "tsi",
            "unknown off_policy_correction 'tsi'; choose one of: decoupled, none, tis",
        ),
        ("is_cap", 0.0, "is_cap must be > 0; got 0.0"),
    ],
)
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
    Learner(model, cfg).train_step(
        [dataclasses.replace(s, advantage=0.0) for s in make_samples(2, seed=35)]
    )
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
        samples
    )
    assert m["padded_tokens"] > m["tokens"] == sum(len(s) for s in samples)


def test_log_probs_are_taken_at_the_sampling_temperature():
    model = tiny_llama()
    sample = make_samples(1, seed=37)[0]
    got = Learner(model, LearnerConfig(temperature=0.7)).compute_logprobs([sample])[0]
    with torch.no_grad():
        logits = model(torch.tensor([sample.input_ids])).logits[0].double()
    ids = torch.tensor(sample.input_ids)
    want = torch.log_softmax(logits[:-1] / 0.7, dim=-1).gather(1, ids[1:, None])[:, 0]
    torch.testing.assert_close(
        torch.tensor(got[1:], dtype=torch.float64), want, atol=2e-5, rtol=1e-5
    )
    assert got[0] == 0.0


def test_an_empty_step_is_refused():
    with pytest.raises(ValueError, match="train_step needs at least one sample"):
        Learner(tiny_llama(), LearnerConfig()).train_step([])


def test_seq_mean_counts_only_the_sequences_that_hold_a_loss_token():
    """seq-mean-token-mean over a step with a sequence of observations only (no loss token)
    and one with a single loss token, each in a micro-batch of its own: the mean is over the
    sequences that have loss tokens (pg: the per-token loss is -A * logp)."""
    samples = [dataclasses.replace(s, behaviour_logprobs=None) for s in make_samples(3, seed=38)]
    samples += [
        Sample([5, 6, 7], [0, 0, 0], advantage=1.5, sample_id="no-loss"),
        Sample([8, 9, 10], [0, 1, 0], advantage=-0.5, sample_id="one-token"),
    ]
    base = tiny_llama()
    cfg = LearnerConfig(loss="pg", agg_mode="seq-mean-token-mean", micro_batch_tokens=1)
    m = Learner(copy.deepcopy(base), cfg).train_step(samples)
    per_token = [
        -s.advantage * lp for (lp, _), s in zip(_alone(base, samples), samples, strict=True)
    ]
    want = _aggregate(per_token, samples, "seq-mean-token-mean")
    assert m["loss"] == pytest.approx(want, rel=1e-5)


# ---------------------------------------------------------------- the sampler/learner gap


def _recomputed(seed: int) -> list[Sample]:
    """Samples whose old log-probs were recomputed by the learner (-1 on policy tokens) and
    whose sampler's were -1.5: weight exp(0.5) = 1.648721 on every policy token."""
    mask = [0, 0, 1, 1, 0, 1, 1, 1]
    return [
        Sample(
            list(range(3 + i, 11 + i)),
            mask,
            proximal_logprobs=[-1.0 * x for x in mask],
            behaviour_logprobs=[-1.5 * x for x in mask],
            advantage=1.0 - i,
            sample_id=i,
        )
        for i in range(3)
    ]


def test_without_recomputed_logprobs_the_mismatch_is_this_steps_policy_against_the_sampler():
    # the proximal policy is then the step's own forward: exp(logp - sampler) per token, the
    # same ratio the clipped loss sees before the update
    m = Learner(tiny_llama(), LearnerConfig(lr=1e-3)).train_step(make_samples(4, seed=39))
    assert m["ratio_max"] > 1.05  # the sampler's log-probs differ from the policy's
    for key in ("mean", "max", "min"):
        assert m[f"mismatch_ratio_{key}"] == pytest.approx(m[f"ratio_{key}"], rel=1e-5)


def test_decoupled_correction_drops_the_tokens_over_the_cap():
    m = Learner(
        tiny_llama(), LearnerConfig(lr=1e-3, off_policy_correction="decoupled", is_cap=1.2)
    ).train_step(_recomputed(40))
    assert m["is_capped_frac"] == 1.0 and m["is_weight_mean"] == 0.0  # tis would keep 1.2
    assert m["loss"] == 0.0


def test_truncated_correction_normalises_over_the_whole_step():
    base = tiny_llama()
    reports = []
    for budget in (100_000, 1):
        cfg = LearnerConfig(
            lr=1e-3, off_policy_correction="tis", is_cap=1.2, micro_batch_tokens=budget
        )
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
