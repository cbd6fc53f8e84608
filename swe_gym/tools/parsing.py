"""Turn a model's raw text into one tool call, or say precisely why it is not one.

Two formats, chosen by the env's ``action_format`` option:

- ``fenced`` (the Nebius work's, docs/methods.md#react-scaffold): free reasoning, then exactly
  one fenced code block holding one command. A block whose first word is ``str_replace_editor`` or
  ``submit`` calls that tool; anything else is a ``bash`` command.
- ``json``: an OpenAI-style tool call (``{"name": ..., "arguments": {...}}``, or
  ``{"tool_calls": [{"function": {"name": ..., "arguments": "<json>"}}]}``) or a
  ``<tool_call>{...}</tool_call>`` block, exactly one.

An invalid action is not an exception for the env: ``parse_action`` returns an ``InvalidAction``
with a reason code and a message the agent sees as its observation.
"""

from __future__ import annotations

import bisect
import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from swe_gym.errors import unknown_choice

ACTION_FORMATS = ("fenced", "json")
TOOLS = ("bash", "str_replace_editor", "submit")
EDITOR_COMMANDS = ("view", "create", "str_replace", "insert", "undo_edit")

# Reason codes (info["invalid_reason"]).
NO_COMMAND = "no_command"
MULTIPLE_COMMANDS = "multiple_commands"
UNKNOWN_TOOL = "unknown_tool"
BAD_ARGUMENTS = "bad_arguments"
EMPTY_COMMAND = "empty_command"
BAD_JSON = "bad_json"

_TOOL_OPEN, _TOOL_CLOSE = "<tool_call>", "</tool_call>"
# The editor's first line (command, path, numbers) goes through shlex, which is slow per
# character and quadratic in a token's length; paths are at most 4096 bytes (PATH_MAX).
MAX_EDITOR_LINE = 8192
# Fenced blocks (see fenced_blocks): these patterns cannot backtrack more than one line's run.
_CLOSER = re.compile(r"^(`{3,}|~{3,})[ \t]*$", re.M)
_ANY_OPENER = re.compile(r"^(?:```|~~~)", re.M)
_COUNT_LIMIT = 100  # blocks counted for the "multiple blocks" message
_RUN = {"`": re.compile(r"`+"), "~": re.compile(r"~+")}
_SEARCH = "<<<<<<< SEARCH"
_DIVIDER = "======="
_REPLACE = ">>>>>>> REPLACE"


@dataclass
class ToolCall:
    tool: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class InvalidAction:
    reason: str
    message: str


def parse_action(text: str, action_format: str = "fenced") -> ToolCall | InvalidAction:
    if action_format == "fenced":
        return _parse_fenced(text)
    if action_format == "json":
        return _parse_json(text)
    raise unknown_choice("action_format", action_format, ACTION_FORMATS)


# ----------------------------------------------------------------------------- fenced


def fenced_blocks(text: str, limit: int | None = None) -> list[str]:
    """Bodies of the fenced code blocks in ``text``, in linear time.

    A block opens on a line starting (column 0) with 3 or more backticks or tildes, followed by
    anything (the info string), and closes at the first later line made of exactly as many of
    the same character plus optional spaces/tabs. When no such line exists for the whole run,
    a shorter opening (down to 3, the rest counting as info string) is tried, longest first; a
    line that opens nothing is text. The body runs from after the opening line to the start of
    the closing line (its trailing newline included). This is what the regex
    ``^(`{3,}|~{3,})[^\n]*\n(.*?)^\1[ \t]*$`` (re.S | re.M) matched, without its quadratic
    backtracking on long fence runs or many unclosed openings. ``limit``: stop after that many.
    """
    closers = _Closers(text)
    blocks: list[str] = []
    opener: re.Pattern[str] | None = _ANY_OPENER
    pos = 0
    while opener is not None and len(blocks) != limit:
        m = opener.search(text, pos)
        if m is None:
            break
        start = m.start()
        eol = text.find("\n", start)
        if eol < 0:  # the last line: no body can follow it
            break
        c = text[start]
        run_match = _RUN[c].match(text, start)
        assert run_match is not None  # text[start] is c: a run of at least one
        run = run_match.end() - start
        close = closers.first_after((c, run), start)
        if close is None:  # a shorter run, longest first: needs every closer, now all scanned
            avail = closers.runs[c]
            i = bisect.bisect_right(avail, run) - 1
            while i >= 0:  # a run with no closer below this line is dropped for good
                offsets = closers.found[(c, avail[i])]
                j = bisect.bisect_right(offsets, start)
                if j < len(offsets):
                    close = offsets[j]
                    break
                del avail[i]
                i -= 1
        if close is None:
            # Only openings longer than every run dropped can match from here: the regex
            # skips the hopeless lines in C, and each failure that reaches here drops a run.
            opener = _opener(closers.runs)
            pos = eol + 1
            continue
        blocks.append(text[eol + 1 : close])
        end = text.find("\n", close)
        if end < 0:
            break
        pos = end + 1
    return blocks


class _Closers:
    """The lines that can close a fence, scanned lazily: ``found[(char, run)]`` holds their
    offsets in order; the scan goes only as far as a query needs (a reply with many blocks
    stops at ``limit`` without scanning the rest), and ``runs`` (the distinct runs per char,
    for the shorter-run fallback) exists once the scan reached the end."""

    def __init__(self, text: str):
        self.found: dict[tuple[str, int], list[int]] = {}
        self._stream = _CLOSER.finditer(text)
        self._runs: dict[str, list[int]] | None = None

    def first_after(self, key: tuple[str, int], start: int) -> int | None:
        offsets = self.found.get(key)
        if offsets:
            j = bisect.bisect_right(offsets, start)
            if j < len(offsets):
                return offsets[j]
        if self._runs is not None:
            return None
        for m in self._stream:  # everything found so far lies before start, or is not key
            k = (m.group(1)[0], len(m.group(1)))
            self.found.setdefault(k, []).append(m.start())
            if k == key and m.start() > start:
                return m.start()
        self._runs = {c: sorted(k for ch, k in self.found if ch == c) for c in "`~"}
        return None

    @property
    def runs(self) -> dict[str, list[int]]:
        assert self._runs is not None, "runs are known once first_after scanned to the end"
        return self._runs


def _opener(runs: dict[str, list[int]]) -> re.Pattern[str] | None:
    """A line that can still open a block: a run at least as long as the shortest closer left."""
    alts = [f"{re.escape(c)}{{{avail[0]}}}" for c, avail in runs.items() if avail]
    return re.compile("^(?:" + "|".join(alts) + ")", re.M) if alts else None


def _parse_fenced(text: str) -> ToolCall | InvalidAction:
    blocks = fenced_blocks(text, limit=_COUNT_LIMIT)
    if not blocks:
        return InvalidAction(
            NO_COMMAND,
            "No command found. End your reply with exactly one fenced code block holding one "
            "command, e.g.\n```\nls -la\n```",
        )
    if len(blocks) > 1:
        return InvalidAction(
            MULTIPLE_COMMANDS,
            f"Your reply has {_count(blocks)} fenced code blocks; put exactly one command in exactly "
            "one fenced block per reply (join shell commands with && if you must).",
        )
    body = blocks[0].strip("\n")
    if not body.strip():
        return InvalidAction(
            EMPTY_COMMAND, "The fenced code block is empty; put one command in it."
        )
    first_line, _, rest = body.partition("\n")
    words = first_line.split()
    if words[0] == "submit":
        if len(words) > 1 or rest.strip():
            return InvalidAction(
                BAD_ARGUMENTS, "`submit` takes no arguments; send it alone in the block."
            )
        return ToolCall("submit")
    if words[0] == "str_replace_editor":
        return _parse_editor_block(first_line, rest)
    return ToolCall("bash", {"command": body})


def _count(blocks: list[str]) -> str:
    return f"{len(blocks)} or more" if len(blocks) >= _COUNT_LIMIT else str(len(blocks))


def _parse_editor_block(first_line: str, rest: str) -> ToolCall | InvalidAction:
    if len(first_line) > MAX_EDITOR_LINE:
        return InvalidAction(
            BAD_ARGUMENTS,
            f"The str_replace_editor line is {len(first_line)} characters long (at most "
            f"{MAX_EDITOR_LINE}); file text goes on the lines after it.",
        )
    try:
        words = shlex.split(first_line)
    except ValueError as e:
        return InvalidAction(BAD_ARGUMENTS, f"Could not parse the str_replace_editor line: {e}.")
    if len(words) < 3:
        return InvalidAction(
            BAD_ARGUMENTS,
            "Usage: str_replace_editor <command> <path> [...]; commands: "
            + ", ".join(EDITOR_COMMANDS),
        )
    command, path, extra = words[1], words[2], words[3:]
    args: dict[str, Any] = {"command": command, "path": path}
    if command == "view":
        if extra:
            if len(extra) != 3 or extra[0] != "--view_range":
                return InvalidAction(
                    BAD_ARGUMENTS, "Usage: str_replace_editor view <path> [--view_range START END]"
                )
            try:
                args["view_range"] = [int(extra[1]), int(extra[2])]
            except ValueError:
                return InvalidAction(
                    BAD_ARGUMENTS, f"--view_range needs two integers, got {extra[1:]}"
                )
    elif command == "create":
        args["file_text"] = rest
    elif command == "str_replace":
        parsed = _search_replace(rest)
        if isinstance(parsed, InvalidAction):
            return parsed
        args["old_str"], args["new_str"] = parsed
    elif command == "insert":
        if len(extra) != 1:
            return InvalidAction(
                BAD_ARGUMENTS,
                "Usage: str_replace_editor insert <path> <line>, then the text on the next lines",
            )
        try:
            args["insert_line"] = int(extra[0])
        except ValueError:
            return InvalidAction(BAD_ARGUMENTS, f"insert needs a line number, got {extra[0]!r}")
        args["new_str"] = rest
    elif command == "undo_edit":
        pass
    else:
        return InvalidAction(
            BAD_ARGUMENTS,
            f"unknown str_replace_editor command {command!r}; choose one of: {', '.join(EDITOR_COMMANDS)}",
        )
    if command in ("view", "undo_edit") and rest.strip():
        return InvalidAction(
            BAD_ARGUMENTS, f"`str_replace_editor {command}` takes no text after its first line."
        )
    return ToolCall("str_replace_editor", args)


def _search_replace(rest: str) -> tuple[str, str] | InvalidAction:
    lines = rest.split("\n")
    usage = (
        "str_replace needs the old and new text in this form:\n"
        f"str_replace_editor str_replace <path>\n{_SEARCH}\n<old lines>\n{_DIVIDER}\n<new lines>\n{_REPLACE}"
    )
    try:
        i = lines.index(_SEARCH)
        j = lines.index(_DIVIDER, i + 1)
        k = lines.index(_REPLACE, j + 1)
    except ValueError:
        return InvalidAction(BAD_ARGUMENTS, usage)
    if any(line.strip() for line in lines[:i] + lines[k + 1 :]):
        return InvalidAction(BAD_ARGUMENTS, "Text outside the SEARCH/REPLACE markers. " + usage)
    old = "\n".join(lines[i + 1 : j])
    new = "\n".join(lines[j + 1 : k])
    if not old:
        return InvalidAction(
            BAD_ARGUMENTS, "The SEARCH part is empty; it must quote the text to replace."
        )
    return old, new


# ----------------------------------------------------------------------------- json


def _parse_json(text: str) -> ToolCall | InvalidAction:
    tagged = _tool_call_tags(text)
    if len(tagged) > 1:
        return InvalidAction(
            MULTIPLE_COMMANDS, f"Your reply has {len(tagged)} <tool_call> blocks; send exactly one."
        )
    if tagged:
        candidates = [tagged[0].strip()]
    else:
        stripped = text.strip()
        fenced = fenced_blocks(stripped)
        candidates = [stripped] + fenced
    obj: Any = None
    err = ""
    for cand in candidates:
        try:
            obj = json.loads(cand)
            break
        except json.JSONDecodeError as e:
            err = f"{e.msg} at line {e.lineno} column {e.colno}"
    if obj is None:
        if not tagged and not any(c in text for c in "{}"):
            return InvalidAction(
                NO_COMMAND,
                'No tool call found. Reply with one tool call as JSON: <tool_call>{"name": "bash", '
                '"arguments": {"command": "ls"}}</tool_call>',
            )
        return InvalidAction(BAD_JSON, f"The tool call is not valid JSON ({err}).")
    if isinstance(obj, dict) and "tool_calls" in obj:
        calls = obj["tool_calls"]
        if not isinstance(calls, list) or not calls:
            return InvalidAction(NO_COMMAND, "`tool_calls` is empty; send exactly one tool call.")
        if len(calls) > 1:
            return InvalidAction(
                MULTIPLE_COMMANDS, f"{len(calls)} tool calls in one reply; send exactly one."
            )
        obj = calls[0].get("function", calls[0]) if isinstance(calls[0], dict) else calls[0]
    if not isinstance(obj, dict) or "name" not in obj:
        return InvalidAction(
            BAD_ARGUMENTS, 'A tool call is an object {"name": ..., "arguments": {...}}.'
        )
    name, args = obj["name"], obj.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            return InvalidAction(BAD_JSON, f"`arguments` is a string but not valid JSON ({e.msg}).")
    if not isinstance(args, dict):
        return InvalidAction(BAD_ARGUMENTS, "`arguments` must be an object.")
    if name not in TOOLS:
        return InvalidAction(
            UNKNOWN_TOOL, f"unknown tool {name!r}; choose one of: {', '.join(TOOLS)}"
        )
    return _check_args(ToolCall(name, args))


def _tool_call_tags(text: str) -> list[str]:
    """What ``<tool_call>(.*?)</tool_call>`` (re.S) finds, by ``str.find``: linear, where the
    lazy regex rescans to the end for every unclosed opening tag."""
    out: list[str] = []
    pos = 0
    while True:
        i = text.find(_TOOL_OPEN, pos)
        if i < 0:
            return out
        j = text.find(_TOOL_CLOSE, i + len(_TOOL_OPEN))
        if j < 0:  # no closing tag after this opening: none after any later one either
            return out
        out.append(text[i + len(_TOOL_OPEN) : j])
        pos = j + len(_TOOL_CLOSE)


_REQUIRED = {
    "view": ("path",),
    "create": ("path", "file_text"),
    "str_replace": ("path", "old_str"),
    "insert": ("path", "insert_line", "new_str"),
    "undo_edit": ("path",),
}


def _check_args(call: ToolCall) -> ToolCall | InvalidAction:
    a = call.args
    if call.tool == "bash":
        if set(a) != {"command"} or not isinstance(a["command"], str):
            return InvalidAction(
                BAD_ARGUMENTS, 'bash takes exactly {"command": "<shell command>"}.'
            )
        if not a["command"].strip():
            return InvalidAction(EMPTY_COMMAND, "The bash command is empty.")
    elif call.tool == "submit":
        if a:
            return InvalidAction(BAD_ARGUMENTS, "submit takes no arguments.")
    else:
        cmd = a.get("command")
        if cmd not in _REQUIRED:
            return InvalidAction(
                BAD_ARGUMENTS,
                f"unknown str_replace_editor command {cmd!r}; choose one of: {', '.join(EDITOR_COMMANDS)}",
            )
        missing = [k for k in _REQUIRED[cmd] if k not in a]
        if missing:
            return InvalidAction(
                BAD_ARGUMENTS, f"str_replace_editor {cmd} is missing {', '.join(missing)}."
            )
        if cmd == "str_replace":
            a.setdefault("new_str", "")
        if cmd == "insert" and not isinstance(a["insert_line"], int):
            return InvalidAction(BAD_ARGUMENTS, "insert_line must be an integer.")
        if "view_range" in a and (
            not isinstance(a["view_range"], list)
            or len(a["view_range"]) != 2
            or not all(isinstance(x, int) for x in a["view_range"])
        ):
            return InvalidAction(BAD_ARGUMENTS, "view_range must be [start, end] integers.")
        for k in ("path", "file_text", "old_str", "new_str"):
            if k in a and not isinstance(a[k], str):
                return InvalidAction(BAD_ARGUMENTS, f"{k} must be a string.")
    return call


def format_action(call: ToolCall, action_format: str = "fenced") -> str:
    """The inverse of ``parse_action``: the text of an action (used by the oracle and tests)."""
    if action_format == "json":
        return (
            "<tool_call>" + json.dumps({"name": call.tool, "arguments": call.args}) + "</tool_call>"
        )
    if action_format != "fenced":
        raise unknown_choice("action_format", action_format, ACTION_FORMATS)
    a = call.args
    if call.tool == "submit":
        body = "submit"
    elif call.tool == "bash":
        body = a["command"]
    else:
        head = f"str_replace_editor {a['command']} {shlex.quote(a['path'])}"
        cmd = a["command"]
        if cmd == "view" and a.get("view_range"):
            body = f"{head} --view_range {a['view_range'][0]} {a['view_range'][1]}"
        elif cmd == "create":
            body = f"{head}\n{a['file_text']}"
        elif cmd == "str_replace":
            body = (
                f"{head}\n{_SEARCH}\n{a['old_str']}\n{_DIVIDER}\n{a.get('new_str', '')}\n{_REPLACE}"
            )
        elif cmd == "insert":
            body = f"{head} {a['insert_line']}\n{a['new_str']}"
        else:
            body = head
    fence = "````" if "```" in body else "```"
    return f"{fence}\n{body}\n{fence}"
