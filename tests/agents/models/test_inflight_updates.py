"""In-flight weight updates of TransformersModel: generations running when ``update_weights`` is
called finish on the old weights, later ones use the new weights, none mixes the two, and each
``Generation`` reports the version that produced it."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from agents.models.transformers import TransformersModel, load_safetensors
from agents.protocols import Conversation, SamplingParams

MESSAGES = [
    [{"role": "user", "content": text}] for text in ("hi", "hello there", "one two", "what is it?")
]
GREEDY = SamplingParams(temperature=0, max_new_tokens=24)


@pytest.fixture(scope="module")
def convs(tiny_paths, chat_ids):
    model = TransformersModel(tiny_paths["tiny0"])
    out = [Conversation(messages=m, token_ids=chat_ids(model.tokenizer, m)) for m in MESSAGES]
    model.close()
    return out


@pytest.fixture(scope="module")
def expected(tiny_paths, convs):
    """Greedy ids of every prompt under the old (tiny0) and the new (tiny1) weights."""
    out = {}
    for version, name in ((0, "tiny0"), (1, "tiny1")):
        model = TransformersModel(tiny_paths[name])
        out[version] = [model.generate(c, GREEDY).token_ids for c in convs]
        model.close()
    assert out[0] != out[1]  # the two versions are distinguishable
    return out


def test_update_waits_for_the_running_batch_and_versions_are_exact(tiny_paths, convs, expected):
    model = TransformersModel(tiny_paths["tiny0"], batch_window_s=0.0)
    new_weights = load_safetensors(tiny_paths["tiny1"])
    started = threading.Event()
    hook = model.model.register_forward_pre_hook(lambda *_: started.set())
    try:
        with ThreadPoolExecutor(len(convs)) as pool:
            running = [pool.submit(model.generate, c, GREEDY) for c in convs]
            assert started.wait(30)  # a batch is decoding now
            assert model.update_weights(new_weights, version=7) == 7
            after = [model.generate(c, GREEDY) for c in convs]
            before = [f.result() for f in running]
    finally:
        hook.remove()
        model.close()
    for i, gen in enumerate(before):  # every running request: entirely old or entirely new
        assert gen.policy_version in (0, 7)
        assert gen.token_ids == expected[0 if gen.policy_version == 0 else 1][i]
    assert any(g.policy_version == 0 for g in before)  # the batch running when it was asked
    assert [g.policy_version for g in after] == [7] * len(convs)
    assert [g.token_ids for g in after] == expected[1]


def test_concurrent_generations_during_updates_match_one_version(tiny_paths, convs, expected):
    """Many threads generate while another thread flips the weights back and forth."""
    model = TransformersModel(tiny_paths["tiny0"])
    weights = {0: load_safetensors(tiny_paths["tiny0"]), 1: load_safetensors(tiny_paths["tiny1"])}
    stop = threading.Event()
    results: list[tuple[int, object]] = []
    lock = threading.Lock()

    def client(i: int) -> None:
        while not stop.is_set():
            gen = model.generate(convs[i % len(convs)], GREEDY)
            with lock:
                results.append((i % len(convs), gen))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    try:
        for version in range(1, 7):  # versions 1..6 hold tiny1, tiny0, tiny1, ...
            model.update_weights(weights[version % 2], version=version)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        model.close()
    assert results and not any(t.is_alive() for t in threads)
    seen = set()
    for i, gen in results:
        v = gen.policy_version
        seen.add(v)
        assert gen.token_ids == expected[0 if v in (0, 2, 4, 6) else 1][i], (i, v)
    assert len(seen) >= 2  # generations really ran across updates


def test_update_weights_default_version_counts_up(tiny_paths, convs):
    model = TransformersModel(tiny_paths["tiny0"])
    try:
        assert model.generate(convs[0], GREEDY).policy_version == 0
        assert model.update_weights(tiny_paths["tiny1"]) == 1
        assert model.update_weights(tiny_paths["tiny0"]) == 2
        assert model.generate(convs[0], GREEDY).policy_version == 2
    finally:
        model.close()


def test_failed_update_keeps_the_version_and_serving(tiny_paths, convs, expected):
    model = TransformersModel(tiny_paths["tiny0"])
    try:
        with pytest.raises(ValueError, match="unexpected weights"):
            model.update_weights(
                {
                    "not.a.weight": load_safetensors(tiny_paths["tiny1"])[
                        "model.embed_tokens.weight"
                    ]
                },
                version=3,
            )
        gen = model.generate(convs[0], GREEDY)
        assert gen.policy_version == 0 and gen.token_ids == expected[0][0]
    finally:
        model.close()
