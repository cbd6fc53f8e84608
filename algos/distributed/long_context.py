"""Long-context settings: the stage-2 YaRN rope extension and a "does it fit" check.

Stage 2 of the Nebius recipe (docs/methods.md#stages) trains at 131k tokens with the rope extended
by YaRN, factor 4 (a 32k-native model -> 131k). In transformers 5.x the rope settings live in
``config.rope_parameters`` (``rope_scaling`` is still accepted as the legacy name and is
normalised into it): ``{"rope_type": "yarn", "factor": 4.0,
"original_max_position_embeddings": <pretraining length>, "rope_theta": <base>}``.
:func:`apply_yarn` writes both and raises ``max_position_embeddings`` to factor x original.

:func:`check_context_fits` is a back-of-envelope memory model (documented below, per rank) that
fails with the numbers before a 131k run OOMs an hour in.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

STAGE2_CONTEXT = 131_072
STAGE2_YARN_FACTOR = 4.0


def apply_yarn(
    config: Any,
    factor: float = STAGE2_YARN_FACTOR,
    original_max_position_embeddings: int | None = None,
) -> Any:
    """Extend a HF config's rope with YaRN in place; returns the config.

    ``original_max_position_embeddings`` defaults to the config's current
    ``max_position_embeddings`` (the pretraining length). Refuses a config already scaled by a
    different rope type rather than stacking two extensions.
    """
    if factor < 1:
        raise ValueError(f"YaRN factor must be >= 1, got {factor}")
    params = dict(getattr(config, "rope_parameters", None) or {})
    kind = params.get("rope_type", "default")
    if kind not in ("default", "yarn"):
        raise ValueError(
            f"config already uses rope_type {kind!r}; apply_yarn extends a 'default' rope only"
        )
    if kind == "yarn":  # already extended: keep its original length
        original = original_max_position_embeddings or params["original_max_position_embeddings"]
    else:
        original = original_max_position_embeddings or config.max_position_embeddings
    theta = params.get("rope_theta", getattr(config, "rope_theta", 10000.0))
    new = {
        **params,
        "rope_type": "yarn",
        "factor": float(factor),
        "original_max_position_embeddings": int(original),
        "rope_theta": theta,
    }
    config.rope_parameters = new
    config.max_position_embeddings = int(original * factor)
    return config


def stage2_config(config: Any, original_max_position_embeddings: int | None = None) -> Any:
    """The stage-2 preset: YaRN factor 4 (docs/methods.md#stages: 131k context)."""
    return apply_yarn(config, STAGE2_YARN_FACTOR, original_max_position_embeddings)


@dataclass
class ContextFitReport:
    """Per-rank estimate (bytes) for one micro-batch of ``seq_len`` split over ``cp_size``."""

    seq_len: int
    cp_size: int
    tokens_per_rank: int
    micro_batch_tokens: int
    activation_checkpointing: bool
    activation_bytes: int
    logits_bytes: int
    attention_tile_bytes: int
    params_grads_optim_bytes: int
    total_bytes: int
    device_memory_bytes: int | None
    fits: bool
    problems: list[str]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        g = 2**30
        mem = f"{self.device_memory_bytes / g:.1f}" if self.device_memory_bytes else "?"
        return (
            f"seq {self.seq_len} / cp {self.cp_size} = {self.tokens_per_rank} tokens/rank; "
            f"activations {self.activation_bytes / g:.2f} GiB, logits "
            f"{self.logits_bytes / g:.2f} GiB, attention tile "
            f"{self.attention_tile_bytes / g:.2f} GiB, weights+grads+AdamW "
            f"{self.params_grads_optim_bytes / g:.2f} GiB; total "
            f"{self.total_bytes / g:.2f} of {mem} GiB"
        )


def _num_params(cfg: Any) -> int:
    h, v = cfg.hidden_size, cfg.vocab_size
    heads = cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    hd = getattr(cfg, "head_dim", None) or h // heads
    inter = getattr(cfg, "intermediate_size", 4 * h)
    per_layer = h * hd * (heads + 2 * kv) + heads * hd * h + 3 * h * inter + 2 * h
    tied = getattr(cfg, "tie_word_embeddings", False)
    return cfg.num_hidden_layers * per_layer + v * h * (1 if tied else 2) + h


def check_context_fits(
    model_config: Any,
    seq_len: int,
    cp_size: int = 1,
    micro_batch_tokens: int | None = None,
    activation_checkpointing: bool = True,
    device_memory_bytes: int | None = None,
    *,
    world_size: int | None = None,
    dtype_bytes: int = 2,
    logprob_chunk_tokens: int = 4096,
    fused_attention: bool = False,
    headroom: float = 0.85,
    raise_on_fail: bool = True,
) -> ContextFitReport:
    """Estimate one rank's training memory for ``seq_len`` tokens under CP; fail clearly.

    Model (per rank, T = tokens per rank = ceil(seq_len / cp), L layers, h hidden, i MLP):

    - saved activations: with checkpointing, the layer inputs ``L*T*h`` plus one layer being
      recomputed (``~ T*(10h + 4i)``); without, ``L*T*(10h + 4i)`` (attention outputs, q/k/v,
      MLP intermediates, norms, in ``dtype_bytes``);
    - attention: one ring block's fp32 scores and probabilities, ``2 x heads x T x T`` (this
      package's pure-PyTorch ring materialises them); ``fused_attention=True`` counts 0, as a
      FlashAttention-style kernel per ring step would (not shipped here);
    - log-probs: chunked head, ``logprob_chunk_tokens x vocab`` fp32 (algos.learner.logprobs);
    - weights + grads + AdamW: ``P * (2*dtype + 8 fp32 moments + 4 fp32 master)`` / world
      (FSDP shards them over every rank).

    Fails (``raise_on_fail``) when the total exceeds ``headroom * device_memory_bytes``, when
    ``seq_len`` exceeds the model's ``max_position_embeddings`` (apply YaRN first), or when
    ``micro_batch_tokens`` is smaller than ``seq_len`` (one sequence must fit a micro-batch).
    """
    if seq_len < 1 or cp_size < 1:
        raise ValueError(f"seq_len and cp_size must be >= 1; got {seq_len}, {cp_size}")
    cfg = model_config
    h = cfg.hidden_size
    inter = getattr(cfg, "intermediate_size", 4 * h)
    layers = cfg.num_hidden_layers
    heads = cfg.num_attention_heads
    tokens = math.ceil(seq_len / cp_size)
    per_layer_tok = (10 * h + 4 * inter) * dtype_bytes
    if activation_checkpointing:
        act = layers * tokens * h * dtype_bytes + tokens * per_layer_tok
    else:
        act = layers * tokens * per_layer_tok
    # scores + probabilities of one ring block (T_local x T_local per head), fp32
    tile = 0 if fused_attention else 2 * heads * tokens * tokens * 4
    logits = min(tokens, logprob_chunk_tokens) * cfg.vocab_size * 4
    world = world_size or cp_size
    pgo = _num_params(cfg) * (2 * dtype_bytes + 8 + 4) // world
    total = act + tile + logits + pgo
    problems = []
    max_pos = getattr(cfg, "max_position_embeddings", None)
    if max_pos is not None and seq_len > max_pos:
        problems.append(
            f"seq_len {seq_len} > max_position_embeddings {max_pos}: extend the rope first "
            f"(apply_yarn(config, factor={math.ceil(seq_len / max_pos)}))"
        )
    if micro_batch_tokens is not None and micro_batch_tokens < seq_len:
        problems.append(
            f"micro_batch_tokens {micro_batch_tokens} < seq_len {seq_len}: one sequence must fit "
            "a micro-batch (it is split over CP ranks, not over micro-batches)"
        )
    if device_memory_bytes is not None and total > headroom * device_memory_bytes:
        need_cp = cp_size
        while need_cp < 1024:
            need_cp *= 2
            r = check_context_fits(
                cfg,
                seq_len,
                need_cp,
                None,
                activation_checkpointing,
                None,
                world_size=max(world, need_cp),
                dtype_bytes=dtype_bytes,
                logprob_chunk_tokens=logprob_chunk_tokens,
                fused_attention=fused_attention,
                raise_on_fail=False,
            )
            if r.total_bytes <= headroom * device_memory_bytes:
                break
        hint = "" if activation_checkpointing else "; turn on activation checkpointing"
        problems.append(
            f"estimated {total / 2**30:.1f} GiB per rank > {headroom:.0%} of "
            f"{device_memory_bytes / 2**30:.1f} GiB at seq_len {seq_len}, cp {cp_size}: use "
            f"cp >= {need_cp}{hint}"
        )
    report = ContextFitReport(
        seq_len=seq_len,
        cp_size=cp_size,
        tokens_per_rank=tokens,
        micro_batch_tokens=micro_batch_tokens or seq_len,
        activation_checkpointing=activation_checkpointing,
        activation_bytes=act,
        logits_bytes=logits,
        attention_tile_bytes=tile,
        params_grads_optim_bytes=pgo,
        total_bytes=total,
        device_memory_bytes=device_memory_bytes,
        fits=not problems,
        problems=problems,
    )
    if problems and raise_on_fail:
        raise ValueError("context does not fit: " + "; ".join(problems) + f" [{report}]")
    return report
