"""A seed-driven scripted model for the branching tests: each turn's reply depends on the turn's
sampling seed (which the agent derives from the task, the episode seed and, after a fork, the
branch index), so branches of one trunk differ after the branch turn while the trunk's turns are
reproducible. No weights; token ids from a real tokenizer; log-probs 0."""

from __future__ import annotations

import threading

from agents.models import ScriptedModel
from agents.protocols import Conversation, Generation, SamplingParams


class SeededScript(ScriptedModel):
    """Turn t (0-based) with seed s: ``echo s % 1000`` until ``min_submit``; from then on it
    submits when ``s % 3 == 0`` or at turn ``max_submit`` (so episodes differ in length)."""

    def __init__(self, tokenizer, min_submit: int = 2, max_submit: int = 4, name: str = "seeded"):
        super().__init__(self._reply_for, tokenizer=tokenizer, name=name)
        self.min_submit, self.max_submit = min_submit, max_submit
        self._local = threading.local()  # the seed of the call this thread is in

    def _reply_for(self, conv: Conversation) -> str:
        turn = sum(1 for m in conv.messages if m["role"] == "assistant")
        seed = self._local.seed or 0
        if turn >= self.max_submit or (turn >= self.min_submit and seed % 3 == 0):
            return "Done.\n```\nsubmit\n```"
        return f"Look {seed % 1000}.\n```\necho {seed % 1000}\n```"

    def generate(self, conversation: Conversation, params: SamplingParams) -> Generation:
        self._local.seed = params.seed
        return super().generate(conversation, params)
