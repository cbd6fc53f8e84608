"""The tiny random Llama of the learner, log-prob, tree and distributed tests: built from a
config (nothing downloaded), two layers of width 32, four heads over two KV heads; a CPU step
takes milliseconds. The torchrun workers import it too (PYTHONPATH is the repository root)."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def tiny_llama(
    seed: int = 0,
    attn: str | None = "sdpa",
    tied: bool = False,
    vocab: int = 128,
    max_positions: int = 512,
) -> LlamaForCausalLM:
    """Weights drawn from ``seed``; ``attn``: the attention implementation (None: transformers'
    default); ``tied``: the LM head shares the input embedding."""
    cfg = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=vocab,
        max_position_embeddings=max_positions,
        tie_word_embeddings=tied,
    )
    if attn is not None:
        cfg._attn_implementation = attn
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg)
