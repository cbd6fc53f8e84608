"""Tool (function) calls in the form the model's chat template supports.

A request's ``tools`` are rendered by the tokenizer's own chat template
(``apply_chat_template(..., tools=tools)``), and assistant ``tool_calls`` and ``role: tool``
messages in the history go through it as well. A completion is parsed back into OpenAI
``tool_calls`` when the model wrote the template's call form. The one form read back is
Hermes/Qwen's ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Qwen2.5, Qwen3,
Hermes, and the templates that copied them). A template that ignores ``tools`` (SmolLM2's plain
ChatML), or writes calls in another form, gets a 400 naming the model rather than a silent
prompt without the tools.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

HERMES = "hermes"
_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
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
    """``HERMES`` if the template renders tools and writes calls as ``<tool_call>`` blocks;
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
    if "<tool_call>" not in called or "probe_tool_7f3a" not in called:
        raise ToolSupportError(
            "its chat template writes tool calls in a form the gateway does not parse back "
            "(supported: Hermes/Qwen <tool_call>{json}</tool_call>)"
        )
    return HERMES


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


def parse_tool_calls(text: str) -> tuple[str, list[dict[str, Any]]]:
    """``(content, tool_calls)`` of a Hermes-form completion: the text outside the
    ``<tool_call>`` blocks and the calls in OpenAI's wire form (arguments as a JSON string).
    A block that is not ``{"name": str, "arguments": object}`` JSON leaves the whole text as
    content and no calls: the model did not make a well-formed call."""
    blocks = _CALL.findall(text)
    if not blocks:
        return text, []
    calls = []
    for block in blocks:
        try:
            data = json.loads(block)
        except json.JSONDecodeError:
            return text, []
        args = data.get("arguments", {}) if isinstance(data, dict) else None
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("name"), str)
            or not isinstance(args, dict)
        ):
            return text, []
        calls.append(
            {
                "id": "call_" + secrets.token_hex(12),
                "type": "function",
                "function": {"name": data["name"], "arguments": json.dumps(args)},
            }
        )
    return _CALL.sub("", text).strip(), calls
