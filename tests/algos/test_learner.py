"""The learner on a tiny random Llama (built from a config, nothing downloaded)."""

from __future__ import annotations

import copy
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from tiny_models import tiny_llama
from transformers import LlamaForCausalLM

from algos.data import Sample, pack_samples, pad_samples
from algos.learner import Learner, LearnerConfig, LRSchedule
from algos.logprobs import model_token_logprobs

REPO = Path(__file__).resolve().parents[2]


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
        out.append(Sample(ids, mask, old_logprobs=old, advantage=adv, sample_id=i))
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
    for name, cfg in {"mask": {"packed_attention": False}, "segments": {},
                      "segments+ckpt": {"grad_checkpointing": True}}.items():
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
        torch.testing.assert_close(switched(ids, attention_mask=pad).logits,
                                   plain(ids, attention_mask=pad).logits)


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
    per_token = [Sample(s.input_ids, s.loss_mask, s.old_logprobs, [s.advantage] * len(s))
                 for s in samples]
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
    with pytest.raises(ValueError, match="old_logprobs"):
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
    want = [0.5, 1.0, 1.0, 0.5 * (1 + math.cos(math.pi / 4)), 0.5, 0.5 * (1 + math.cos(3 * math.pi / 4)), 0.0]
    assert [round(sched(k), 6) for k in range(7)] == [round(w, 6) for w in want]
    learner = Learner(tiny_llama(), LearnerConfig(lr=1e-2, warmup_steps=2, schedule="cosine",
                                                  total_steps=6))
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
    return LearnerConfig(lr=1e-3, micro_batch_tokens=120, warmup_steps=1, schedule="cosine",
                         total_steps=10)


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
    sys.path.insert(0, {tests!r})
    torch.set_num_threads(1)
    from test_learner import tiny_llama, make_samples, _cfg
    from algos.learner import Learner
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


def test_killed_process_resumes_from_last_complete_checkpoint(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(tests=str(Path(__file__).parent)))
    ckpt = tmp_path / "ckpt"

    def start(mode: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, str(script), mode, str(ckpt),
                                 str(tmp_path / f"{mode}.pt")], cwd=REPO, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

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
