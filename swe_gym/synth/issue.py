"""Issue text from what a user would see: the failing tests and their error messages.

The text is built from the test log only: the short summary's messages and the ``E`` lines of
the first failure (the assertion and exception, not the traceback's source lines). The mutation
is never an input. As a second guard, any line holding a source line of the edit (before or
after it) is left out, so an error message that happens to quote the buggy line cannot give the
fix away. An optional ``rewrite(text, context)`` callable (an LM, say) may restate the text; its
output goes through the same guard.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

Rewrite = Callable[[str, dict], str]

_MAX_LISTED = 10
_MAX_E_LINES = 12
_MAX_CHARS = 200


def failure_messages(log: str) -> dict[str, str]:
    """``test id -> message`` from pytest's ``-rA`` short summary (``FAILED id - message``)."""
    out: dict[str, str] = {}
    for line in log.splitlines():
        for status in ("FAILED ", "ERROR "):
            if line.startswith(status):
                test, _, msg = line[len(status) :].partition(" - ")
                out.setdefault(test.strip(), msg.strip())
    return out


def error_lines(log: str, test_id: str) -> list[str]:
    """The ``E`` lines of ``test_id``'s section in pytest's failure report."""
    name = test_id.split("::", 1)[-1].replace("::", ".")
    header = re.compile(r"^_{3,} (?:ERROR at \w+ of )?" + re.escape(name) + r" _{3,}$")
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if header.match(line):
            out = []
            for body in lines[i + 1 :]:
                if re.match(r"^_{3,} .* _{3,}$", body) or body.startswith("=" * 5):
                    break
                if body.startswith("E "):
                    out.append(body[:_MAX_CHARS])
            return out[:_MAX_E_LINES]
    return []


def _symptom(messages: Iterable[str]) -> str:
    kinds = []
    for msg in messages:
        m = re.match(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning))\b", msg)
        kind = (
            m.group(1)
            if m
            else "AssertionError"
            if msg.startswith("assert") or not msg
            else msg.split(":", 1)[0][:40]
        )
        if kind not in kinds:
            kinds.append(kind)
    if kinds == ["AssertionError"]:
        return "wrong results"
    return ", ".join(kinds[:3])


# Lines that say nothing about the fix (a removed statement's placeholder, a bare keyword).
_TRIVIAL = re.compile(r"^(pass|return|continue|break|else:|try:|finally:|raise|[()\[\]{},:]*)$")


def revealing(lines: Iterable[str]) -> list[str]:
    """The stripped source lines that must not appear in an issue (trivial ones left out)."""
    return [s for s in (line.strip() for line in lines) if s and not _TRIVIAL.match(s)]


def _clean(text: str, forbidden: Iterable[str]) -> str:
    bad = revealing(forbidden)
    return "\n".join(line for line in text.splitlines() if not any(b in line for b in bad))


def issue_text(
    repo: str,
    log: str,
    fail_to_pass: list[str],
    pass_to_pass: list[str],
    *,
    forbidden: Iterable[str] = (),
    rewrite: Rewrite | None = None,
    location: str | None = None,
) -> str:
    """A problem statement for a bug that makes ``fail_to_pass`` fail.

    ``forbidden``: source lines of the edit; no line of the result contains any of them.
    ``location``: a line placed under the title (the easy tier names the file and function)."""
    forbidden = list(forbidden)
    messages = failure_messages(log)
    msgs = [messages.get(t, "") for t in fail_to_pass]
    modules = sorted({t.split("::", 1)[0] for t in fail_to_pass})
    n = len(fail_to_pass)
    title = f"{n} test{'s' if n != 1 else ''} in {', '.join(f'`{m}`' for m in modules[:3])} fail with {_symptom(msgs)}"
    parts = [
        title,
        "",
        *([location, ""] if location else []),
        f"Running the test suite (`pytest`) shows {n} failing test{'s' if n != 1 else ''} that used to pass:",
        "",
    ]
    for test, msg in list(zip(fail_to_pass, msgs, strict=True))[:_MAX_LISTED]:
        msg = " ".join(msg.split())[:_MAX_CHARS]
        parts.append(f"- `{test}`" + (f": {msg}" if msg else ""))
    if n > _MAX_LISTED:
        parts.append(f"- ... and {n - _MAX_LISTED} more")
    detail = error_lines(log, fail_to_pass[0])
    if detail:
        parts += [
            "",
            f"The first failure (`{fail_to_pass[0]}`) reports:",
            "",
            "```",
            *detail,
            "```",
        ]
    parts += [
        "",
        "The behaviour these tests describe is the intended one; please fix the code, not the tests"
        + (
            f" (the other {len(pass_to_pass)} tests still pass and must keep passing)."
            if pass_to_pass
            else "."
        ),
    ]
    text = _clean("\n".join(parts), forbidden) + "\n"
    if rewrite is not None:
        context = {
            "repo": repo,
            "fail_to_pass": list(fail_to_pass),
            "messages": dict(zip(fail_to_pass, msgs, strict=True)),
        }
        text = _clean(rewrite(text, context), forbidden) + "\n"
    return text


__all__ = ["Rewrite", "error_lines", "failure_messages", "issue_text", "revealing"]
