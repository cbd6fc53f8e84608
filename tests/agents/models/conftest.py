"""Fixtures for the model backends: a tiny random Llama with the SmolLM2 tokenizer, SmolLM2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.protocols import Conversation

PROMPT = [{"role": "user", "content": "hi"}]
# The tiny model's second end-of-turn id is its greedy first token after this prompt, so that
# a short greedy run really ends on "stop" through the generation config's eos_token_id list.
STOP_PROMPT = [{"role": "user", "content": "Say something that ends."}]


def chat_ids(tokenizer, messages) -> list[int]:
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


@pytest.fixture(scope="session")
def tiny_paths(tmp_path_factory) -> dict[str, Path]:
    """Two tiny random models (seeds 0 and 1) sharing a tokenizer. Model 0's generation config
    lists two eos ids: the tokenizer's and the greedy first token after ``STOP_PROMPT``."""
    pytest.importorskip("transformers")
    from agents.models.smollm2 import tiny_random_model
    from agents.models.transformers import TransformersModel
    from agents.protocols import SamplingParams

    root = tmp_path_factory.mktemp("tiny")
    first = tiny_random_model(root / "tiny0", seed=0)
    second = tiny_random_model(root / "tiny1", seed=1)
    model = TransformersModel(first)
    try:
        stop_ids = chat_ids(model.tokenizer, STOP_PROMPT)
        greedy = SamplingParams(temperature=0, max_new_tokens=1)
        extra = model.generate(Conversation(token_ids=stop_ids), greedy).token_ids[0]
    finally:
        model.close()
    config_file = first / "generation_config.json"
    config = json.loads(config_file.read_text())
    config["eos_token_id"] = [config["eos_token_id"], extra]
    config_file.write_text(json.dumps(config))
    return {"tiny0": first, "tiny1": second, "extra_eos": extra}


@pytest.fixture(scope="session", name="chat_ids")
def chat_ids_fixture():
    """``chat_ids(tokenizer, messages)``: the prompt ids with the generation prompt."""
    return chat_ids


@pytest.fixture(scope="session")
def prompts() -> dict[str, list[dict[str, str]]]:
    return {"hi": PROMPT, "stop": STOP_PROMPT}


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face folder (converted from the GGUF once, cached)."""
    from agents.models.smollm2 import smollm2_path

    return smollm2_path()
