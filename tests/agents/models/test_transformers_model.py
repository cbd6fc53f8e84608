"""TransformersModel on a tiny random Llama (fast) and on SmolLM2 (a real, coherent reply)."""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")

from agents.models.transformers import TransformersModel, decode_text, filter_logits  # noqa: E402
from agents.protocols import Conversation, Model, SamplingParams  # noqa: E402

PROMPT = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def tiny(tiny_paths):
    model = TransformersModel(tiny_paths["tiny0"], seed=0)
    yield model
    model.close()


@pytest.fixture(scope="module")
def stop_prompt(prompts):
    return prompts["stop"]


@pytest.fixture(scope="module")
def prompt(tiny, chat_ids) -> Conversation:
    return Conversation(messages=list(PROMPT), token_ids=chat_ids(tiny.tokenizer, PROMPT))


def manual_logits(model: TransformersModel, prompt_ids: list[int], ids: list[int]):
    """Next-token logits at each completion position, from one plain forward pass."""
    with torch.no_grad():
        logits = model.model(torch.tensor([prompt_ids + ids])).logits[0].float()
    return logits[len(prompt_ids) - 1 : len(prompt_ids) - 1 + len(ids)]


def test_is_a_model(tiny):
    assert isinstance(tiny, Model)
    assert tiny.name == "tiny0"
    assert tiny.tokenizer is not None


def test_seeded_sampling_is_reproducible(tiny_paths, prompt):
    params = SamplingParams(max_new_tokens=12)
    runs = []
    for _ in range(2):
        model = TransformersModel(tiny_paths["tiny0"], seed=123)
        runs.append([model.generate(prompt, params).token_ids for _ in range(2)])
        model.close()
    assert runs[0] == runs[1]
    assert runs[0][0] != runs[0][1]  # the model seed seeds a stream, not every call alike


def test_request_seed_fixes_the_sample(tiny, prompt):
    params = SamplingParams(max_new_tokens=12, seed=7)
    first = tiny.generate(prompt, params)
    assert tiny.generate(prompt, params).token_ids == first.token_ids
    other = tiny.generate(prompt, SamplingParams(max_new_tokens=12, seed=8))
    assert other.token_ids != first.token_ids


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_are_log_softmax_of_scaled_logits(tiny, prompt, temperature):
    gen = tiny.generate(prompt, SamplingParams(max_new_tokens=16, seed=1, temperature=temperature))
    assert len(gen.token_ids) == len(gen.logprobs) == 16
    logits = manual_logits(tiny, prompt.token_ids, gen.token_ids)
    expected = torch.log_softmax(logits / temperature, -1)[range(16), gen.token_ids]
    assert torch.allclose(torch.tensor(gen.logprobs), expected, atol=1e-4)


def test_logprobs_with_top_k_top_p_are_renormalised(tiny, prompt):
    params = SamplingParams(max_new_tokens=10, seed=2, temperature=0.8, top_k=20, top_p=0.9)
    gen = tiny.generate(prompt, params)
    logits = manual_logits(tiny, prompt.token_ids, gen.token_ids)
    for row, (token, logprob) in enumerate(zip(gen.token_ids, gen.logprobs, strict=True)):
        kept = filter_logits(logits[row] / 0.8, 20, 0.9)
        assert torch.isfinite(kept[token])  # sampled from the truncated set
        assert int(torch.isfinite(kept).sum()) <= 20
        assert logprob == pytest.approx(float(torch.log_softmax(kept, -1)[token]), abs=1e-4)


def test_greedy_is_argmax(tiny, prompt):
    gen = tiny.generate(prompt, SamplingParams(temperature=0, max_new_tokens=8))
    logits = manual_logits(tiny, prompt.token_ids, gen.token_ids)
    assert gen.token_ids == logits.argmax(-1).tolist()
    expected = torch.log_softmax(logits, -1)[range(8), gen.token_ids]
    assert torch.allclose(torch.tensor(gen.logprobs), expected, atol=1e-4)


def test_finish_reason_length(tiny, prompt):
    gen = tiny.generate(prompt, SamplingParams(max_new_tokens=5, seed=0))
    assert gen.finish_reason == "length" and len(gen.token_ids) == 5
    assert gen.usage == {"prompt_tokens": len(prompt.token_ids), "completion_tokens": 5}


def test_finish_reason_stop_on_eos_list(tiny, tiny_paths, chat_ids, stop_prompt):
    """generation_config.eos_token_id is a list; the second id ends the turn and is kept."""
    assert tiny_paths["extra_eos"] in tiny.eos_token_ids
    ids = chat_ids(tiny.tokenizer, stop_prompt)
    gen = tiny.generate(Conversation(token_ids=ids), SamplingParams(temperature=0))
    assert gen.finish_reason == "stop"
    assert gen.token_ids == [tiny_paths["extra_eos"]]


def test_stop_string_ends_the_turn(tiny, prompt):
    free = tiny.generate(prompt, SamplingParams(temperature=0, max_new_tokens=10))
    stop = tiny.tokenizer.decode(free.token_ids[3:4]).strip()
    assert stop
    gen = tiny.generate(prompt, SamplingParams(temperature=0, max_new_tokens=10, stop=[stop]))
    assert gen.finish_reason == "stop"
    assert gen.token_ids == free.token_ids[: len(gen.token_ids)]
    assert len(gen.token_ids) <= 4
    assert stop in gen.text  # the text covers every sampled token


def test_invalid_utf8_is_replaced(tiny_paths, prompt):
    """A model that only emits the first byte-token of an emoji: the text gets U+FFFD."""
    tokenizer_model = TransformersModel(tiny_paths["tiny0"])
    tok = tokenizer_model.tokenizer
    partial = tok.encode("😀", add_special_tokens=False)[0]
    assert decode_text(tok, [partial]) == "\ufffd"
    model = tokenizer_model.model
    head = torch.nn.Linear(model.config.hidden_size, model.config.vocab_size, bias=True)
    torch.nn.init.zeros_(head.weight)
    with torch.no_grad():
        head.bias.zero_()
        head.bias[partial] = 10.0
    model.lm_head = head
    gen = tokenizer_model.generate(prompt, SamplingParams(temperature=0, max_new_tokens=3))
    assert gen.token_ids == [partial] * 3
    assert "\ufffd" in gen.text
    tokenizer_model.close()


def test_concurrent_calls_are_batched_and_match_sequential(tiny, prompt, chat_ids, stop_prompt):
    other = Conversation(token_ids=chat_ids(tiny.tokenizer, stop_prompt + PROMPT))
    convs = [prompt, other] * 3
    params = [SamplingParams(max_new_tokens=8, seed=i) for i in range(6)]
    sequential = [tiny.generate(c, p) for c, p in zip(convs, params, strict=True)]
    before = len(tiny._batcher.batch_sizes)
    results = [None] * 6
    barrier = threading.Barrier(6)

    def work(i):
        barrier.wait()
        results[i] = tiny.generate(convs[i], params[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max(tiny._batcher.batch_sizes[before:]) > 1  # served together, not one by one
    for seq, conc in zip(sequential, results, strict=True):
        assert conc.token_ids == seq.token_ids  # per-request seeds: batching does not matter
        assert conc.logprobs == pytest.approx(seq.logprobs, abs=1e-4)


def test_generate_batch_mixed_params(tiny, prompt):
    greedy = SamplingParams(temperature=0, max_new_tokens=4)
    sampled = SamplingParams(max_new_tokens=6, seed=3)
    out = tiny.generate_batch([prompt, prompt], [greedy, sampled])
    assert out[0].token_ids == tiny.generate(prompt, greedy).token_ids
    assert out[1].token_ids == tiny.generate(prompt, sampled).token_ids
    assert [len(g.token_ids) for g in out] == [4, 6]


def test_update_weights_from_folder(tiny_paths, prompt):
    model = TransformersModel(tiny_paths["tiny0"])
    reference = TransformersModel(tiny_paths["tiny1"])
    params = SamplingParams(temperature=0, max_new_tokens=6)
    before = model.generate(prompt, params)
    model.update_weights(tiny_paths["tiny1"])
    after = model.generate(prompt, params)
    expected = reference.generate(prompt, params)
    assert after.logprobs != pytest.approx(before.logprobs, abs=1e-3)
    assert after.token_ids == expected.token_ids
    assert after.logprobs == pytest.approx(expected.logprobs, abs=1e-5)
    model.close()
    reference.close()


def test_bad_input_errors(tiny, tiny_paths):
    with pytest.raises(ValueError, match="token_ids is empty"):
        tiny.generate(Conversation(messages=list(PROMPT)), SamplingParams())
    with pytest.raises(ValueError, match="unknown dtype 'bf16'.*bfloat16"):
        TransformersModel(tiny_paths["tiny0"], dtype="bf16")


def test_smollm2_answers_coherently(smollm2_dir, chat_ids):
    """The real model, converted from the bundled GGUF, answers a simple question and stops."""
    model = TransformersModel(smollm2_dir, dtype="bfloat16")
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    conv = Conversation(messages=messages, token_ids=chat_ids(model.tokenizer, messages))
    gen = model.generate(conv, SamplingParams(temperature=0, max_new_tokens=48))
    model.close()
    assert "Paris" in gen.text
    assert gen.finish_reason == "stop"
    assert gen.token_ids[-1] == model.tokenizer.eos_token_id  # <|im_end|> kept, as sampled
    assert all(lp <= 0 for lp in gen.logprobs)


@pytest.mark.slow  # dequantizing the GGUF in fp32 takes 20-50 s on 2 cores
def test_loads_straight_from_gguf():
    from agents.models.smollm2 import smollm2_gguf

    model = TransformersModel(smollm2_gguf())  # a .gguf path: dequantized on load
    assert model.name.endswith(".gguf")
    assert model.tokenizer.eos_token == "<|im_end|>"
    assert model.model.config.num_hidden_layers == 30
    model.close()
