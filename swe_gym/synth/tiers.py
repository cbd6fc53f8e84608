"""Difficulty tiers: which candidates a tier keeps and what its issue text may add.

``guided`` is the bottom rung, for learning the tools and the action format rather than
debugging: the easy tier's operators and single-line edits, kept only where the buggy line's
text occurs once in its file, and an issue that states the file, the function, the line as it
is and the line as it should be. The fix is then a faithful copy of what the agent reads (one
``str_replace`` of the quoted text, then ``submit``); the gold patch has no context lines, so
the oracle's edit is exactly the quoted pair.

``located`` is the rung above it: the same candidates, and an issue that states the file, the
function and the line as it is, and names the kind of mistake (a flipped comparison, a boundary
off by one, ...) without the corrected line. The agent finds the line by copying, as on
``guided``, and has to work out the fix, a one-token edit of that line.

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
TIERS = ("all", "easy", "located", "guided")
LOCAL_TIERS = ("easy", "located", "guided")  # the tiers that run only EASY_OPERATORS on one line
QUOTING_TIERS = ("located", "guided")  # the tiers whose issue quotes the buggy line
# What the located tier's issue says of the line, per operator: the kind of mistake, never the
# corrected text (each operator's variants in operators.py fit its sentence).
MISTAKES = {
    "comparison_flip": "its comparison is inverted",
    "boundary_shift": "its comparison is off by one at the boundary (< for <=, > for >=, or back)",
    "boolean_flip": "a boolean in it is inverted (and for or, a not added or dropped, True for False)",
    "arithmetic_swap": "an arithmetic operator or the order of its operands is wrong",
    "off_by_one": "an index, slice bound or range bound in it is off by one",
    "swap_arguments": "the first two arguments of a call in it are swapped",
}


def check_tier(tier: str) -> str:
    if tier not in TIERS:
        raise unknown_choice("tier", tier, TIERS)
    return tier


def tier_operators(tier: str, operators: list[str] | None) -> list[str] | None:
    """The operators a tier runs: ``easy`` and ``guided`` narrow ``operators`` (or all) to the
    local ones."""
    if check_tier(tier) == "all":
        return operators
    chosen = [o for o in (operators or EASY_OPERATORS) if o in EASY_OPERATORS]
    if not chosen:
        raise ValueError(
            f"tier {tier!r} runs only {', '.join(EASY_OPERATORS)}; none of {operators} is one"
        )
    return chosen


def keeps(tier: str, mutation: Mutation, text: str) -> bool:
    """Whether ``tier`` keeps a candidate (``easy``: the edit stays on one line; ``located`` and
    ``guided``: also, the buggy line's stripped text occurs once in the buggy file, so quoting it
    is a unique ``str_replace``)."""
    if tier == "all":
        return True
    old = text[mutation.start : mutation.end]
    if "\n" in old or "\n" in mutation.replacement:
        return False
    if tier in QUOTING_TIERS:
        buggy, fixed = changed_line(mutation, text)
        return bool(buggy) and buggy != fixed and mutation.apply(text).count(buggy) == 1
    return True


def changed_line(mutation: Mutation, text: str) -> tuple[str, str]:
    """``(buggy, fixed)``: the stripped line of a single-line edit after and before it."""
    i = mutation.lineno - 1
    return mutation.apply(text).splitlines()[i].strip(), text.splitlines()[i].strip()


def patch_context(tier: str) -> int:
    """Context lines of the gold patch: ``easy`` keeps one, so the oracle's edit (old text =
    context and removed lines) is three lines, short enough for a small model to imitate;
    ``located`` and ``guided`` keep none, so the edit is the one line the issue quotes."""
    return {"easy": 1, "located": 0, "guided": 0}.get(tier, 3)


def location_hint(tier: str, path: str, qualname: str) -> str | None:
    """The issue's extra line for ``tier`` (``easy``: the file and function), else None."""
    if tier != "easy":
        return None
    return f"The problem is in `{path}`, in the function `{qualname}`."


def quoted_issue(tier: str, mutation: Mutation, text: str, n_failing: int) -> str | None:
    """The whole issue of a tier that quotes the buggy line (``QUOTING_TIERS``), else None
    (the issue is then written from the failing tests)."""
    if tier not in QUOTING_TIERS:
        return None
    buggy, fixed = changed_line(mutation, text)
    path, qualname = mutation.path, mutation.qualname
    if tier == "guided":  # states the edit on purpose: the tier teaches tools and format
        return guided_issue(path, qualname, buggy, fixed, n_failing)
    return located_issue(path, qualname, buggy, mutation.operator, n_failing)


def guided_issue(path: str, qualname: str, buggy: str, fixed: str, n_failing: int) -> str:
    """The ``guided`` tier's whole issue: where, the line as it is, the line as it should be.
    Short on purpose (tokens are the cost of every training step on a CPU)."""
    return f"{_the_line(path, qualname, n_failing)}\n{buggy}\nshould be\n{fixed}\n"


def located_issue(path: str, qualname: str, buggy: str, operator: str, n_failing: int) -> str:
    """The ``located`` tier's whole issue: where, the line as it is, what kind of mistake it
    holds (``MISTAKES``); the corrected line is left to the agent."""
    if operator not in MISTAKES:
        raise unknown_choice("located tier operator", operator, MISTAKES)
    mistake = f"is wrong: {MISTAKES[operator]}. Fix that line."
    return f"{_the_line(path, qualname, n_failing)}\n{buggy}\n{mistake}\n"


def _the_line(path: str, qualname: str, n_failing: int) -> str:
    """The quoting tiers' shared head: how many tests fail, then where the quoted line is."""
    tests = "1 test fails" if n_failing == 1 else f"{n_failing} tests fail"
    return f"{tests}. In `{path}`, function `{qualname}`, the line"


__all__ = [
    "EASY_OPERATORS",
    "TIERS",
    "LOCAL_TIERS",
    "MISTAKES",
    "QUOTING_TIERS",
    "changed_line",
    "check_tier",
    "guided_issue",
    "keeps",
    "located_issue",
    "location_hint",
    "patch_context",
    "quoted_issue",
    "tier_operators",
]
