"""The token ids a chat request adds to a gateway session (the rule: ``agents.gateway.sessions``).

:class:`TokenRenderer` renders a request through the model's own chat template: the ids of a
first request, or of the messages appended to a session's history (with the end-of-turn filler
the model did not sample), or the reason the request does not extend the history. Requests with
``tools`` are rendered by the template with the tools (``agents.gateway.tools``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agents.chat import ChatTemplate, ChatTemplateError
from agents.gateway.tools import (
    ToolSupportError,
    normalize_tool_calls,
    render_text,
    tool_call_form,
)


def longest_token_chars(tokenizer: Any) -> int | None:
    """The most characters one token decodes to, bounded by its vocabulary's longest spelling
    (byte-level and SentencePiece vocabularies spell a token with at least as many characters
    as it decodes to); ``None`` when the tokenizer has no vocabulary to read."""
    try:
        return max(map(len, tokenizer.get_vocab()), default=0) or None
    except (AttributeError, NotImplementedError, TypeError):
        return None


def normalize_message(message: dict[str, Any]) -> dict[str, Any]:
    """The parts of a message the template renders (clients echo back extra null fields)."""
    out: dict[str, Any] = {"role": message["role"], "content": message.get("content") or ""}
    for key in ("name", "tool_call_id"):
        if message.get(key):
            out[key] = message[key]
    if message.get("tool_calls"):
        out["tool_calls"] = normalize_tool_calls(message["tool_calls"], "message")
    return out


def uses_tools(messages: Sequence[dict[str, Any]], tools: list | None) -> bool:
    return bool(tools) or any(m["role"] == "tool" or m.get("tool_calls") for m in messages)


class TokenRenderer:
    """Exact ids for chat requests, from one tokenizer's chat template (``name``: the model's,
    in errors)."""

    def __init__(self, tokenizer: Any, name: str):
        self.template = ChatTemplate(tokenizer)
        self.name = name
        self._tool_form: str | ToolSupportError | None = None
        self._generation_prompt = self._generation_prompt_ids()

    def render_text(
        self, messages: Sequence[dict[str, Any]], generation_prompt: bool, tools: list | None = None
    ) -> str:
        return render_text(self.template.tokenizer, list(messages), generation_prompt, tools)

    def encode(self, text: str) -> list[int]:
        return list(self.template.tokenizer.encode(text, add_special_tokens=False))

    def check_tools(self) -> None:
        """``ToolSupportError`` naming the model when its template cannot take ``tools``."""
        if self._tool_form is None:
            try:
                self._tool_form = tool_call_form(self.template.tokenizer)
            except ToolSupportError as e:
                self._tool_form = e
        if isinstance(self._tool_form, ToolSupportError):
            raise ToolSupportError(f"model {self.name!r}: {self._tool_form}")

    @property
    def tool_form(self) -> str:
        """The template's tool-call form (``agents.gateway.tools.TOOL_CALL_FORMS``)."""
        self.check_tools()
        assert isinstance(self._tool_form, str)
        return self._tool_form

    def initial_ids(self, messages: list[dict[str, Any]], tools: list | None) -> list[int]:
        """The whole request rendered, ending with the generation prompt."""
        if uses_tools(messages, tools):
            return self.encode(self.render_text(messages, True, tools))
        return self.template.initial_ids(messages)

    def _generation_prompt_ids(self) -> list[int]:
        """Ids of the generation prompt, to drop from all but the last appended message."""
        user = {"role": "user", "content": "Dummy follow-up."}
        try:
            with_prompt = self.template.message_delta_ids(user)
        except ChatTemplateError:
            return []  # not append-only: every later turn is rendered whole (see extension)
        text = self.render_text([user], True)
        bare = self.render_text([user], False)
        if not text.startswith(bare):
            return []
        ids = self.encode(text[len(bare) :])
        return ids if ids and with_prompt[-len(ids) :] == ids else []

    def _appended_ids(self, new: Sequence[dict[str, Any]]) -> list[int]:
        ids: list[int] = []
        gp = self._generation_prompt
        for message in new[:-1]:
            delta = self.template.message_delta_ids(message)
            if gp and delta[-len(gp) :] == gp:
                delta = delta[: -len(gp)]
            ids += delta
        return ids + self.template.message_delta_ids(new[-1])

    def extension(
        self,
        old: list[dict[str, Any]],
        old_tools: list | None,
        last_completion: Sequence[int],
        messages: list[dict[str, Any]],
        tools: list | None,
    ) -> tuple[list, str]:
        """``(delta_ids, "")`` if ``messages`` extends the history ``old`` (rendered with
        ``old_tools``, its last reply sampled as ``last_completion``), else ``([], why)``."""
        if not old:
            return [], ""
        if len(messages) <= len(old) or messages[: len(old)] != old:
            return [], "the request's messages do not extend the session's history plus reply"
        if (tools or None) != old_tools:
            return [], "the request's tools differ from the session's"
        new = messages[len(old) :]
        base = self.render_text(old, False, tools)
        full = self.render_text(messages, True, tools)
        if not full.startswith(base):
            return [], "the chat template re-renders earlier messages (not append-only)"
        if uses_tools(messages, tools):
            delta = self.encode(full[len(base) :])
        else:
            try:
                delta = self._appended_ids(new)
            except ChatTemplateError as e:
                return [], f"chat template: {e}"
        return self.template.turn_filler(last_completion) + delta, ""
