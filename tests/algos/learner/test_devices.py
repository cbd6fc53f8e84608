"""Devices are decided where tensors are used, not when objects are built; and the CUDA-only
fast paths (bf16 head, bf16 compute copy, varlen attention) checked on CPU where they can be.

CI has no GPU, so the move a learner makes (CPU -> CUDA) is made observable on CPU: the module is
moved to the ``meta`` device after the sampler was built, and the test records the device of
every tensor the sampler hands to the module and of every random generator it makes. A sampler
that remembered its build-time device would feed CPU tensors to a ``meta`` module, which is
exactly the "index is on cpu, different from other tensors on cuda:0" failure on a GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import agents.models.transformers as transformers_backend
from agents.protocols import Conversation, SamplingParams
from algos.dapo import DAPOConfig
from algos.distributed import learner as dist_learner
from algos.distributed.fsdp import DistContext
from algos.loop.trainer import Trainer
from tests.algos import toy_run

META = torch.device("meta")


class _Reached(Exception):
    """Raised by the spy once the module is called: what was recorded is what matters."""


def spy_generation(monkeypatch: pytest.MonkeyPatch, module: torch.nn.Module) -> dict[str, list]:
    """Record the devices of generators made and of tensors passed to ``module``'s forward."""
    seen: dict[str, list] = {"generators": [], "inputs": []}

    def make_generator(device, seed):
        seen["generators"].append(torch.device(device))
        return torch.Generator().manual_seed(seed)  # meta has no generator; never sampled from

    def pre_hook(_module, args, kwargs):
        tensors = [*args, *kwargs.values()]
        seen["inputs"] += [t.device for t in tensors if isinstance(t, torch.Tensor)]
        raise _Reached

    monkeypatch.setattr(transformers_backend, "make_generator", make_generator)
    module.register_forward_pre_hook(pre_hook, with_kwargs=True)
    return seen


def generate_once(sampler) -> None:
    prompt = Conversation(token_ids=sampler.tokenizer.encode("hello there"))
    with pytest.raises(_Reached):
        sampler.generate(prompt, SamplingParams(max_new_tokens=2, seed=3))


def toy_cfg(tmp_path: Path, **kw) -> DAPOConfig:
    return toy_run.toy_cfg(
        tmp_path,
        **{
            **dict(
                group_size=2, problems_per_iteration=2, batch_size=2, iterations=1, concurrency=2
            ),
            **kw,
        },
    )


def test_sampler_follows_its_module_when_moved_after_it_was_built(tmp_path: Path, monkeypatch):
    from agents.models.smollm2 import tiny_random_model

    sampler = transformers_backend.TransformersModel(tiny_random_model(tmp_path / "m"), seed=0)
    try:
        assert sampler.device == torch.device("cpu")
        sampler.model.to(META)  # what make_learner does with CUDA, after the sampler exists
        assert sampler.device == META
        seen = spy_generation(monkeypatch, sampler.model)
        generate_once(sampler)
        assert seen["generators"] == [META]
        assert seen["inputs"] and set(seen["inputs"]) == {META}
    finally:
        sampler.close()


def test_trainer_sampler_and_reference_follow_the_learners_device(tmp_path: Path, monkeypatch):
    # The entry points build the policy (and its sampler) first, then the learner, which moves
    # the module to its device: make that device `meta` and check everything followed it.
    monkeypatch.setattr(dist_learner, "setup_distributed", lambda cp=1: DistContext(device=META))
    with pytest.warns(UserWarning, match="kl_coef"):
        cfg = toy_cfg(tmp_path, kl_coef=0.1)
    trainer = Trainer(cfg, "dapo")
    try:
        assert trainer.policy.shares_weights
        assert {p.device for p in trainer.learner.model.parameters()} == {META}
        assert {p.device for p in trainer.learner.ref_model.parameters()} == {META}
        assert trainer.policy.engine.device == META
        seen = spy_generation(monkeypatch, trainer.policy.model)
        generate_once(trainer.policy.engine)
        assert seen["generators"] == [META]
        assert set(seen["inputs"]) == {META}
    finally:
        trainer.close()


def test_engine_copy_follows_the_training_device(tmp_path: Path, monkeypatch):
    # engine_dtype bfloat16: the engine holds its own copy, put on the training device.
    import algos.policy as policy_mod

    monkeypatch.setattr(policy_mod, "training_device", lambda: META)
    policy = policy_mod.build_policy(toy_cfg(tmp_path, engine_dtype="bfloat16"), tmp_path / "run")
    try:
        assert not policy.shares_weights
        engine = policy.engine.model
        assert {(p.device, p.dtype) for p in engine.parameters()} == {(META, torch.bfloat16)}
        seen = spy_generation(monkeypatch, engine)
        generate_once(policy.engine)
        assert seen["generators"] == [META] and set(seen["inputs"]) == {META}
    finally:
        policy.close()


# ------------------------------------------------------------------------------------------
# The CUDA-only fast paths, checked on CPU where their arithmetic or plumbing allows
# ------------------------------------------------------------------------------------------

BF16_U = 2.0**-8  # unit roundoff of bfloat16 (8 significant bits)
F32_U = 2.0**-24


def test_bf16_head_logprobs_and_entropy_within_the_bf16_bound():
    from algos.learner.logprobs import naive_token_logprobs, token_logprobs

    gen = torch.Generator().manual_seed(0)
    n, hidden, vocab = 64, 96, 500
    h = torch.randn(n, hidden, generator=gen, dtype=torch.float64)
    w = torch.randn(vocab, hidden, generator=gen, dtype=torch.float64) * 0.3  # logits ~ 10
    y = torch.randint(0, vocab, (n,), generator=gen)
    ref_lp, ref_ent = naive_token_logprobs(h, w, y, return_entropy=True)
    lp, ent = token_logprobs(
        h.float(), w.float(), y, return_entropy=True, chunk_size=16, compute_dtype=torch.bfloat16
    )
    assert lp.dtype == ent.dtype == torch.float32
    # Each logit z_j = sum_i h_i w_ji: rounding h and w to bf16 moves each product by at most
    # 2u |h_i w_ji|, the bf16 product is rounded once more (u |z_j|, CPU; CUDA writes float32)
    # and float32 accumulates over H terms. So |dz_j| <= d = (3u + H u32) * S_t, S_t the row's
    # largest sum_i |h_i w_ji|: "bf16's unit roundoff times the logit scale".
    scale = (h.abs() @ w.abs().t()).max(dim=1).values
    d = (3 * BF16_U + hidden * F32_U) * scale
    # log p_y = z_y - lse(z): both move by at most d.
    assert ((lp.double() - ref_lp).abs() <= 2 * d).all()
    # dH/dz_j = -p_j (log p_j + H): to first order |dH| <= d sum_j p_j |log p_j + H|; x2 covers
    # the second-order terms at these magnitudes.
    logp = torch.log_softmax(h @ w.t(), -1)
    sens = (logp.exp() * (logp + ref_ent[:, None]).abs()).sum(-1)
    assert ((ent.double() - ref_ent).abs() <= 2 * d * sens).all()
    # and bf16 did change something (the test would be vacuous if the cast were skipped)
    plain = token_logprobs(h.float(), w.float(), y)
    assert not torch.equal(plain, lp)


def test_bf16_head_gradients_land_on_float32_parameters():
    from algos.learner.logprobs import token_logprobs

    gen = torch.Generator().manual_seed(1)
    h = torch.randn(32, 48, generator=gen).bfloat16().requires_grad_()
    w = (torch.randn(200, 48, generator=gen) * 0.3).requires_grad_()
    b = torch.zeros(200, requires_grad=True)
    y = torch.randint(0, 200, (32,), generator=gen)
    lp, ent = token_logprobs(
        h, w, y, bias=b, return_entropy=True, chunk_size=8, compute_dtype=torch.bfloat16
    )
    (lp.sum() + 0.1 * ent.sum()).backward()
    assert h.grad.dtype == torch.bfloat16 and w.grad.dtype == b.grad.dtype == torch.float32
    ref_w = w.detach().double().requires_grad_()
    ref_b = b.detach().double().requires_grad_()
    ref_h = h.detach().double().requires_grad_()
    from algos.learner.logprobs import naive_token_logprobs

    rlp, rent = naive_token_logprobs(ref_h, ref_w, y, bias=ref_b, return_entropy=True)
    (rlp.sum() + 0.1 * rent.sum()).backward()
    # bf16 GEMMs: a few units of bf16 roundoff relative to the gradient's scale
    for got, ref in ((w.grad, ref_w.grad), (b.grad, ref_b.grad), (h.grad, ref_h.grad)):
        err = (got.double() - ref).abs().max() / ref.abs().max()
        assert err < 16 * BF16_U, err


def _reference_varlen(release: str):
    """A CPU stand-in for torch's CUDA varlen kernel with the signature of a torch release
    (first: ``is_causal``, no scale, no GQA; window: ``scale``/``window_size``; gqa: +
    ``enable_gqa``): causal SDPA per sequence, so the test checks the plumbing (layouts, GQA,
    boundaries, spellings), not the kernel."""
    calls = []

    def run(
        q,
        k,
        v,
        cu_q,
        cu_k,
        max_q,
        max_k,
        *,
        scale=None,
        window_size=(-1, -1),
        enable_gqa=False,
        is_causal=False,
    ):
        calls.append({"max_q": max_q, "gqa": enable_gqa, "heads": (q.shape[1], k.shape[1])})
        assert (window_size == (-1, 0)) != is_causal and torch.equal(cu_q, cu_k)
        assert k.shape[1] == q.shape[1] or enable_gqa
        bounds = cu_q.tolist()
        assert bounds[-1] == q.shape[0]  # every position covered
        outs = []
        for a, z in zip(bounds[:-1], bounds[1:], strict=True):
            assert z - a <= max_q
            qs, ks, vs = (x[a:z].transpose(0, 1) for x in (q, k, v))
            outs.append(
                torch.nn.functional.scaled_dot_product_attention(
                    qs, ks, vs, is_causal=True, scale=scale, enable_gqa=enable_gqa
                ).transpose(0, 1)
            )
        return torch.cat(outs)

    def first(q, k, v, cu_q, cu_k, max_q, max_k, is_causal=False, return_aux=None):
        return run(q, k, v, cu_q, cu_k, max_q, max_k, is_causal=is_causal)

    def window(
        q, k, v, cu_q, cu_k, max_q, max_k, *, return_aux=None, scale=None, window_size=(-1, -1)
    ):
        return run(q, k, v, cu_q, cu_k, max_q, max_k, scale=scale, window_size=window_size)

    return {"first": first, "window": window, "gqa": run}[release], calls


@pytest.mark.parametrize("release", ["first", "window", "gqa"])
def test_varlen_branch_matches_per_sequence_attention(monkeypatch, release):
    from transformers import LlamaConfig, LlamaForCausalLM

    from algos.learner import attention

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        attn_implementation="sdpa",
    )
    model = LlamaForCausalLM(config).eval()
    assert attention.use_packed_attention(model)
    lengths = [5, 9, 3]
    length = sum(lengths) + 4  # trailing padding
    seg = torch.full((1, length), -1)
    pos = torch.zeros((1, length), dtype=torch.long)
    start = 0
    for i, n in enumerate(lengths):
        seg[0, start : start + n] = i
        pos[0, start : start + n] = torch.arange(n)
        start += n
    ids = torch.randint(0, 64, (1, length))

    def hidden(kwargs):
        with torch.no_grad(), attention.packed_forward():
            return model.model(input_ids=ids, position_ids=pos, **kwargs).last_hidden_state

    expected = hidden(attention.packed_kwargs(seg))  # the CPU per-sequence path
    kernel, calls = _reference_varlen(release)
    monkeypatch.setattr(
        attention, "varlen_kernel", lambda q, dropout, max_length: kernel if max_length else None
    )
    got = hidden(attention.packed_kwargs(seg, cover_padding=True))
    assert len(calls) == 2  # one kernel call per layer, the whole row at once
    gqa = release == "gqa"
    assert calls[0]["max_q"] == 9 and calls[0]["gqa"] == gqa
    assert calls[0]["heads"] == ((4, 2) if gqa else (4, 4))
    real = sum(lengths)
    torch.testing.assert_close(got[0, :real], expected[0, :real], rtol=1e-5, atol=1e-5)


def test_packed_kwargs_give_device_bounds_and_a_host_max_length():
    from algos.learner.attention import packed_kwargs

    seg = torch.tensor([[0, 0, 0, 1, 1, -1, -1]])
    kw = packed_kwargs(seg)
    assert kw["cu_seq_lens_q"].tolist() == [0, 3, 5] and kw["max_length_q"] == 3
    assert isinstance(kw["max_length_q"], int) and kw["cu_seq_lens_q"].dtype == torch.int32
    covered = packed_kwargs(seg, cover_padding=True)
    assert covered["cu_seq_lens_q"].tolist() == [0, 3, 5, 7] and covered["max_length_q"] == 3


def test_varlen_kernel_is_never_chosen_on_cpu():
    from algos.learner.attention import varlen_kernel

    q = torch.zeros(1, 2, 4, 8, dtype=torch.bfloat16)
    assert varlen_kernel(q, 0.0, 4) is None


def test_cpu_learner_keeps_the_plain_optimizer():
    from transformers import LlamaConfig, LlamaForCausalLM

    from algos.learner.learner import Learner
    from algos.learner.learner_config import LearnerConfig

    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=32,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
        )
    )
    learner = Learner(model, LearnerConfig(bf16=True))
    assert not learner.optimizer.defaults.get("fused")  # fused AdamW only on CUDA


@pytest.mark.parametrize("tied", [False, True])
def test_bf16_compute_copy_trains_float32_master_weights(tied):
    """The CUDA default (forced here on CPU): forward/backward on a bf16 copy, float32 master
    weights and gradients. Its gradients must be as close to the float32 ones as autocast's."""
    import copy as copy_mod

    from transformers import LlamaConfig, LlamaForCausalLM

    from algos.learner.learner import Learner
    from algos.learner.learner_config import LearnerConfig
    from algos.learner.samples import Sample

    config = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
        tie_word_embeddings=tied,
    )
    torch.manual_seed(0)
    base = LlamaForCausalLM(config)
    gen = torch.Generator().manual_seed(0)
    samples = []
    for i in range(6):
        n = int(torch.randint(12, 40, (1,), generator=gen))
        mask = [0] * (n // 3) + [1] * (n - n // 3)
        samples.append(
            Sample(
                torch.randint(0, 128, (n,), generator=gen).tolist(),
                mask,
                behaviour_logprobs=[-4.8 * m for m in mask],
                advantage=float(torch.randn(1, generator=gen)),
                sample_id=i,
            )
        )
    models, learners = {}, {}
    for mode in ("fp32", "autocast", "copy"):
        models[mode] = copy_mod.deepcopy(base)
        learners[mode] = Learner(
            models[mode],
            LearnerConfig(
                lr=1e-3,
                bf16=mode != "fp32",
                bf16_compute_copy=mode == "copy",
                micro_batch_tokens=64,
                grad_checkpointing=True,
            ),
        )
        learners[mode].train_step(samples)
    compute = learners["copy"].compute
    assert learners["autocast"].compute is None and learners["fp32"].compute is None
    assert {p.dtype for p in models["copy"].parameters()} == {torch.float32}
    assert {p.dtype for p in compute.module.parameters()} == {torch.bfloat16}
    assert {b.dtype for b in compute.module.buffers()} <= {torch.float32}  # rope stays fp32
    if tied:
        assert compute.module.lm_head.weight is compute.module.model.embed_tokens.weight

    def worst(mode):  # the learner leaves the last step's gradients in .grad
        return max(
            float((a.grad - b.grad).norm() / a.grad.norm())
            for a, b in zip(models["fp32"].parameters(), models[mode].parameters(), strict=True)
        )

    assert worst("copy") < 8 * BF16_U and worst("copy") < 4 * worst("autocast")
    compute.load_master()  # the next step starts from the updated master weights
    for master, low in compute.pairs:
        assert torch.equal(low, master.detach().to(torch.bfloat16))
