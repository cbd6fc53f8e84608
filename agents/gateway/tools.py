"""Tool (function) calls in the form the model's chat template supports.

A request's ``tools`` are rendered by the tokenizer's own chat template
(``apply_chat_template(..., tools=tools)``), and assistant ``tool_calls`` and ``role: tool``
messages in the history go through it as well. A completion is parsed back into OpenAI
``tool_calls`` when the model wrote the template's call form. Two forms are read back, told
apart by how the template renders a probe call:

- ``hermes``: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks, anywhere in
  the text (Qwen2.5, Qwen3, Hermes, and the templates that copied them);
- ``llama3_json``: the whole reply is ``{"name": ..., "parameters": {...}}`` (Llama 3.1-3.3's
  JSON tool calling; several calls separated by ``;``, as vLLM's parser of that name reads).

A template that ignores ``tools`` (SmolLM2's plain ChatML), or writes calls in another form, gets
a 400 naming the model rather than a silent prompt without the tools.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

HERMES = "hermes"
LLAMA3_JSON = "llama3_json"
TOOL_CALL_FORMS = (HERMES, LLAMA3_JSON)
_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_LLAMA3_PROBE = re.compile(r'\{"name":\s*"probe_tool_7f3a",\s*"parameters":\s*\{"x":\s*"y"\}\}')
_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "probe_tool_7f3a",
        "description": "Probe.",
        "parameters": {"type": "object", "properties": {"x": {"type": "string"}}},
    },
}
_PROBE_CALL = {"type": "function", "function": {"name": "probe_tool_7f3a", "arguments": {"x": "y"}}}


class ToolSupportError(ValueError):
    """The chat template cannot render tools, or writes calls in a form not read back."""


def render_text(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    generation_prompt: bool,
    tools: list[dict[str, Any]] | None = None,
) -> str:
    kw = {"tools": tools} if tools else {}
    return tokenizer.apply_chat_template(
        list(messages), add_generation_prompt=generation_prompt, tokenize=False, **kw
    )


def tool_call_form(tokenizer: Any) -> str:
    """The form (``TOOL_CALL_FORMS``) in which the template renders tools and writes calls;
    else a ``ToolSupportError`` saying what is missing."""
    user = [{"role": "user", "content": "x"}]
    try:
        with_tools = render_text(tokenizer, user, True, [_PROBE_TOOL])
        called = render_text(
            tokenizer,
            [*user, {"role": "assistant", "content": "", "tool_calls": [_PROBE_CALL]}],
            False,
            [_PROBE_TOOL],
        )
    except Exception as e:  # noqa: BLE001 - a template that chokes on tools has no tool support
        raise ToolSupportError(f"its chat template fails on tools ({type(e).__name__}: {e})") from e
    if "probe_tool_7f3a" not in with_tools:
        raise ToolSupportError("its chat template has no tool support (it does not render tools)")
    if "<tool_call>" in called and "probe_tool_7f3a" in called:
        return HERMES
    if _LLAMA3_PROBE.search(called):
        return LLAMA3_JSON
    raise ToolSupportError(
        "its chat template writes tool calls in a form the gateway does not parse back "
        '(supported: Hermes/Qwen <tool_call>{json}</tool_call>, Llama 3 {"name": ..., '
        '"parameters": {...}})'
    )


def normalize_tool_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    """Assistant ``tool_calls`` as the template renders them: arguments as a mapping (templates
    ``tojson`` them; a string would be rendered quoted). ``ValueError`` naming ``where``."""
    if not isinstance(calls, list):
        raise ValueError(f"{where}.tool_calls must be a list, got {calls!r:.80}")
    out = []
    for i, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ValueError(f"{where}.tool_calls[{i}] needs function.name, got {call!r:.80}")
        args = fn.get("arguments") or {}
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                raise ValueError(
                    f"{where}.tool_calls[{i}].function.arguments is not JSON: {args!r:.80}"
                ) from None
        entry: dict[str, Any] = {
            "type": "function",
            "function": {"name": fn["name"], "arguments": args},
        }
        if call.get("id"):
            entry["id"] = call["id"]
        out.append(entry)
    return out


def _wire_call(data: Any, args_key: str) -> dict[str, Any] | None:
    """One parsed call in OpenAI's wire form, or None unless ``{"name": str, args_key: {...}}``."""
    args = data.get(args_key, {}) if isinstance(data, dict) else None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("name"), str)
        or not isinstance(args, dict)
    ):
        return None
    return {
        "id": "call_" + secrets.token_hex(12),
        "type": "function",
        "function": {"name": data["name"], "arguments": json.dumps(args)},
    }


def _wire_calls(payloads: list[Any], args_key: str) -> list[dict[str, Any]] | None:
    """Every payload as a wire call, or None if any is not one."""
    calls = [_wire_call(data, args_key) for data in payloads]
    return None if any(c is None for c in calls) else calls  # type: ignore[return-value]


def _json_objects(body: str) -> list[Any]:
    """The JSON values of ``body``, separated by ``;`` (a ``;`` inside a string is kept);
    ``json.JSONDecodeError`` if it is anything else."""
    decoder, out, i = json.JSONDecoder(), [], 0
    while True:
        data, i = decoder.raw_decode(body, len(body) - len(body[i:].lstrip()))
        out.append(data)
        rest = body[i:].lstrip()
        if not rest:
            return out
        if not rest.startswith(";"):
            raise json.JSONDecodeError("expected ';' between calls", body, len(body) - len(rest))
        i = len(body) - len(rest) + 1


def _hermes(text: str) -> tuple[str, list[Any], str] | None:
    blocks = _CALL.findall(text)
    if not blocks:
        return None
    return _CALL.sub("", text).strip(), [json.loads(block) for block in blocks], "arguments"


def _llama3(text: str) -> tuple[str, list[Any], str] | None:
    body = text.strip()
    return ("", _json_objects(body), "parameters") if body.startswith("{") else None


# form -> (content, call payloads, the payload's arguments key), None if no call is attempted;
# json.JSONDecodeError on a malformed one
_READERS = {HERMES: _hermes, LLAMA3_JSON: _llama3}


def parse_tool_calls(text: str, form: str = HERMES) -> tuple[str, list[dict[str, Any]]]:
    """``(content, tool_calls)`` of a completion in ``form``: the text outside the calls and
    the calls in OpenAI's wire form (arguments as a JSON string). A call that is not
    well-formed JSON of the form leaves the whole text as content and no calls: the model did
    not make a call."""
    if form not in _READERS:
        raise ValueError(f"unknown tool-call form {form!r}; choose one of {TOOL_CALL_FORMS}")
    try:
        read = _READERS[form](text)
    except json.JSONDecodeError:
        return text, []
    if read is None:
        return text, []
    content, payloads, args_key = read
    calls = _wire_calls(payloads, args_key)
    return (content, calls) if calls is not None else (text, [])
