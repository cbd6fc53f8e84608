"""Stage-2 YaRN preset and the context-fit check."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from algos.distributed.long_context import apply_yarn, check_context_fits, stage2_config


def _cfg(**kw):
    base = dict(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaConfig(**{**base, **kw})


def test_stage2_yarn_factor_4_builds_a_model_whose_rope_differs_beyond_the_original():
    cfg = stage2_config(_cfg())
    assert cfg.rope_parameters["rope_type"] == "yarn"
    assert cfg.rope_parameters["factor"] == 4.0
    assert cfg.rope_parameters["original_max_position_embeddings"] == 64
    assert cfg.max_position_embeddings == 256
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    rope = model.model.rotary_emb
    x = torch.zeros(1, 1, 32)
    cos, _ = rope(x, torch.arange(200)[None])
    plain = LlamaForCausalLM(_cfg()).model.rotary_emb
    cos0, _ = plain(x, torch.arange(200)[None])
    assert not torch.allclose(cos, cos0)  # the extension changes the frequencies
    # a saved and reloaded config keeps it
    again = LlamaConfig.from_dict(cfg.to_dict())
    assert again.rope_parameters["rope_type"] == "yarn"


def test_apply_yarn_refuses_bad_input():
    with pytest.raises(ValueError, match="factor must be >= 1"):
        apply_yarn(_cfg(), 0.5)
    cfg = _cfg(rope_scaling={"rope_type": "linear", "factor": 2.0})
    with pytest.raises(ValueError, match="rope_type 'linear'"):
        apply_yarn(cfg)


def test_context_fit_scales_with_cp_and_fails_with_numbers():
    cfg = apply_yarn(
        LlamaConfig(
            vocab_size=152064,
            hidden_size=5120,
            intermediate_size=27648,
            num_hidden_layers=64,
            num_attention_heads=40,
            num_key_value_heads=8,
            max_position_embeddings=32768,
        )
    )
    one = check_context_fits(cfg, 131072, 1, raise_on_fail=False, world_size=128)
    eight = check_context_fits(cfg, 131072, 8, raise_on_fail=False, world_size=128)
    assert one.tokens_per_rank == 131072 and eight.tokens_per_rank == 16384
    assert eight.activation_bytes * 7 < one.activation_bytes  # ~1/CP
    h200 = 141 * 10**9
    ok = check_context_fits(
        cfg, 131072, 8, 131072, True, h200, world_size=128, fused_attention=True
    )
    assert ok.fits and not ok.problems
    # the pure-PyTorch ring materialises (T/CP)^2 scores per head: needs a larger CP
    with pytest.raises(ValueError, match="use cp >= 8"):
        check_context_fits(cfg, 131072, 4, 131072, True, h200, world_size=128)
    with pytest.raises(ValueError, match=r"per rank > 85% .* use cp >= \d+"):
        check_context_fits(cfg, 131072, 1, 131072, True, h200, world_size=128)
    with pytest.raises(ValueError, match="max_position_embeddings 131072: extend the rope"):
        check_context_fits(cfg, 262144, 8, None, True, None)
    with pytest.raises(ValueError, match="micro_batch_tokens 8192 < seq_len 131072"):
        check_context_fits(cfg, 131072, 8, 8192, True, None)
