"""Difficulty tiers: which candidates a tier keeps and what its issue text may add.

``all`` keeps every operator's mutations and writes the issue from the failing tests alone.
``easy`` is meant for very small models: only the most local operators (one token or one
expression changed, the right code inferable from the code around it), only edits that touch a
single line, an issue that also names the file and the function, and a gold patch with one
line of context. It still never quotes the
edited line: the location line goes through the same guard as the rest of the text.
"""

from __future__ import annotations

from swe_gym.errors import unknown_choice
from swe_gym.synth.source import Mutation

# A flipped comparison or boolean, a shifted boundary, a swapped operator or argument pair, an
# off-by-one: each is fixed by reading the line. Changed constants, wrong return values and
# removed statements are left out, as the original is not recoverable from the buggy code.
EASY_OPERATORS = (
    "comparison_flip",
    "boundary_shift",
    "boolean_flip",
    "arithmetic_swap",
    "off_by_one",
    "swap_arguments",
)
TIERS = ("all", "easy")


def check_tier(tier: str) -> str:
    if tier not in TIERS:
        raise unknown_choice("tier", tier, TIERS)
    return tier


def tier_operators(tier: str, operators: list[str] | None) -> list[str] | None:
    """The operators a tier runs: ``easy`` narrows ``operators`` (or all) to the local ones."""
    if check_tier(tier) == "all":
        return operators
    chosen = [o for o in (operators or EASY_OPERATORS) if o in EASY_OPERATORS]
    if not chosen:
        raise ValueError(
            f"tier 'easy' runs only {', '.join(EASY_OPERATORS)}; none of {operators} is one"
        )
    return chosen


def keeps(tier: str, mutation: Mutation, text: str) -> bool:
    """Whether ``tier`` keeps a candidate (``easy``: the edit stays on one line)."""
    if tier == "all":
        return True
    old = text[mutation.start : mutation.end]
    return "\n" not in old and "\n" not in mutation.replacement


def patch_context(tier: str) -> int:
    """Context lines of the gold patch: ``easy`` keeps one, so the oracle's edit (old text =
    context and removed lines) is three lines, short enough for a small model to imitate."""
    return 1 if tier == "easy" else 3


def location_hint(tier: str, path: str, qualname: str) -> str | None:
    """The issue's extra line for ``tier`` (``easy``: the file and function), else None."""
    if tier != "easy":
        return None
    return f"The problem is in `{path}`, in the function `{qualname}`."


__all__ = [
    "EASY_OPERATORS",
    "TIERS",
    "check_tier",
    "keeps",
    "location_hint",
    "patch_context",
    "tier_operators",
]
