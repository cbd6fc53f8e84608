"""Shared-prefix (tree) packing: same loss, log-probs and gradients as plain packing.

Tolerances from the arithmetic: the model runs in float64, but the chunked log-prob head
(algos.learner.logprobs) computes logits, log-sum-exp and the logit gradient in float32 by design.
Both layouts feed that head the same float64 hidden states up to float64 reordering
(~1e-15 relative), so a float32 value differs by at most a rounding step: one ulp of
|log p| <= 8 (V = 128, log V = 4.85) is 2**-21 ~ 4.8e-7; we allow 4 ulp for the log-probs and
the loss. A gradient is a sum of N per-token float32 terms whose rounding steps are independent,
so its error grows like sqrt(N) * eps32 relative to its norm: with N <= 1024 tokens, 32 * 1.2e-7
~ 3.8e-6, times 4 of slack: GRAD_RTOL = 1.6e-5. A wrong mask, position or missing gradient
path moves these numbers by 1e-3 or more.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from algos.learner.learner import Learner
from algos.learner.learner_config import LearnerConfig
from algos.learner.samples import Sample, pack_samples
from algos.learner.tree import TreeMicroBatch, dense_tree_mask, find_trees, pack_trees
from algos.learner.tree_attention import TreeLayout
from tests.algos.tiny_models import tiny_llama

EPS32 = torch.finfo(torch.float32).eps
LP_ATOL = 4 * 2.0**-21
GRAD_RTOL = 4 * math.sqrt(1024) * EPS32


def group_samples(
    seed: int,
    groups=((40, 4), (24, 3)),
    singles: int = 1,
    vocab: int = 128,
    with_proximal: bool = True,
) -> list[Sample]:
    """``groups``: (prefix length, G) per task; each continuation mixes action (mask 1) and
    observation (mask 0) tokens; sampler log-probs differ from old ones so TIS weights bite.
    Some prefixes end with action tokens (a shared turn), so the loss reaches shared positions."""
    g = torch.Generator().manual_seed(seed)
    system = torch.randint(0, vocab, (6,), generator=g).tolist()  # batch-wide, like tool docs

    def rand(n):
        return torch.randint(0, vocab, (n,), generator=g).tolist()

    out = []
    for task, (p, k) in enumerate(groups):
        prefix = system + rand(p - len(system))
        pmask = [0] * (p - 4) + [0, 1, 1, 1] if task == 0 else [0] * p
        for j in range(k):
            c = int(torch.randint(5, 25, (1,), generator=g))
            cmask = [0 if t % 7 == 3 else 1 for t in range(c)]
            ids, mask = prefix + rand(c), pmask + cmask
            old = [(-4.9 + 0.4 * float(torch.rand(1, generator=g))) * m for m in mask]
            samp = [
                o + 0.05 * float(torch.randn(1, generator=g)) * m
                for o, m in zip(old, mask, strict=True)
            ]
            out.append(
                Sample(
                    ids,
                    mask,
                    behaviour_logprobs=old,
                    advantage=float(torch.randn(1, generator=g)),
                    sample_id=f"t{task}/{j}",
                    proximal_logprobs=samp if with_proximal else None,
                )
            )
    for s in range(singles):
        n = 30
        ids = rand(n)
        mask = [0] * 10 + [1] * (n - 10)
        out.append(
            Sample(
                ids,
                mask,
                behaviour_logprobs=[-4.8 * m for m in mask],
                advantage=0.7,
                sample_id=f"single{s}",
                proximal_logprobs=[-4.7 * m for m in mask] if with_proximal else None,
            )
        )
    return out


# ------------------------------------------------------------------------------ packing


def test_trees_found_from_tokens_not_ids():
    samples = group_samples(0)
    for s in samples:
        s.sample_id = "same-id"  # ids say nothing; tokens decide
    units = find_trees(samples, min_prefix=16)
    groups = sorted(sorted(u.members) for u in units)
    assert groups == [[0, 1, 2, 3], [4, 5, 6], [7]]
    # the batch-wide 6-token system prompt does not merge the two tasks into one shallow tree
    assert sorted(u.prefix for u in units if len(u.members) > 1) == [24, 40]


def test_tree_rows_reproduce_every_sample():
    samples = group_samples(1)
    batches = pack_trees(samples, micro_batch_tokens=120, min_prefix=16)
    seen = sorted(i for mb in batches for i in mb.sample_indices)
    assert seen == list(range(len(samples)))
    for mb in batches:
        assert mb.num_tokens <= 120 or len(mb.sample_indices) == 1
        flat_ids, flat_pos = mb.input_ids.reshape(-1), mb.position_ids.reshape(-1)
        for row, i in enumerate(mb.sample_indices):
            n = len(samples[i])
            idx = mb.gather_index[row, :n]
            assert flat_ids[idx].tolist() == samples[i].input_ids
            assert flat_pos[idx].tolist() == list(range(n))  # positions continue from the prefix
    computed = sum(mb.num_tokens for mb in batches)
    assert computed < sum(len(s) for s in samples)


def test_tree_split_over_budget_and_unrelated_trees_share_a_row():
    samples = group_samples(2, groups=((40, 4), (40, 4)), singles=0)
    one = pack_trees(samples, micro_batch_tokens=10_000, min_prefix=16)
    assert len(one) == 1 and sum(p[3] > p[2] for p in one[0].pieces) == 8  # 2 trees, 8 conts
    small = pack_trees(samples, micro_batch_tokens=90, min_prefix=16)
    assert all(mb.num_tokens <= 90 for mb in small) and len(small) > 2


def test_below_threshold_is_plain_packing():
    samples = group_samples(3)
    plain = pack_samples(samples, 100)
    tree = pack_trees(samples, 100, min_prefix=1000)
    assert not any(isinstance(mb, TreeMicroBatch) for mb in tree)
    for a, b in zip(plain, tree, strict=True):
        assert torch.equal(a.input_ids, b.input_ids) and a.sample_indices == b.sample_indices


# ------------------------------------------------------------------------------ exactness


def run_step(model, samples, *, tree: bool, ref=None, **cfg):
    """(loss, per-sample log-probs before the step, grads, metrics) of one learner step."""
    model = copy.deepcopy(model)
    ref = copy.deepcopy(ref) if ref is not None else None
    learner = Learner(
        model,
        LearnerConfig(lr=1e-3, grad_clip=None, tree_packing=tree, tree_min_prefix=16, **cfg),
        ref_model=ref,
    )
    assert learner.trees == tree
    lps = learner.compute_logprobs(samples)
    metrics = learner.train_step(samples)
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    return metrics["loss"], lps, grads, metrics


def assert_same(a, b, n_tokens: int):
    assert n_tokens <= 1024  # GRAD_RTOL assumes it
    worst_lp = max(
        abs(x - y) for la, lb in zip(a[1], b[1], strict=True) for x, y in zip(la, lb, strict=True)
    )
    assert worst_lp <= LP_ATOL, worst_lp
    assert abs(a[0] - b[0]) <= LP_ATOL * max(1.0, abs(b[0])), (a[0], b[0])
    worst_g = 0.0
    for name, g in b[2].items():
        scale = g.norm().item()
        assert scale > 0, f"{name}: no gradient in the plain step"
        worst_g = max(worst_g, (a[2][name] - g).norm().item() / scale)
    assert worst_g <= GRAD_RTOL, worst_g
    return worst_lp, worst_g


CASES = {
    "pg": {"loss": "pg"},
    "ppo": {"loss": "ppo", "off_policy_correction": "tis"},
    "grpo": {
        "loss": "grpo",
        "agg_mode": "seq-mean-token-mean",
        "off_policy_correction": "tis",
        "kl_coef": 0.05,
    },
    "dapo": {"loss": "dapo", "off_policy_correction": "tis", "entropy_coef": 0.01},
    "gspo": {"loss": "gspo", "agg_mode": "seq-mean-token-mean", "off_policy_correction": "tis"},
}


@pytest.mark.parametrize("name", list(CASES))
def test_tree_step_equals_plain_step(name):
    torch.set_default_dtype(torch.float64)
    try:
        model = tiny_llama(seed=0)
        ref = tiny_llama(seed=1) if CASES[name].get("kl_coef") else None
        samples = group_samples(4)
        n = sum(len(s) for s in samples)
        # 120-token micro-batches: trees split over the budget, unrelated trees share rows
        kw = dict(CASES[name], micro_batch_tokens=120)
        tree = run_step(model, samples, tree=True, ref=ref, **kw)
        plain = run_step(model, samples, tree=False, ref=ref, **kw)
        assert tree[3]["tokens_computed"] < plain[3]["tokens_computed"] == n
        assert tree[3]["tokens_plain"] == n
        assert_same(tree, plain, n)
    finally:
        torch.set_default_dtype(torch.float32)


def test_tree_with_checkpointing_and_float32():
    """float32 end to end (tolerance scaled by the float32 layers: 1e-4 of each gradient's
    norm, as tests/algos/learner/test_learner.py derives) and activation checkpointing, which replays
    the tree layout from the layer's keyword arguments."""
    model = tiny_llama(seed=2)
    samples = group_samples(5)
    kw = {"loss": "dapo", "micro_batch_tokens": 200, "grad_checkpointing": True}
    tree = run_step(model, samples, tree=True, **kw)
    plain = run_step(model, samples, tree=False, **kw)
    for name, g in plain[2].items():
        assert (tree[2][name] - g).norm() <= 1e-4 * g.norm(), name
    assert abs(tree[0] - plain[0]) <= 1e-5


class _EveryTokenHead(Learner):
    """The learner as it was: the head over every token, the loss masking all but its own."""

    def _batch_logprobs(self, model, mb, with_entropy, loss_only=False):
        return super()._batch_logprobs(model, mb, with_entropy, False)


@pytest.mark.parametrize("tree", [True, False])
@pytest.mark.parametrize("name", ["grpo", "dapo"])
def test_the_head_runs_on_loss_tokens_only_with_the_same_step(name, tree, monkeypatch):
    """The train step, the old (recomputed) and the reference log-probs run the vocabulary-sized
    head on the loss tokens only (on an agent's trajectory a tenth of its tokens or less: the
    prompt and observations are masked out): same loss, entropy and gradients as over every
    token, to the rounding of the float32 head (module docstring)."""
    from algos.learner.logprobs import ChunkedTokenLogprobs

    rows: list[int] = []
    real = ChunkedTokenLogprobs.apply
    monkeypatch.setattr(
        ChunkedTokenLogprobs,
        "apply",
        staticmethod(lambda h, *a: rows.append(h.shape[0]) or real(h, *a)),
    )
    torch.set_default_dtype(torch.float64)
    try:
        model, ref = tiny_llama(seed=0), tiny_llama(seed=1)
        samples = group_samples(6)
        n_loss = sum(s.num_loss_tokens for s in samples)
        runs = {}
        for cls in (Learner, _EveryTokenHead):
            net = copy.deepcopy(model)
            learner = cls(
                net,
                LearnerConfig(
                    lr=1e-3,
                    grad_clip=None,
                    tree_packing=tree,
                    tree_min_prefix=16,
                    micro_batch_tokens=120,
                    log_entropy=True,
                    **CASES[name],
                ),
                ref_model=copy.deepcopy(ref),
            )
            rows.clear()
            old = learner.compute_logprobs(samples, loss_only=cls is Learner)
            metrics = learner.train_step(samples)
            grads = {k: p.grad.clone() for k, p in net.named_parameters()}
            runs[cls] = (metrics, old, grads, sum(rows))
        (m, old, grads, head_rows), (m_all, old_all, grads_all, head_rows_all) = runs.values()
        # old, (reference,) step: the loss tokens (a tree's shared ones once)
        passes = 3 if CASES[name].get("kl_coef") else 2
        assert head_rows <= passes * n_loss < head_rows_all
        for s, got, want in zip(samples, old, old_all, strict=True):
            for v, w, mask in zip(got, want, s.loss_mask, strict=True):
                assert v == 0.0 if not mask else abs(v - w) <= LP_ATOL
        for key in ("loss", "entropy", "kl"):
            if key in m_all:
                assert abs(m[key] - m_all[key]) <= LP_ATOL * max(1.0, abs(m_all[key])), key
        for k, g in grads_all.items():
            assert (grads[k] - g).norm() <= GRAD_RTOL * g.norm(), k
    finally:
        torch.set_default_dtype(torch.float32)


# ------------------------------------------------------------------------------ kernels


def test_flex_mask_is_the_tree_mask():
    """The CUDA kernel's mask_mod, expanded, is exactly the dense tree mask."""
    from torch.nn.attention.flex_attention import create_mask

    mb = pack_trees(group_samples(6, singles=2), 10_000, min_prefix=16)[0]
    length = mb.input_ids.shape[1]
    layout = TreeLayout(mb.pieces, length, "flex")
    got = create_mask(
        layout.mask_mod(torch.device("cpu")), None, None, length, length, device="cpu"
    )[0, 0]
    assert torch.equal(got, dense_tree_mask(mb.pieces, length))
    assert layout.block_mask(torch.device("cpu")) is not None


@pytest.mark.parametrize("kernel", ["dense", pytest.param("flex", marks=pytest.mark.slow)])
def test_kernels_agree(kernel):
    """The default CPU kernel (pieces) against the dense mask and FlexAttention (eager on CPU:
    the same block mask the CUDA path compiles)."""
    samples = group_samples(6, singles=1)
    mb = pack_trees(samples, 10_000, min_prefix=16)[0]
    torch.manual_seed(0)
    length = mb.input_ids.shape[1]
    q = torch.randn(1, 4, length, 8, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 2, length, 8, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 2, length, 8, dtype=torch.float64, requires_grad=True)
    mod = torch.nn.Module()
    mod.num_key_value_groups, mod.is_causal = 2, True
    backward = kernel != "flex"  # torch's FlexAttention has no CPU backward (CUDA test below)
    outs = []
    for name in ("pieces", kernel):
        args = (q, k, v) if backward else (q.detach(), k.detach(), v.detach())
        out, _ = TreeLayout(mb.pieces, length, name).attend(mod, *args, scaling=8**-0.5)
        grads = (
            torch.autograd.grad(
                (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum(),
                (q, k, v),
            )
            if backward
            else ()
        )
        outs.append((out, grads))
    torch.testing.assert_close(outs[0][0], outs[1][0], atol=1e-12, rtol=1e-12)
    for a, b in zip(outs[0][1], outs[1][1], strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)


@pytest.mark.gpu
def test_flex_kernel_on_cuda_matches_plain_packing():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    model = tiny_llama(seed=3).cuda()
    samples = group_samples(7)
    kw = {"loss": "dapo", "micro_batch_tokens": 200}
    tree = run_step(model, samples, tree=True, **kw)
    plain = run_step(model, samples, tree=False, **kw)
    for name, g in plain[2].items():
        assert (tree[2][name] - g).norm() <= 1e-4 * g.norm(), name


def test_config_switch_and_metrics_row():
    """DAPO's config turns trees on by default, ``tree_packing: false`` turns them off, and
    the iteration's metrics row keeps tokens_computed next to tokens_plain."""
    from algos.dapo import DAPOConfig
    from algos.loop.metrics import mean_metrics

    assert DAPOConfig().learner_config().tree_packing is True
    # only packed_sdpa reads the tree layout: an eager model keeps plain packing
    assert not Learner(tiny_llama(attn="eager"), LearnerConfig()).trees
    assert DAPOConfig(tree_packing=False).learner_config().tree_packing is False
    row = mean_metrics([{"loss": 0.1, "tokens_computed": 300.0, "tokens_plain": 900.0}])
    assert (row["tokens_computed"], row["tokens_plain"]) == (300.0, 900.0)
