"""Token-exact chat: the ids of the initial prompt and of each appended message, never
re-tokenising earlier turns (chat templates are not append-only:
docs/methods.md#token-exact-trajectories).

The trick: render ``[dummy prefix + new message]`` and subtract the rendering of the dummy prefix.
The prefix is fixed (system, user, assistant), so the delta does not depend on the real history,
and the history's ids stay exactly what the model was conditioned on and sampled.

Templates close an assistant message with end-of-turn ids (ChatML: ``<|im_end|>`` ``\\n``). A
model that stopped on its end-of-turn token sampled the first of them; one cut off by length
sampled none. ``ChatTemplate.turn_filler(completion_ids)`` returns the ids still missing, which
the caller appends with loss mask 0 before the next message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_DUMMY_SYSTEM = "You are a dummy system prompt."
_DUMMY_USER = "Dummy user message."
_DUMMY_ASSISTANT = "Dummy assistant reply 7f3a."


class ChatTemplateError(ValueError):
    """The tokenizer's chat template cannot be used incrementally (or there is none)."""


def _ids(out: Any) -> list[int]:
    """``apply_chat_template(tokenize=True)`` returns a list, or a BatchEncoding (transformers 5)."""
    if isinstance(out, dict) or hasattr(out, "keys"):
        out = out["input_ids"]
    ids = list(out)
    if ids and isinstance(ids[0], list):  # batched form
        ids = ids[0]
    return [int(i) for i in ids]


class ChatTemplate:
    """Incremental, token-exact rendering of a chat through a tokenizer's chat template.

    Args:
        tokenizer: a Hugging Face tokenizer with ``chat_template`` set.
        observation_role: the role env observations are sent as (``"user"``, or ``"tool"`` for
            templates that render tool messages).
    """

    def __init__(self, tokenizer: Any, observation_role: str = "user"):
        if not getattr(tokenizer, "chat_template", None):
            raise ChatTemplateError(
                f"tokenizer {type(tokenizer).__name__} has no chat_template; set "
                "tokenizer.chat_template to a Jinja chat template"
            )
        self.tokenizer = tokenizer
        self.observation_role = observation_role
        self._prefix = [
            {"role": "system", "content": _DUMMY_SYSTEM},
            {"role": "user", "content": _DUMMY_USER},
            {"role": "assistant", "content": _DUMMY_ASSISTANT},
        ]
        self._prefix_ids = self._render(self._prefix, add_generation_prompt=False)
        self.end_of_turn_ids = self._end_of_turn_ids()

    def _render(self, messages: Sequence[dict[str, str]], add_generation_prompt: bool) -> list[int]:
        return _ids(
            self.tokenizer.apply_chat_template(
                list(messages), add_generation_prompt=add_generation_prompt, tokenize=True
            )
        )

    def _render_text(self, messages: Sequence[dict[str, str]], add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            list(messages), add_generation_prompt=add_generation_prompt, tokenize=False
        )

    def _end_of_turn_ids(self) -> list[int]:
        """Ids the template writes after an assistant message's content (``<|im_end|>\\n``)."""
        text = self._render_text(self._prefix, add_generation_prompt=False)
        at = text.rfind(_DUMMY_ASSISTANT)
        if at < 0:
            raise ChatTemplateError("the chat template does not render assistant content verbatim")
        suffix = text[at + len(_DUMMY_ASSISTANT) :]
        return list(self.tokenizer.encode(suffix, add_special_tokens=False)) if suffix else []

    def initial_ids(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """Ids of the whole first prompt (system + user), ending with the generation prompt."""
        return self._render(messages, add_generation_prompt=True)

    def message_delta_ids(self, message: dict[str, str]) -> list[int]:
        """Ids that append ``message`` after a closed assistant turn, plus the generation prompt."""
        full = self._render([*self._prefix, message], add_generation_prompt=True)
        n = len(self._prefix_ids)
        if full[:n] != self._prefix_ids:
            # The template re-renders earlier turns differently once more follow (not
            # append-only at the token level): fall back to the text difference, tokenised alone.
            base = self._render_text(self._prefix, add_generation_prompt=False)
            text = self._render_text([*self._prefix, message], add_generation_prompt=True)
            if not text.startswith(base):
                raise ChatTemplateError(
                    "the chat template re-renders earlier messages when one is appended; "
                    "it cannot be used token-exactly"
                )
            return list(self.tokenizer.encode(text[len(base) :], add_special_tokens=False))
        return full[n:]

    def observation_delta_ids(self, observation: str) -> list[int]:
        """Ids of an env observation sent as ``observation_role``, plus the generation prompt."""
        return self.message_delta_ids({"role": self.observation_role, "content": observation})

    def turn_filler(self, completion_ids: Sequence[int]) -> list[int]:
        """End-of-turn ids the template expects after ``completion_ids`` that were not sampled.

        Finds the longest prefix of ``end_of_turn_ids`` the completion already ends with (a model
        stopping on ``<|im_end|>`` sampled the first id; one cut by length, none) and returns the
        rest. These ids carry loss mask 0: the policy did not sample them.
        """
        eot = self.end_of_turn_ids
        for k in range(min(len(eot), len(completion_ids)), 0, -1):
            if list(completion_ids[-k:]) == eot[:k]:
                return eot[k:]
        return list(eot)
