"""Chunked log-probs vs the naive [T, vocab] computation, forward and backward."""

from __future__ import annotations

import pytest
import torch

from algos.learner.logprobs import (
    default_chunk_size,
    hidden_states,
    lm_head,
    model_token_logprobs,
    naive_token_logprobs,
    token_logprobs,
)
from tests.algos.tiny_models import tiny_llama


def _inputs(n=37, h=16, v=50, dtype=torch.float64, bias=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    hid = torch.randn(n, h, generator=g, dtype=dtype).requires_grad_(True)
    w = (torch.randn(v, h, generator=g, dtype=dtype) * 0.5).requires_grad_(True)
    b = (torch.randn(v, generator=g, dtype=dtype) * 0.1).requires_grad_(True) if bias else None
    y = torch.randint(0, v, (n,), generator=g)
    return hid, w, b, y


def _grads(fn, hid, w, b, y, gl, ge, **kw):
    for t in (hid, w, b):
        if t is not None:
            t.grad = None
    lp, ent = fn(hid, w, y, bias=b, return_entropy=True, **kw)
    ((lp * gl).sum() + (ent * ge).sum()).backward()
    return lp.detach(), ent.detach(), [t.grad.clone() for t in (hid, w, b) if t is not None]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("chunk", [1, 8, 64])
def test_chunked_matches_naive_float64(temperature, chunk):
    hid, w, b, y = _inputs()
    g = torch.Generator().manual_seed(1)
    gl, ge = torch.randn(37, generator=g), torch.randn(37, generator=g)
    ref = _grads(naive_token_logprobs, hid, w, b, y, gl, ge, temperature=temperature)
    got = _grads(token_logprobs, hid, w, b, y, gl, ge, temperature=temperature, chunk_size=chunk)
    # float32 softmax inside both paths; inputs/matmuls float64
    for a, r in zip([got[0], got[1], *got[2]], [ref[0], ref[1], *ref[2]], strict=True):
        torch.testing.assert_close(a.double(), r.double(), atol=1e-5, rtol=1e-5)


def test_chunked_matches_naive_float32_no_bias_logp_only():
    hid, w, _, y = _inputs(n=100, h=32, v=300, dtype=torch.float32, bias=False)
    lp = token_logprobs(hid, w, y, chunk_size=7)
    lp.sum().backward()
    gh, gw = hid.grad.clone(), w.grad.clone()
    hid.grad = w.grad = None
    ref = naive_token_logprobs(hid, w, y)
    ref.sum().backward()
    torch.testing.assert_close(lp, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(gh, hid.grad, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(gw, w.grad, atol=1e-5, rtol=1e-4)


def test_batched_shape_and_bad_input():
    hid, w, b, y = _inputs(n=12)
    lp = token_logprobs(hid.view(3, 4, -1), w, y.view(3, 4), bias=b)
    assert lp.shape == (3, 4)
    torch.testing.assert_close(lp.reshape(-1), naive_token_logprobs(hid, w, y, bias=b).float())
    with pytest.raises(ValueError, match="targets"):
        token_logprobs(hid, w, y[:5])
    with pytest.raises(ValueError, match="temperature"):
        token_logprobs(hid, w, y, temperature=0.0)
    assert default_chunk_size(49152) == 682 and default_chunk_size(10) == 4096


@pytest.mark.parametrize("tied", [False, True])
def test_model_logprobs_match_full_forward_and_grads(tied):
    model = tiny_llama(tied=tied)
    ids = torch.randint(0, 128, (2, 11), generator=torch.Generator().manual_seed(3))
    weight, bias = lm_head(model)
    assert bias is None
    assert (weight is model.get_input_embeddings().weight) == tied

    lp = model_token_logprobs(model, ids, chunk_size=5)
    assert lp.shape == (2, 11) and torch.all(lp[:, 0] == 0)
    lp.sum().backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()

    logits = model(ids).logits[:, :-1].float()
    ref = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    ref.sum().backward()
    torch.testing.assert_close(lp[:, 1:], ref, atol=1e-5, rtol=1e-5)
    for n, p in model.named_parameters():
        torch.testing.assert_close(got[n], p.grad, atol=1e-5, rtol=1e-4, msg=n)


def test_hidden_states_fallback_without_base_model_matches():
    model = tiny_llama()
    ids = torch.randint(0, 128, (1, 9))

    class NoBase(torch.nn.Module):  # a causal LM exposing only the HF call interface
        config = model.config
        base_model = property(lambda self: self)

        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, **kw):
            return self.inner(**kw)

        def get_output_embeddings(self):
            return self.inner.get_output_embeddings()

    torch.testing.assert_close(hidden_states(NoBase(), ids), hidden_states(model, ids))


def test_lm_head_refuses_logit_postprocessing():
    model = tiny_llama()
    model.config.final_logit_softcapping = 30.0
    with pytest.raises(NotImplementedError, match="final_logit_softcapping"):
        lm_head(model)
