"""What the gateway accepts: the request body's size and nesting, and every field of a chat request.

All of it is checked before a session is touched or the engine runs, so a refused request records
nothing and never reaches a batch it could fail. Each refusal is an :class:`APIError` (OpenAI's
error form, a 4xx) naming the field and what is accepted. The limits (:class:`Limits`):

- ``max_body_bytes`` (4 MiB): checked from ``Content-Length`` and while a chunked body is read,
  before parsing (a 413). Tokenising costs about 200 bytes per character of text (SmolLM2's
  tokenizer, measured), so the cap also bounds the memory one request can claim; 4 MiB holds a
  128k-token history several times over.
- the messages' text: more characters than the context's tokens times the tokenizer's longest
  token cannot fit, and is refused before tokenising (``context_length_exceeded``).
- ``max_depth`` (64): arrays and objects nested in the body, checked before parsing (deep JSON
  would otherwise exhaust the parser's recursion). A tool's JSON schema ten levels deep uses ~25.
- ``max_messages`` (4096) per request; ``max_tokens`` (default: the model's context) per reply.
- ``seed`` in [-2^63, 2^63) (a signed 64-bit integer: what OpenAI documents and the engines
  take); ``n`` 1; ``stop`` up to 4 strings of up to 256 characters (checked every sampled token).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from agents.gateway.tools import normalize_tool_calls
from agents.protocols import SamplingParams

ROLES = ("system", "user", "assistant", "tool")
SEED_RANGE = (-(2**63), 2**63)  # [low, high)
MAX_STOP = 4
MAX_STOP_CHARS = 256
# Accepted only at their no-op values: anything else would change sampling without being honoured.
_NOOP_PARAMS: dict[str, tuple[Any, ...]] = {
    "frequency_penalty": (0, 0.0, None),
    "presence_penalty": (0, 0.0, None),
    "logit_bias": (None, {}),
    "tool_choice": (None, "none", "auto"),
    "functions": (None, []),
    "response_format": (None, {"type": "text"}),
    "logprobs": (None, False),
    "top_logprobs": (None, 0),
}
# Fields that change nothing here, checked for their type only: (types, what to say).
_PASSIVE: dict[str, tuple[tuple[type, ...], str]] = {
    "user": ((str,), "a string"),
    "metadata": ((dict,), "an object"),
    "store": ((bool,), "true or false"),
    "parallel_tool_calls": ((bool,), "true or false"),
}
_OTHER = {"model", "messages", "tools", "stream", "stream_options"}
_SAMPLING = {"temperature", "top_p", "max_tokens", "max_completion_tokens", "seed", "stop", "n"}
_STREAM_OPTIONS = ("include_usage", "include_obfuscation")


@dataclass(frozen=True)
class Limits:
    """What one request may ask of the gateway (the module docstring gives the reasons)."""

    max_body_bytes: int = 4 * 1024 * 1024
    max_depth: int = 64
    max_messages: int = 4096
    max_tokens: int | None = None  # None: the context limit, when the model has one

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_depth", "max_messages", "max_tokens"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"Limits.{name} must be a positive integer, got {value!r}")


class APIError(Exception):
    """An OpenAI-style error response."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type = "invalid_request_error" if status < 500 else "server_error"
        self.headers = headers

    def response(self) -> JSONResponse:
        body = {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        return JSONResponse({"error": body}, status_code=self.status, headers=self.headers)


# -- the body -----------------------------------------------------------------------------------
def _too_large(size: str, cap: int) -> APIError:
    return APIError(
        413,
        f"the request body is {size} bytes; this gateway accepts at most {cap} "
        "(Limits.max_body_bytes, --max-body-bytes)",
        None,
        "request_too_large",
    )


async def read_body(request: Request, cap: int) -> bytes:
    """The body, refused (413) from its ``Content-Length`` or as soon as the chunks read pass
    ``cap``: never held whole when too long."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise APIError(400, f"Content-Length must be a byte count, got {declared!r}")
        if int(declared) > cap:
            raise _too_large(declared, cap)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise _too_large(f"more than {cap}", cap)
        chunks.append(chunk)
    return b"".join(chunks)


# A JSON string (escapes included), optionally a key (followed by ':'), or a bracket.
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"(\s*:)?|[\[\]{}]')


def _too_deep(raw: bytes, limit: int) -> APIError | None:
    """The refusal for a body nested deeper than ``limit``, naming its top-level field; found
    by scanning the text, so the parser never recurses that deep."""
    depth, field = 0, None
    for m in _TOKEN.finditer(raw):
        c = raw[m.start()]
        if c in b"[{":
            depth += 1
            if depth > limit:
                where = f"{field} nests" if field else "the request body nests"
                return APIError(
                    400,
                    f"{where} arrays/objects more than {limit} levels deep; at most {limit} "
                    "are accepted (Limits.max_depth)",
                    field,
                )
        elif c in b"]}":
            depth -= 1
        elif depth == 1 and m.group(1):
            field = json.loads(raw[m.start() : m.end(1) - 1].rstrip())
    return None


def parse_json(raw: bytes, max_depth: int) -> dict[str, Any]:
    """The body as a JSON object, or a 400 saying why not (CPU-bound: call it off the loop)."""
    deep = _too_deep(raw, max_depth)
    if deep is not None:
        raise deep
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as e:  # ValueError: also ints past Python's digit limit
        raise APIError(400, f"request body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise APIError(400, f"request body must be a JSON object, got {type(body).__name__}")
    return body


# -- the fields ---------------------------------------------------------------------------------
def _number(body: dict, name: str, low: float, high: float, default: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise APIError(400, f"{name} must be a number in [{low}, {high}], got {value!r}", name)
    return float(value)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def sampling_params(
    body: dict[str, Any], default_max_tokens: int, max_tokens_cap: int | None = None
) -> SamplingParams:
    """The request's sampling settings, or an ``APIError`` naming the bad field. A ``max_tokens``
    the request sets must be at most ``max_tokens_cap``."""
    for name, allowed in _NOOP_PARAMS.items():
        if body.get(name) not in allowed:
            hint = " (the model decides: use 'auto')" if name == "tool_choice" else ""
            raise APIError(400, f"{name}={body[name]!r} is not supported{hint}", name)
    for name, (types, what) in _PASSIVE.items():
        if body.get(name) is not None and not isinstance(body[name], types):
            raise APIError(400, f"{name} must be {what}, got {body[name]!r:.80}", name)
    unknown = sorted(set(body) - set(_NOOP_PARAMS) - set(_PASSIVE) - _OTHER - _SAMPLING)
    if unknown:
        raise APIError(400, f"unsupported parameters {unknown}", unknown[0])
    n = body.get("n", 1)
    if n is not None and (not _integer(n) or n != 1):
        raise APIError(400, f"n must be 1 (one sample per request), got {n!r}", "n")
    field = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    asked = body.get(field)
    high = max_tokens_cap or 2**31 - 1  # the engines' 32-bit limit
    if asked is not None and (not _integer(asked) or not 1 <= asked <= high):
        raise APIError(400, f"{field} must be an integer in [1, {high}], got {asked!r:.40}", field)
    seed = body.get("seed")
    low, top = SEED_RANGE
    if seed is not None and (not _integer(seed) or not low <= seed < top):
        raise APIError(400, f"seed must be an integer in [-2**63, 2**63), got {seed!r:.40}", "seed")
    stop = body.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    if (
        not isinstance(stop, list)
        or not all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS for s in stop)
        or len(stop) > MAX_STOP
    ):
        raise APIError(
            400,
            f"stop must be a string or up to {MAX_STOP} strings, each of 1 to {MAX_STOP_CHARS} "
            f"characters, got {body['stop']!r:.80}",
            "stop",
        )
    top_p = _number(body, "top_p", 0.0, 1.0, 1.0)
    if top_p == 0:
        raise APIError(400, "top_p must be in (0, 1], got 0", "top_p")
    return SamplingParams(
        temperature=_number(body, "temperature", 0.0, 2.0, 1.0),
        top_p=top_p,
        max_new_tokens=default_max_tokens if asked is None else asked,
        seed=seed,
        stop=stop,
    )


def _content(message: dict[str, Any], index: int) -> str:
    content = message.get("content")
    if content is None and message.get("role") == "assistant":
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        for p in content
    ):
        return "".join(p["text"] for p in content)
    raise APIError(400, f"messages[{index}].content must be text, got {content!r:.80}", "messages")


def parse_messages(body: dict[str, Any], max_messages: int = 2**31) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise APIError(400, "messages must be a non-empty list of messages", "messages")
    if len(messages) > max_messages:
        raise APIError(
            400,
            f"messages holds {len(messages)} messages; at most {max_messages} are accepted "
            "(Limits.max_messages)",
            "messages",
        )
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise APIError(400, f"messages[{i}] must have a role in {list(ROLES)}", "messages")
        if m.get("function_call"):
            raise APIError(400, f"messages[{i}]: use tool_calls, not function_call", "messages")
        for key in ("name", "tool_call_id"):
            if m.get(key) is not None and not isinstance(m[key], str):
                raise APIError(400, f"messages[{i}].{key} must be a string", "messages")
        if m.get("tool_calls"):
            try:
                normalize_tool_calls(m["tool_calls"], f"messages[{i}]")
            except ValueError as e:
                raise APIError(400, str(e), "messages") from None
        out.append({**m, "content": _content(m, i)})
    if out[-1]["role"] == "assistant":
        raise APIError(400, "the last message must not be an assistant message", "messages")
    return out


def parse_tools(body: dict[str, Any]) -> list[dict[str, Any]] | None:
    tools = body.get("tools")
    if not tools:
        return None
    ok = isinstance(tools, list) and all(
        isinstance(t, dict)
        and t.get("type") == "function"
        and isinstance(t.get("function"), dict)
        and isinstance(t["function"].get("name"), str)
        and isinstance(t["function"].get("parameters", {}), dict)
        for t in tools
    )
    if not ok:
        raise APIError(
            400,
            'tools must be a list of {"type": "function", "function": {"name": ..., '
            '"parameters": {JSON schema object}}}',
            "tools",
        )
    return tools


def stream_flags(body: dict[str, Any]) -> tuple[bool, bool]:
    """``(stream, include_usage)``; ``stream_options`` is checked even when not streaming."""
    stream = body.get("stream")
    if stream not in (None, True, False):
        raise APIError(400, f"stream must be true or false, got {stream!r:.40}", "stream")
    options = body.get("stream_options")
    if options is None:
        return bool(stream), False
    if not isinstance(options, dict) or not all(
        k in _STREAM_OPTIONS and isinstance(v, bool) for k, v in options.items()
    ):
        raise APIError(
            400,
            f"stream_options must be an object with true/false {list(_STREAM_OPTIONS)}, got "
            f"{options!r:.80}",
            "stream_options",
        )
    return bool(stream), bool(options.get("include_usage"))


def check_prompt_chars(
    messages: list[dict[str, Any]], longest_token: int | None, limit: int | None
) -> None:
    """Refuse, before tokenising, messages whose text cannot fit ``limit`` tokens since no token
    covers more than ``longest_token`` characters."""
    if longest_token is None or limit is None:
        return
    # Stripped: a template may trim content. Assistant turns are left out: a template may drop
    # parts of them (Qwen3's past <think>), and in a session they are the ids already sampled.
    chars = sum(len(m["content"].strip()) for m in messages if m["role"] != "assistant")
    if chars > longest_token * limit:
        raise APIError(
            400,
            f"this model's context is {limit} tokens and its longest token is {longest_token} "
            f"characters; the messages hold {chars} characters, more than can fit: shorten them",
            "messages",
            "context_length_exceeded",
        )
