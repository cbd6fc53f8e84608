"""SWE-RL: single-turn patch generation with a rule-based similarity reward
(docs/methods.md#swe-rl).

- ``format``: parse ``<think>...</think><solution>...</solution>`` and SEARCH/REPLACE blocks.
- ``apply``: apply edits and unified diffs to in-memory files; write git patches.
- ``reward``: ``swerl_reward(response, files, oracle_patch) -> RewardResult``.
- ``context``: files at a commit from a local clone; pluggable relevant-file selectors (BM25).
- ``prompt``: the SWE-RL system prompt and user prompt.
"""

from swe_gym.swerl.apply import (
    PatchApplyError,
    apply_edits,
    apply_patch,
    edits_from_patch,
    make_patch,
    parse_patch,
)
from swe_gym.swerl.format import (
    REASONS,
    FormatError,
    ParsedResponse,
    SearchReplaceEdit,
    parse_edits,
    parse_response,
    render_response,
)
from swe_gym.swerl.reward import FORMAT_ERROR_REWARD, RewardResult, swerl_reward, unified_diff_body

__all__ = [
    "FORMAT_ERROR_REWARD",
    "REASONS",
    "FormatError",
    "ParsedResponse",
    "PatchApplyError",
    "RewardResult",
    "SearchReplaceEdit",
    "apply_edits",
    "apply_patch",
    "edits_from_patch",
    "make_patch",
    "parse_edits",
    "parse_patch",
    "parse_response",
    "render_response",
    "swerl_reward",
    "unified_diff_body",
]
