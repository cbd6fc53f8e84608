"""Gateway tool calls and streaming with the real ``openai`` client against the real server.

The engine is a token engine that replays scripted replies through SmolLM2's tokenizer (its ids
and end-of-turn exactly as a sampling model would give them); the tool-capable template is a
Qwen2.5-style ChatML template written here (nothing downloaded)."""

from __future__ import annotations

import copy
import json

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from agents.gateway import Gateway, parse_tool_calls  # noqa: E402
from agents.models.scripted import ScriptedModel  # noqa: E402

API_KEY = "sk-test-SECRET-tools"
# Qwen2.5's layout: tools in the system block, calls as <tool_call> JSON, consecutive tool
# results merged into one user block.
QWEN_LIKE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content }}{%- else %}"
    "{{- 'You are a helpful assistant.' }}{%- endif %}"
    "{{- '\\n\\n# Tools\\n\\n<tools>' }}{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}"
    "{%- endfor %}{{- '\\n</tools>\\n\\nCall a function with <tool_call></tool_call> tags."
    "<|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'assistant' and not message.tool_calls) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}{{- '<|im_start|>assistant' }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tc in message.tool_calls %}"
    '{{- \'\\n<tool_call>\\n{"name": "\' + tc.function.name + \'", "arguments": \' }}'
    "{{- tc.function.arguments | tojson }}{{- '}\\n</tool_call>' }}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}"
    "{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}"
    "{%- endif %}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
}
# Llama 3.1's layout (tools listed in the first user turn, a call written as the whole reply
# {"name": ..., "parameters": ...}, results in an ``ipython`` turn), with SmolLM2's end-of-turn
# token so the scripted engine's end of sequence closes a turn as the template does.
LLAMA_LIKE = (
    "{%- for message in messages %}"
    "{%- if message.role == 'user' and loop.first and tools %}"
    "{{- '<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, respond "
    'with a JSON for a function call: {"name": function name, "parameters": dictionary of '
    "argument name and its value}.\n\n' }}"
    "{%- for t in tools %}{{- t | tojson }}{{- '\n\n' }}{%- endfor %}"
    "{{- message.content + '<|im_end|>' }}"
    "{%- elif message.role == 'assistant' and message.tool_calls %}"
    "{%- set tc = message.tool_calls[0].function %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    '{{- \'{"name": "\' + tc.name + \'", "parameters": \' }}'
    "{{- tc.arguments | tojson }}{{- '}<|im_end|>' }}"
    "{%- elif message.role == 'tool' %}"
    "{{- '<|start_header_id|>ipython<|end_header_id|>\n\n' + message.content + '<|im_end|>' }}"
    "{%- else %}"
    "{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\n\n' + message.content"
    " + '<|im_end|>' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{%- endif %}"
)
# Exactly as the template renders the call, so the whole history re-renders to the same ids.
CALL = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'


@pytest.fixture
def tools_tokenizer(smollm2_tokenizer):
    tokenizer = copy.deepcopy(smollm2_tokenizer)
    tokenizer.chat_template = QWEN_LIKE
    return tokenizer


class _Engine(ScriptedModel):
    """Scripted replies as a token engine; keeps the prompt ids of every call."""

    def __init__(self, replies, tokenizer):
        super().__init__(replies, tokenizer=tokenizer, name="tiny")
        self.prompts: list[list[int]] = []

    def generate(self, conversation, params):
        self.prompts.append(list(conversation.token_ids))
        return super().generate(conversation, params)


def _ids(out):
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def _client(gateway, session=None):
    headers = {"X-Session-Id": session} if session else {}
    return openai.OpenAI(
        base_url=gateway.url, api_key=API_KEY, default_headers=headers, max_retries=0
    )


def test_tool_call_round_trip_is_token_exact(tools_tokenizer):
    engine = _Engine([CALL, "All done."], tools_tokenizer)
    with Gateway(engine) as gateway:
        c = _client(gateway, "t")
        messages = [
            {"role": "system", "content": "Fix the bug."},
            {"role": "user", "content": "Tests fail."},
        ]
        first = c.chat.completions.create(model="tiny", messages=messages, tools=[BASH])
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls" and not choice.message.content
        (call,) = choice.message.tool_calls
        assert call.function.name == "bash"
        assert json.loads(call.function.arguments) == {"command": "ls"}
        # What agent code does: echo the assistant message, answer each call with a tool result.
        messages.append(choice.message.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": "a.py"})
        messages.append({"role": "tool", "tool_call_id": call.id, "content": "b.py"})
        second = c.chat.completions.create(model="tiny", messages=messages, tools=[BASH])
        assert second.choices[0].message.content == "All done."
        assert second.choices[0].message.tool_calls is None
        traj = gateway.trajectory("t")
    assert gateway.prefix_failures == 0 and traj.agent["segment_starts"] == [0]
    assert [traj.conditioned_ids(t) for t in range(2)] == engine.prompts
    # The system block holds the tools, and the two tool results share one user block.
    prompt0 = tools_tokenizer.decode(engine.prompts[0])
    assert '"name": "bash"' in prompt0 and "<tools>" in prompt0
    delta1 = tools_tokenizer.decode(traj.turns[1].prompt_delta_ids)
    assert delta1.count("<|im_start|>user") == 1 and delta1.count("<tool_response>") == 2
    # The sampled call re-renders to itself here, so the exact ids equal a full render.
    full = tools_tokenizer.apply_chat_template(
        [
            {**m, "tool_calls": [{"function": {"name": "bash", "arguments": {"command": "ls"}}}]}
            if m.get("tool_calls")
            else m
            for m in messages
        ],
        tools=[BASH],
        add_generation_prompt=True,
    )
    assert traj.conditioned_ids(1) == _ids(full)


def test_changed_tools_count_a_prefix_failure(tools_tokenizer):
    engine = _Engine(["a", "b"], tools_tokenizer)
    with Gateway(engine) as gateway:
        c = _client(gateway, "t")
        messages = [{"role": "user", "content": "go"}]
        reply = c.chat.completions.create(model="tiny", messages=messages, tools=[BASH])
        messages += [
            {"role": "assistant", "content": reply.choices[0].message.content},
            {"role": "user", "content": "more"},
        ]
        c.chat.completions.create(model="tiny", messages=messages)  # the tools dropped
        traj = gateway.trajectory("t")
    assert gateway.prefix_failures == 1 and "tools differ" in traj.turns[1].invalid_reason
    assert traj.turns[1].prompt_delta_ids == engine.prompts[1]  # a new segment, rendered whole


def test_template_without_tools_is_a_400_naming_the_model(smollm2_tokenizer):
    with Gateway(_Engine(["x"], smollm2_tokenizer)) as gateway:
        with pytest.raises(openai.BadRequestError, match="no tool support") as err:
            _client(gateway).chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "x"}], tools=[BASH]
            )
        assert "'tiny'" in err.value.message and err.value.code == "tools_not_supported"
        assert gateway.session_ids() == []  # refused before any session was opened


def test_streamed_reply_equals_the_recorded_one(tools_tokenizer):
    engine = _Engine(["Looking now. " + CALL, "Plain text reply."], tools_tokenizer)
    with Gateway(engine) as gateway:
        c = _client(gateway, "s")
        messages = [{"role": "user", "content": "go"}]
        chunks = list(
            c.chat.completions.create(
                model="tiny",
                messages=messages,
                tools=[BASH],
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
        assert "".join(d.content or "" for d in deltas) == "Looking now."
        calls = [tc for d in deltas for tc in (d.tool_calls or [])]
        assert [tc.function.name for tc in calls] == ["bash"]
        assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "tool_calls"
        usage = chunks[-1].usage
        traj = gateway.trajectory("s")
        assert traj.num_turns == 1 and traj.turns[0].action == "Looking now. " + CALL
        assert usage.completion_tokens == len(traj.turns[0].completion_ids)
        # The client stops reading after the first event: the turn is recorded all the same,
        # and the session goes on without a prefix failure.
        messages.append(
            {
                "role": "assistant",
                "content": "Looking now.",
                "tool_calls": [
                    {
                        "id": calls[0].id,
                        "type": "function",
                        "function": {"name": "bash", "arguments": calls[0].function.arguments},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": calls[0].id, "content": "a.py"})
        stream = c.chat.completions.create(
            model="tiny", messages=messages, tools=[BASH], stream=True
        )
        next(iter(stream))
        stream.close()
        traj = gateway.trajectory("s")
    assert traj.num_turns == 2 and traj.turns[1].action == "Plain text reply."
    assert gateway.prefix_failures == 0
    assert [traj.conditioned_ids(t) for t in range(2)] == engine.prompts


def test_only_well_formed_calls_are_parsed_back():
    for text in (
        "<tool_call>{not json}</tool_call>",
        '<tool_call>{"name": "x", "arguments": "s"}</tool_call>',
        'ok <tool_call>["x"]</tool_call>',
    ):
        assert parse_tool_calls(text) == (text, [])
    content, calls = parse_tool_calls(
        'Hi <tool_call>{"name": "a", "arguments": {"k": 1}}</tool_call>\n'
        '<tool_call>{"name": "b"}</tool_call>'
    )
    assert content == "Hi"
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("a", {"k": 1}),
        ("b", {}),
    ]
    assert len({c["id"] for c in calls}) == 2


def test_malformed_tool_calls_in_history_are_a_400(tools_tokenizer):
    with Gateway(_Engine(["x"], tools_tokenizer)) as gateway:
        bad = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "bash", "arguments": "{oops"}}
            ],
        }
        with pytest.raises(openai.BadRequestError, match=r"messages\[1\].*not JSON"):
            _client(gateway, "m").chat.completions.create(
                model="tiny",
                tools=[BASH],
                messages=[{"role": "user", "content": "x"}, bad, {"role": "user", "content": "y"}],
            )
        assert gateway.session_ids() == []


def test_llama3_json_tool_calls_round_trip_token_exact(smollm2_tokenizer):
    """A Llama 3-style template: the form is detected from the template, the reply's JSON call
    parsed back, and the echoed call re-renders to the sampled ids (no prefix failure)."""
    tokenizer = copy.deepcopy(smollm2_tokenizer)
    tokenizer.chat_template = LLAMA_LIKE
    call = '{"name": "bash", "parameters": {"command": "ls"}}'
    engine = _Engine([call, "Done."], tokenizer)
    with Gateway(engine) as gateway:
        c = _client(gateway, "l")
        messages = [{"role": "user", "content": "Tests fail."}]
        first = c.chat.completions.create(model="tiny", messages=messages, tools=[BASH])
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls" and not choice.message.content
        (tc,) = choice.message.tool_calls
        assert (tc.function.name, json.loads(tc.function.arguments)) == ("bash", {"command": "ls"})
        messages.append(choice.message.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": tc.id, "content": "a.py"})
        second = c.chat.completions.create(model="tiny", messages=messages, tools=[BASH])
        assert second.choices[0].message.content == "Done."
        traj = gateway.trajectory("l")
    assert gateway.prefix_failures == 0
    assert [traj.conditioned_ids(t) for t in range(2)] == engine.prompts
    assert '"name": "bash"' in tokenizer.decode(engine.prompts[0])
    assert "ipython" in tokenizer.decode(traj.turns[1].prompt_delta_ids)


def test_llama3_json_form_parses_only_whole_json_calls():
    for text in (
        'I will call {"name": "x", "parameters": {}}',
        '{"name": "x", "parameters": 1}',
        '{"name": "x"',
        '["x"]',
        "plain",
    ):
        assert parse_tool_calls(text, "llama3_json") == (text, [])
    content, calls = parse_tool_calls(
        ' {"name": "a", "parameters": {"k": 1}}; {"name": "b", "parameters": {}}', "llama3_json"
    )
    assert content == ""
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("a", {"k": 1}),
        ("b", {}),
    ]
    # a ";" inside an argument is part of the call, not a separator
    (call,) = parse_tool_calls(
        '{"name": "bash", "parameters": {"command": "cd x; ls"}}', "llama3_json"
    )[1]
    assert json.loads(call["function"]["arguments"]) == {"command": "cd x; ls"}
    assert parse_tool_calls('{"name": "a", "parameters": {}} ;', "llama3_json")[1] == []
    # the Hermes form is not read in a Llama reply, nor the Llama form in a Hermes one
    hermes = '<tool_call>{"name": "a", "arguments": {}}</tool_call>'
    assert parse_tool_calls(hermes, "llama3_json") == (hermes, [])
    assert parse_tool_calls('{"name": "a", "parameters": {}}') == (
        '{"name": "a", "parameters": {}}',
        [],
    )
    with pytest.raises(ValueError, match="'xml'.*hermes"):
        parse_tool_calls("x", "xml")
