"""The gateway with the real ``openai`` client against the real server on localhost, in front of
a tiny random transformers model (nothing downloaded)."""

from __future__ import annotations

import copy
import json
import logging
import threading
import time

import httpx
import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from agents.gateway import PREFIX_FAILED, Gateway, key_session_id, split_segments  # noqa: E402
from agents.protocols import SamplingParams  # noqa: E402
from agents.react import ReActAgent  # noqa: E402

API_KEY = "sk-test-SECRET-7d1f0c"


class _Recording:
    """Keeps every prompt the engine was given and every generation it returned."""

    def __init__(self, inner, delay_s: float = 0.0):
        self.inner, self.name, self.tokenizer = inner, inner.name, inner.tokenizer
        self.delay_s = delay_s
        self.calls: list[tuple[list[int], object]] = []
        self.lock = threading.Lock()

    def generate(self, conversation, params):
        time.sleep(self.delay_s)
        gen = self.inner.generate(conversation, params)
        with self.lock:
            self.calls.append((list(conversation.token_ids), gen))
        return gen


@pytest.fixture(scope="module")
def engine(tiny_engine):
    return tiny_engine


@pytest.fixture
def served(engine):
    """``served(delay_s=0)``: a started gateway over a recording engine; closed after."""
    gateways = []

    def make(delay_s: float = 0.0):
        gateway = Gateway(_Recording(engine, delay_s), default_max_tokens=6)
        gateway.start()
        gateways.append(gateway)
        return gateway

    yield make
    for g in gateways:
        g.close()


def client(gateway, session=None, **kw):
    headers = {"X-Session-Id": session} if session else {}
    return openai.OpenAI(
        base_url=gateway.url, api_key=API_KEY, default_headers=headers, max_retries=0, **kw
    )


def chat(c, messages, **kw):
    kw.setdefault("max_tokens", 6)
    kw.setdefault("seed", 11)
    return c.chat.completions.create(model="tiny", messages=messages, **kw)


def test_three_turn_session_is_token_exact_and_equals_react_agent(served, engine):
    gateway = served()
    c = client(gateway, "s1")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Fix it."}]
    replies, usages = [], []
    for follow_up in ("ls printed a.py", "tests pass", None):
        response = chat(c, messages)
        reply = response.choices[0].message.content
        replies.append(reply)
        usages.append(response.usage)
        messages.append({"role": "assistant", "content": reply})
        if follow_up:
            messages.append({"role": "user", "content": follow_up})
    traj = gateway.trajectory("s1")
    assert traj.num_turns == 3 and traj.token_exact and gateway.prefix_failures == 0
    assert API_KEY not in json.dumps(traj.to_dict())
    assert traj.agent["segment_starts"] == [0]
    # Exactly what the engine was given and sampled, turn by turn.
    for t, (prompt, gen) in enumerate(gateway.recorder.model.calls):
        assert traj.conditioned_ids(t) == prompt
        assert traj.turns[t].completion_ids == gen.token_ids
        assert traj.turns[t].completion_logprobs == gen.logprobs
        assert traj.turns[t].action == replies[t]
        assert usages[t].prompt_tokens == len(prompt)
        assert usages[t].completion_tokens == len(gen.token_ids)
    # The same ids an in-process ReActAgent builds for this conversation with the same seeds.
    agent = ReActAgent(engine, SamplingParams(max_new_tokens=6, seed=11))
    agent.reset("Fix it.", {"system_prompt": "Be brief."})
    direct = [agent.act("Fix it.", {})]
    for observation in ("ls printed a.py", "tests pass"):
        direct.append(agent.act(observation, {}))
    assert direct == replies
    assert agent.conversation.token_ids == traj.to_sample_arrays()[0]


def test_edited_history_counts_a_prefix_failure_and_marks_the_turn(served):
    gateway = served()
    c = client(gateway, "s2")
    messages = [{"role": "user", "content": "hello"}]
    reply = chat(c, messages).choices[0].message.content
    edited = [*messages, {"role": "assistant", "content": reply + " (edited)"}]
    chat(c, [*edited, {"role": "user", "content": "again"}])
    traj = gateway.trajectory("s2")
    assert gateway.prefix_failures == 1 and traj.agent["prefix_failures"] == 1
    assert traj.agent["segment_starts"] == [0, 1]
    turn = traj.turns[1]
    assert turn.invalid_action and turn.invalid_reason.startswith(PREFIX_FAILED)
    # The new segment is rendered whole, never spliced onto the old ids.
    assert turn.prompt_delta_ids == gateway.recorder.model.calls[1][0]
    assert traj.to_sample_arrays(mask_invalid=True)[1][-len(turn.completion_ids) :] == [0] * len(
        turn.completion_ids
    )
    parts = split_segments(traj)
    assert [p.num_turns for p in parts] == [1, 1] and not parts[1].turns[0].invalid_action
    assert parts[1].conditioned_ids(0) == gateway.recorder.model.calls[1][0]


def test_32_concurrent_sessions_are_recorded_separately(served):
    gateway = served()
    errors = []

    def episode(i: int) -> None:
        try:
            c = client(gateway, f"par-{i}")
            messages = [{"role": "user", "content": f"task {i}"}]
            for turn in range(2):
                reply = chat(c, messages, seed=i).choices[0].message.content
                messages += [
                    {"role": "assistant", "content": reply},
                    {"role": "user", "content": f"obs {turn}"},
                ]
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=episode, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(gateway.session_ids()) == sorted(f"par-{i}" for i in range(32))
    assert gateway.prefix_failures == 0
    tok = gateway.recorder.template.tokenizer
    for i in range(32):
        traj = gateway.pop_session(f"par-{i}")
        assert traj.num_turns == 2
        assert f"task {i}" in tok.decode(traj.turns[0].prompt_delta_ids)
        assert "obs 0" in tok.decode(traj.turns[1].prompt_delta_ids)
    assert gateway.session_ids() == []


def _body(**extra):
    return {"model": "tiny", "messages": [{"role": "user", "content": "x"}], **extra}


@pytest.mark.parametrize(
    "body, status, param",
    [
        ({"model": "tiny"}, 400, "messages"),
        (_body(n=2), 400, "n"),
        (_body(model="gpt-9"), 404, "model"),
        (_body(temperature=9), 400, "temperature"),
        (_body(stream="yes"), 400, "stream"),
        (_body(tools=[{"type": "function"}]), 400, "tools"),
        (_body(messages=[{"role": "wizard", "content": "x"}]), 400, "messages"),
        (
            _body(messages=[{"role": "user", "content": "x"}, {"role": "assistant"}]),
            400,
            "messages",
        ),
        ("{not json", 400, None),
    ],
)
def test_bad_requests_get_openai_style_errors(served, body, status, param):
    gateway = served()
    content = body if isinstance(body, str) else json.dumps(body)
    r = httpx.post(
        gateway.url + "/chat/completions",
        content=content,
        headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"},
    )
    assert r.status_code == status
    error = r.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error" and error["message"]
    assert gateway.session_ids() == []


def test_openai_client_raises_its_own_errors(served):
    gateway = served()
    with pytest.raises(openai.BadRequestError, match="n must be 1"):
        chat(client(gateway, "e"), [{"role": "user", "content": "x"}], n=2)
    with pytest.raises(openai.NotFoundError):
        client(gateway).chat.completions.create(
            model="nope", messages=[{"role": "user", "content": "x"}]
        )
    assert [m.id for m in client(gateway).models.list()] == ["tiny"]


def test_api_key_never_in_logs_or_trajectories(served, caplog):
    gateway = served()
    caplog.set_level(logging.DEBUG)
    c = client(gateway)  # no session header: the session is keyed by the API key's hash
    chat(c, [{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError):
        chat(c, [{"role": "user", "content": "hi"}], n=3)
    sid = key_session_id(API_KEY)
    assert gateway.session_ids() == [sid] and API_KEY not in sid
    assert API_KEY not in json.dumps(gateway.trajectory(sid).to_dict())
    assert API_KEY not in caplog.text


def test_client_disconnect_mid_request_loses_nothing_recorded(served):
    gateway = served(delay_s=1.0)
    messages = [{"role": "user", "content": "one"}]
    reply = chat(client(gateway, "d"), messages).choices[0].message.content
    messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": "two"}]
    with pytest.raises(openai.APITimeoutError):
        chat(client(gateway, "d", timeout=0.2), messages)
    deadline = time.monotonic() + 30  # the server finishes the request the client left
    while len(gateway.recorder.model.calls) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    traj = gateway.trajectory("d")
    assert traj.num_turns == 2
    assert traj.turns[0].completion_ids == gateway.recorder.model.calls[0][1].token_ids
    assert traj.conditioned_ids(1) == gateway.recorder.model.calls[1][0]


class _Canned:
    """An instant token engine: replies ``text`` + end-of-turn, as tokenised by the template."""

    name = "canned"

    def __init__(self, tokenizer, text: str = "ls -la"):
        from agents.protocols import Generation

        self.tokenizer = tokenizer
        ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
        self.gen = Generation(text, ids, [-0.5] * len(ids), "stop")

    def generate(self, conversation, params):
        return self.gen


def test_several_appended_messages_give_the_full_render_ids(smollm2_tokenizer):
    from agents.gateway import SessionRecorder

    recorder = SessionRecorder(_Canned(smollm2_tokenizer))
    params = SamplingParams(max_new_tokens=4)
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "task"}]
    reply = recorder.complete("m", messages, params).text
    messages += [
        {"role": "assistant", "content": reply},
        {"role": "user", "content": "first note"},
        {"role": "user", "content": "second note"},
    ]
    recorder.complete("m", messages, params)
    traj = recorder.trajectory("m")
    assert recorder.prefix_failures == 0 and traj.agent["segment_starts"] == [0]
    # This canned reply re-tokenises to itself, so for ChatML the exact ids equal a full render.
    full = smollm2_tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    full = full["input_ids"] if hasattr(full, "keys") else full
    assert traj.conditioned_ids(1) == list(full)


def test_template_that_rewrites_history_falls_back_to_per_turn_samples(tiny_tokenizer):
    from agents.gateway import SessionRecorder

    # Like Qwen3 dropping past <think> blocks: earlier assistant turns render differently.
    tokenizer = copy.deepcopy(tiny_tokenizer)
    tokenizer.chat_template = (
        "{{ bos_token }}{% for m in messages %}[{{ m.role }}]"
        "{% if m.role == 'assistant' and not loop.last %}(past){% else %}{{ m.content }}{% endif %}"
        "<|end|>{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"
    )
    recorder = SessionRecorder(_Canned(tokenizer, "ok"))
    params = SamplingParams(max_new_tokens=4)
    messages = [{"role": "user", "content": "task"}]
    reply = recorder.complete("q", messages, params).text
    messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": "more"}]
    recorder.complete("q", messages, params)
    traj = recorder.trajectory("q")
    assert recorder.prefix_failures == 1 and traj.agent["segment_starts"] == [0, 1]
    assert "not append-only" in traj.turns[1].invalid_reason
    assert traj.turns[1].prompt_delta_ids == recorder.template.initial_ids(messages)


class _Broken(_Canned):
    def generate(self, conversation, params):
        raise RuntimeError("engine down")


def test_engine_failure_is_a_500_and_records_nothing(smollm2_tokenizer, caplog):
    with Gateway(_Broken(smollm2_tokenizer)) as gateway:
        with pytest.raises(openai.InternalServerError, match="rollout engine failed"):
            client(gateway).chat.completions.create(
                model="canned", messages=[{"role": "user", "content": "x"}]
            )
        assert key_session_id(API_KEY) not in gateway.session_ids()  # nothing recorded, not even
        # an empty session for the key (a routed session is kept only once a turn is recorded)
    assert "engine down" in caplog.text and API_KEY not in caplog.text
