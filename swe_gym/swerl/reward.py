"""The SWE-RL similarity reward (docs/methods.md#swe-rl).

``swerl_reward(response, files, oracle_patch)``: -1 on any format error (with a reason code);
otherwise apply the SEARCH/REPLACE edits, diff each changed file against its original (unified
diff, 3 lines of context, headers dropped) for the prediction and for the oracle (the gold
patch applied to the same files), score each file with
``difflib.SequenceMatcher(None, pred, oracle, autojunk=False).ratio()`` (0 where only one side
changed the file) and average over the union of changed files.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field

from swe_gym.swerl.apply import apply_edits, apply_patch
from swe_gym.swerl.format import FormatError, SearchReplaceEdit, parse_response

FORMAT_ERROR_REWARD = -1.0


@dataclass
class RewardResult:
    reward: float
    reason: str | None = None  # a key of swe_gym.swerl.format.REASONS when reward == -1
    detail: str = ""
    similarities: dict[str, float] = field(default_factory=dict)  # path -> ratio
    edits: list[SearchReplaceEdit] = field(default_factory=list)
    new_files: dict[str, str] = field(default_factory=dict)  # path -> predicted content
    thought: str = ""

    @property
    def format_ok(self) -> bool:
        return self.reason is None


def unified_diff_body(old: str, new: str, context: int = 3) -> str:
    """Unified diff of two texts with the ``---``/``+++`` headers dropped ("" if equal).

    Lines split with ``str.splitlines`` as in the SWE-RL reference code, so the figures match."""
    diff = difflib.unified_diff(
        old.splitlines(), new.splitlines(), fromfile="old", tofile="new", lineterm="", n=context
    )
    lines = list(diff)
    return "\n".join(lines[2:])


def change_similarities(
    files: Mapping[str, str],
    pred_new: Mapping[str, str | None],
    oracle_new: Mapping[str, str | None],
) -> dict[str, float]:
    """Per-file similarity over the union of files either side changed (docs/methods.md#swe-rl)."""
    pred = {p: unified_diff_body(files.get(p, ""), c or "") for p, c in pred_new.items()}
    oracle = {p: unified_diff_body(files.get(p, ""), c or "") for p, c in oracle_new.items()}
    pred = {p: d for p, d in pred.items() if d}
    oracle = {p: d for p, d in oracle.items() if d}
    out: dict[str, float] = {}
    for path in sorted(set(pred) | set(oracle)):
        a, b = pred.get(path, ""), oracle.get(path, "")
        # Only one side changed the file: 0 (also stops a "change nothing" hack).
        out[path] = difflib.SequenceMatcher(None, a, b, autojunk=False).ratio() if a and b else 0.0
    return out


def swerl_reward(response: str, files: Mapping[str, str], oracle_patch: str) -> RewardResult:
    """Score one model response. ``files``: path -> content at base commit (the code context;
    it must hold every file the gold patch modifies). Never raises on model output; raises
    ``PatchApplyError`` if the *oracle* patch does not apply to ``files`` (a data bug)."""
    oracle_new = apply_patch(files, oracle_patch)
    try:
        parsed = parse_response(response)
        pred_new = apply_edits(files, parsed.edits)
    except FormatError as e:
        return RewardResult(FORMAT_ERROR_REWARD, reason=e.reason, detail=e.detail)
    sims = change_similarities(files, pred_new, oracle_new)
    # Neither side changed anything (the edits cancel out and the oracle is empty): the
    # prediction equals the oracle. The reference code asserts this cannot happen; say 1.
    reward = sum(sims.values()) / len(sims) if sims else 1.0
    return RewardResult(
        reward=reward,
        similarities=sims,
        edits=parsed.edits,
        new_files=pred_new,
        thought=parsed.thought,
    )
