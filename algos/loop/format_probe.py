"""How often the policy's replies parse as one action: RFT's per-epoch stopping signal.

A small model first has to learn the action format (one fenced block, or one tool call); until
then it resolves nothing and RL has no signal. Both probes use a fixed set of turn contexts
from the training trajectories (each turn's exact prompt tokens, the earlier turns as the
trajectory had them) and the learner's own model (no engine, no sandbox):

- ``greedy`` (cheap: one forward pass, no generation): the share of turns whose valid reply
  greedy decoding would reproduce token for token (every reply token is the argmax given the
  ones before it). A lower bound on greedy decoding's format-valid rate: another valid reply
  counts as a miss.
- ``sample``: samples one reply per context at the sampling temperature with ``generate`` and
  parses it as the env would (``swe_gym.tools.parsing.parse_action``): the format-valid rate
  itself, but on 2 contended CPU cores 16 contexts of ~450 tokens took 550 s (HF ``generate``).
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from algos.config.rft import RFTConfig
from swe_gym.tools.parsing import InvalidAction, parse_action

if TYPE_CHECKING:
    from algos.policy import Policy


def turn_contexts(trajectories: Sequence[Any], limit: int, seed: int = 0) -> list[list[int]]:
    """Up to ``limit`` turn contexts (token ids up to a completion), chosen at random."""
    out = []
    for traj in trajectories:
        ids: list[int] = []
        for turn in traj.turns:
            ids = ids + list(turn.prompt_delta_ids)
            out.append(ids)
            ids = ids + list(turn.completion_ids)
    random.Random(seed).shuffle(out)
    return out[:limit]


@torch.no_grad()
def greedy_match_rate(model: Any, trajectories: Sequence[Any], limit: int, seed: int = 0) -> float:
    """The share of up to ``limit`` valid turns (those of trajectories taken at random) whose
    reply is every token the argmax of the model given the turn's context and the reply's
    tokens before it."""
    order = list(range(len(trajectories)))
    random.Random(seed).shuffle(order)
    turns: list[
        tuple[int, int]
    ] = []  # whole trajectories at random: one forward pass scores all of its turns
    for k in order:
        for j, turn in enumerate(trajectories[k].turns):
            if not turn.invalid_action and turn.completion_ids and len(turns) < limit:
                turns.append((k, j))
    if not turns:
        raise ValueError("greedy_match_rate needs at least one valid turn")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    hits = 0
    try:
        for k in sorted({k for k, _ in turns}):
            ids: list[int] = []
            spans = {}
            for j, turn in enumerate(trajectories[k].turns):
                ids += list(turn.prompt_delta_ids)
                spans[j] = (len(ids), len(ids) + len(turn.completion_ids))
                ids += list(turn.completion_ids)
            x = torch.tensor([ids], device=device)
            hidden = model.model(input_ids=x).last_hidden_state[0]
            for kk, j in turns:
                if kk != k:
                    continue
                a, b = spans[j]  # position p predicts token p + 1
                pred = model.lm_head(hidden[a - 1 : b - 1]).argmax(-1)
                hits += bool((pred == x[0, a:b]).all())
    finally:
        model.train(was_training)
    return hits / len(turns)


@torch.no_grad()
def format_valid_rate(
    model: Any,
    tokenizer: Any,
    contexts: Sequence[list[int]],
    *,
    action_format: str = "fenced",
    max_new_tokens: int = 128,
    temperature: float = 1.0,
    seed: int = 0,
    batch_size: int = 16,
) -> float:
    """The share of sampled replies to ``contexts`` that parse as one action."""
    if not contexts:
        raise ValueError("format_valid_rate needs at least one context")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    torch.manual_seed(seed)
    valid = 0
    try:
        for i in range(0, len(contexts), batch_size):
            chunk = contexts[i : i + batch_size]
            width = max(len(c) for c in chunk)  # left padding: every reply starts at `width`
            ids = torch.tensor([[pad] * (width - len(c)) + c for c in chunk], device=device)
            mask = torch.tensor(
                [[0] * (width - len(c)) + [1] * len(c) for c in chunk], device=device
            )
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=True,
                temperature=temperature,
                top_k=0,
                top_p=1.0,
                max_new_tokens=max_new_tokens,
                pad_token_id=pad,
            )
            for row in out[:, width:]:
                text = tokenizer.decode(row, skip_special_tokens=True)
                valid += not isinstance(parse_action(text, action_format), InvalidAction)
    finally:
        model.train(was_training)
    return valid / len(contexts)


__all__ = ["format_valid_rate", "greedy_match_rate", "turn_contexts"]


class FormatProbe:
    """The per-epoch format probe (``probe_contexts``) and its plateau count."""

    def __init__(self, cfg: RFTConfig, policy: Policy, kept: Sequence[Any]):
        self.cfg = cfg
        self.policy = policy
        self.enabled = cfg.probe_contexts > 0
        self.kept = kept
        self.contexts = (
            turn_contexts(kept, cfg.probe_contexts, cfg.seed)
            if self.enabled and cfg.probe == "sample"
            else []
        )
        self.best = -1.0
        self.flat_for = 0  # epochs in a row without a rise

    def __call__(self, epoch: int) -> float:
        t0 = time.perf_counter()
        if self.cfg.probe == "greedy":
            rate = greedy_match_rate(
                self.policy.model, self.kept, self.cfg.probe_contexts, self.cfg.seed
            )
        else:
            rate = format_valid_rate(
                self.policy.model,
                self.policy.tokenizer,
                self.contexts,
                action_format=self.cfg.env_kwargs.get("action_format", "fenced"),
                max_new_tokens=self.cfg.max_new_tokens or 128,
                temperature=self.cfg.temperature,
                seed=self.cfg.seed + epoch,
            )
        self.flat_for = 0 if rate > self.best else self.flat_for + 1
        self.best = max(self.best, rate)
        print(
            f"rft: epoch {epoch}: format_valid ({self.cfg.probe}) {rate:.3f} on "
            f"{self.cfg.probe_contexts} turns ({time.perf_counter() - t0:.0f} s)",
            file=sys.stderr,
        )
        return rate
