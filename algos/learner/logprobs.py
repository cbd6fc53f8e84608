"""Token log-probs (and entropy) of chosen tokens without a ``[T, vocab]`` tensor.

For a sequence of T positions the LM head gives logits ``z = (h W^T + b) / tau`` of shape
``[T, V]``; we only need ``log softmax(z)[t, y_t]`` (and optionally the entropy). The naive path
materialises ``[T, V]`` float tensors several times over (logits, log-softmax, their grads):
about 9.6 GB at T = 16k, V = 49k. :class:`ChunkedTokenLogprobs` walks the positions in chunks,
keeps only the log-sum-exp ``[T]`` (and the entropy ``[T]``) from the forward pass, and
recomputes each chunk's logits in backward, so peak memory is one chunk's ``[C, V]`` plus the
head's gradient, flat in T. Gradients are exact (same math as autograd's) w.r.t. the hidden
states, the head weight and the optional bias.

Gradient formulas per position (p = softmax(z), H = entropy, g = upstream grads):
``d logp_y / dz_j = [j == y] - p_j``;  ``dH / dz_j = -p_j (log p_j + H)``.

Also: helpers to get the final hidden states and head of any Hugging Face causal LM, and
:func:`model_token_logprobs`, the per-token log-probs of a (packed) batch.
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor, nn

# Target elements of one chunk's [C, V] float32 logits: 2**25 floats = 128 MiB. Two such
# buffers are alive at once in backward, so the fixed overhead is ~256-400 MiB at any T.
_CHUNK_ELEMENTS = 2**25


def default_chunk_size(vocab_size: int) -> int:
    """Rows per chunk so one ``[C, V]`` float32 chunk is about 128 MiB (64..4096 rows)."""
    return int(min(4096, max(64, _CHUNK_ELEMENTS // max(1, vocab_size))))


_LOW_PRECISION = (torch.bfloat16, torch.float16)


def _mm_f32(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b`` as float32. Low-precision inputs: on CUDA the GEMM writes float32 directly
    (``out_dtype``, no rounding of the product); elsewhere the product is rounded to the input
    dtype, then widened."""
    if a.is_cuda and a.dtype in _LOW_PRECISION:
        try:
            return torch.mm(a, b, out_dtype=torch.float32)
        except (TypeError, RuntimeError):  # a torch without out_dtype for mm
            pass
    return (a @ b).float()


def _chunk_logits(h: Tensor, weight: Tensor, bias: Tensor | None, inv_temp: float) -> Tensor:
    """float32 logits of one chunk, divided by the temperature."""
    if h.dtype in _LOW_PRECISION:  # bf16 GEMM, float32 logits
        z = _mm_f32(h, weight.t())
        if bias is not None:
            z += bias.float()
    else:
        z = h @ weight.t() if bias is None else torch.addmm(bias, h, weight.t())
        z = z.float()
    if inv_temp != 1.0:
        z.mul_(inv_temp)
    return z


class ChunkedTokenLogprobs(torch.autograd.Function):
    """``(logp [N], entropy [N] or empty)`` of ``targets`` under ``softmax((h W^T + b) / tau)``.

    Inputs: ``hidden [N, H]``, ``weight [V, H]``, ``bias [V] | None``, ``targets [N]`` (long),
    ``temperature``, ``chunk_size``, ``with_entropy``, ``compute_dtype``: None (GEMMs in the
    weight's dtype) or a low-precision dtype that ``hidden`` is already in and the head is cast
    to once per call (bf16 GEMMs; logits, softmax and head gradients stay float32 and the
    gradients come back in the parameters' own dtypes). Saves only the inputs, the log-sum-exp
    and the entropy ([N] each) for backward.
    """

    @staticmethod
    def forward(
        ctx,
        hidden,
        weight,
        bias,
        targets,
        temperature,
        chunk_size,
        with_entropy,
        compute_dtype=None,
    ):
        ctx.compute_dtype = compute_dtype
        params = (weight, bias)  # saved as given: the cast is redone in backward, not kept
        weight, bias = _cast_head(weight, bias, compute_dtype)
        n = hidden.shape[0]
        inv_temp = 1.0 / float(temperature)
        lse = torch.empty(n, dtype=torch.float32, device=hidden.device)
        logp = torch.empty_like(lse)
        ent = torch.empty(n if with_entropy else 0, dtype=torch.float32, device=hidden.device)
        for s in range(0, n, chunk_size):
            e = min(n, s + chunk_size)
            z = _chunk_logits(hidden[s:e], weight, bias, inv_temp)
            lse_c = torch.logsumexp(z, dim=-1)
            lse[s:e] = lse_c
            logp[s:e] = z.gather(1, targets[s:e, None]).squeeze(1) - lse_c
            if with_entropy:
                # H = lse - sum_j p_j z_j; reuse z's buffer for p once z is no longer needed
                p = torch.sub(z, lse_c[:, None]).exp_()
                ent[s:e] = lse_c - torch.linalg.vecdot(p, z)
                del p
            del z
        ctx.save_for_backward(hidden, *params, targets, lse, ent)
        ctx.inv_temp = inv_temp
        ctx.chunk_size = chunk_size
        ctx.with_entropy = with_entropy
        if not with_entropy:
            ctx.mark_non_differentiable(ent)
        return logp, ent

    @staticmethod
    def backward(ctx, grad_logp, grad_ent):
        hidden, weight_param, bias_param, targets, lse, ent = ctx.saved_tensors
        weight, bias = _cast_head(weight_param, bias_param, ctx.compute_dtype)
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        n = hidden.shape[0]
        inv_temp = ctx.inv_temp
        use_ent = ctx.with_entropy and grad_ent is not None
        grad_h = (
            torch.empty(hidden.shape, dtype=hidden.dtype, device=hidden.device) if need_h else None
        )
        # accumulate head grads in float32 whatever the parameter dtype
        grad_w = (
            torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        )
        grad_b = (
            torch.zeros(bias.shape, dtype=torch.float32, device=bias.device)
            if need_b and bias is not None
            else None
        )
        if grad_logp is None:
            grad_logp = torch.zeros(n, dtype=torch.float32, device=hidden.device)
        for s in range(0, n, ctx.chunk_size):
            e = min(n, s + ctx.chunk_size)
            g_lp = grad_logp[s:e].float()
            z = _chunk_logits(hidden[s:e], weight, bias, inv_temp)
            logp_all = z.sub_(lse[s:e, None])  # in place: z is now log p
            if use_ent:
                # dz = -p * (g_lp + g_H (log p + H)) + g_lp [j == y]
                coef = torch.add(logp_all, ent[s:e, None]).mul_(grad_ent[s:e, None].float())
                coef.add_(g_lp[:, None])
                g = logp_all.exp_().mul_(coef).neg_()
                del coef
            else:
                g = logp_all.exp_().mul_(-g_lp[:, None])
            rows = torch.arange(e - s, device=g.device)
            g[rows, targets[s:e]] += g_lp
            if inv_temp != 1.0:
                g.mul_(inv_temp)  # chain rule through z = raw / tau
            g_in = g.to(hidden.dtype)
            del g
            if grad_h is not None:  # need_h
                torch.mm(g_in, weight, out=grad_h[s:e])
            if grad_w is not None:  # need_w
                if grad_w.dtype == g_in.dtype:
                    grad_w.addmm_(g_in.t(), hidden[s:e])
                else:
                    grad_w += _mm_f32(g_in.t(), hidden[s:e])
            if grad_b is not None:
                grad_b += g_in.float().sum(0)
            del g_in
        if grad_w is not None:
            grad_w = grad_w.to(weight_param.dtype)
        if grad_b is not None:
            grad_b = grad_b.to(bias_param.dtype)
        return grad_h, grad_w, grad_b, None, None, None, None, None


def _cast_head(
    weight: Tensor, bias: Tensor | None, dtype: torch.dtype | None
) -> tuple[Tensor, Tensor | None]:
    if dtype is None:
        return weight, bias
    return weight.to(dtype), (bias.to(dtype) if bias is not None else None)


def token_logprobs(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    *,
    bias: Tensor | None = None,
    temperature: float = 1.0,
    chunk_size: int | None = None,
    return_entropy: bool = False,
    compute_dtype: torch.dtype | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """Log-probs (float32) of ``targets`` under ``softmax((hidden @ weight.T + bias) / temperature)``.

    Shapes: ``hidden [..., H]``, ``weight [V, H]``, ``bias [V]``, ``targets [...]`` -> ``[...]``
    (and the entropy ``[...]`` with ``return_entropy``). The temperature must match the one the
    sampler's log-probs were taken at (vLLM returns raw, tau = 1, log-probs by default).
    ``compute_dtype`` (bfloat16 or float16): the head's GEMMs in that dtype, softmax and
    accumulation in float32; default: the weight's dtype.
    """
    if compute_dtype is not None and compute_dtype not in _LOW_PRECISION:
        raise ValueError(
            f"compute_dtype must be None, torch.bfloat16 or torch.float16; got {compute_dtype}"
        )
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0; got {temperature}")
    if hidden.shape[:-1] != targets.shape:
        raise ValueError(
            f"hidden {tuple(hidden.shape)} and targets {tuple(targets.shape)} disagree: need "
            "hidden [..., H] and targets [...]"
        )
    if hidden.shape[-1] != weight.shape[1]:
        raise ValueError(f"hidden size {hidden.shape[-1]} != head weight {tuple(weight.shape)}")
    shape = targets.shape
    h = hidden.reshape(-1, hidden.shape[-1])
    y = targets.reshape(-1).long()
    if compute_dtype == weight.dtype:
        compute_dtype = None  # already low precision (e.g. FSDP2 mixed precision)
    want = compute_dtype or weight.dtype
    if h.dtype != want:
        h = h.to(want)
    chunk = chunk_size or default_chunk_size(weight.shape[0])
    logp, ent = ChunkedTokenLogprobs.apply(
        h, weight, bias, y, temperature, chunk, return_entropy, compute_dtype
    )
    if return_entropy:
        return logp.view(shape), ent.view(shape)
    return logp.view(shape)


def naive_token_logprobs(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    *,
    bias: Tensor | None = None,
    temperature: float = 1.0,
    return_entropy: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Reference: the same quantity through a full ``[..., V]`` logits tensor (tests, benchmarks)."""
    logits = nn.functional.linear(hidden.to(weight.dtype), weight, bias).float() / temperature
    logsm = torch.log_softmax(logits, dim=-1)
    logp = logsm.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)
    if return_entropy:
        return logp, -(logsm.exp() * logsm).sum(-1)
    return logp


# --------------------------------------------------------------------------------------------
# Hugging Face causal LMs
# --------------------------------------------------------------------------------------------

_UNSUPPORTED_HEAD_OPTIONS = ("final_logit_softcapping", "logit_scale", "output_multiplier_scale")


def lm_head(model: nn.Module) -> tuple[Tensor, Tensor | None]:
    """``(weight [V, H], bias [V] | None)`` of a HF causal LM's output layer.

    With tied embeddings this is the input embedding Parameter itself, so gradients reach it
    through both uses. Models that transform logits after the head (soft-capping, a logit
    scale) are refused rather than silently given wrong log-probs.
    """
    config = getattr(model, "config", None)
    for opt in _UNSUPPORTED_HEAD_OPTIONS:
        value = getattr(config, opt, None)
        if value not in (None, 1, 1.0):
            raise NotImplementedError(
                f"{type(model).__name__} post-processes logits ({opt}={value}); the chunked "
                "log-prob path supports a plain linear head only"
            )
    get_head = getattr(model, "get_output_embeddings", None)  # an HF model's
    head = get_head() if get_head is not None else None
    if head is None or not isinstance(getattr(head, "weight", None), Tensor):
        raise ValueError(
            f"{type(model).__name__} has no linear output embedding (get_output_embeddings())"
        )
    return head.weight, getattr(head, "bias", None)


def hidden_states(
    model: nn.Module,
    input_ids: Tensor,
    *,
    attention_mask: Tensor | None = None,
    position_ids: Tensor | None = None,
    **model_kwargs,
) -> Tensor:
    """Final (post-norm) hidden states ``[B, T, H]`` of a HF causal LM, without computing logits.

    Uses the base model (``model.base_model``, e.g. ``LlamaForCausalLM.model``); for a model
    without one, falls back to ``output_hidden_states=True`` with ``logits_to_keep=1``.
    ``model_kwargs`` go to the model's forward (e.g. ``cu_seq_lens_q`` for packed attention).
    """
    base = getattr(model, "base_model", model)
    kwargs = {
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "use_cache": False,
        **model_kwargs,
    }
    if base is not model:
        return base(input_ids=input_ids, **kwargs).last_hidden_state
    out = model(input_ids=input_ids, output_hidden_states=True, logits_to_keep=1, **kwargs)
    return out.hidden_states[-1]


def model_token_logprobs(
    model: nn.Module,
    input_ids: Tensor,
    *,
    attention_mask: Tensor | None = None,
    position_ids: Tensor | None = None,
    temperature: float = 1.0,
    chunk_size: int | None = None,
    return_entropy: bool = False,
    autocast_dtype: torch.dtype | None = None,
    head_dtype: torch.dtype | None = None,
    positions: Tensor | None = None,
    **model_kwargs,
) -> Tensor | tuple[Tensor, Tensor]:
    """Per-token log-probs ``[B, T]`` aligned to ``input_ids``: ``out[:, t] = log p(x_t | x_<t)``.

    ``out[:, 0]`` is 0 (no context). In a packed row the first token of each sequence gets the
    prediction of the previous sequence's last position: callers must mask it (a sample's
    ``loss_mask[0]`` is 0 by contract). ``autocast_dtype`` runs the transformer under autocast;
    the head and softmax always run outside it, in ``head_dtype`` (default: the head weight's
    dtype) with float32 softmax. ``model_kwargs`` go to the model's forward. ``positions``
    (flat indices into ``[B * T]``, none at ``t = 0``): only these are computed, the others are
    0 and the vocabulary-sized head never runs on them (what a loss reading only its policy
    tokens needs: on agent trajectories most tokens are prompt and observations).
    """
    ctx = (
        torch.autocast(input_ids.device.type, dtype=autocast_dtype)
        if autocast_dtype is not None
        else contextlib.nullcontext()
    )
    with ctx:
        h = hidden_states(
            model,
            input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            **model_kwargs,
        )
    weight, bias = lm_head(model)
    if positions is not None:
        out = token_logprobs(
            h.reshape(-1, h.shape[-1]).index_select(0, positions - 1),
            weight,
            input_ids.reshape(-1).index_select(0, positions),
            bias=bias,
            temperature=temperature,
            chunk_size=chunk_size,
            return_entropy=return_entropy,
            compute_dtype=head_dtype,
        )

        def row(values: Tensor) -> Tensor:
            return (
                values.new_zeros(input_ids.numel())
                .index_copy(0, positions, values)
                .view(input_ids.shape)
            )

        return (row(out[0]), row(out[1])) if isinstance(out, tuple) else row(out)
    out = token_logprobs(
        h[:, :-1],
        weight,
        input_ids[:, 1:],
        bias=bias,
        temperature=temperature,
        chunk_size=chunk_size,
        return_entropy=return_entropy,
        compute_dtype=head_dtype,
    )
    pad = torch.zeros(input_ids.shape[0], 1, dtype=torch.float32, device=input_ids.device)
    if isinstance(out, tuple):  # return_entropy
        lp, ent = out
        return torch.cat([pad, lp], 1), torch.cat([pad, ent], 1)
    return torch.cat([pad, out], 1)
