"""Turn a model's raw text into one tool call, or say precisely why it is not one.

Two formats, chosen by the env's ``action_format`` option:

- ``fenced`` (the source work's, methods.md section 4): free reasoning, then exactly one fenced
  code block holding one command. A block whose first word is ``str_replace_editor`` or
  ``submit`` calls that tool; anything else is a ``bash`` command.
- ``json``: an OpenAI-style tool call (``{"name": ..., "arguments": {...}}``, or
  ``{"tool_calls": [{"function": {"name": ..., "arguments": "<json>"}}]}``) or a
  ``<tool_call>{...}</tool_call>`` block, exactly one.

An invalid action is not an exception for the env: ``parse_action`` returns an ``InvalidAction``
with a reason code and a message the agent sees as its observation.
"""

from __future__ import annotations

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

_FENCE = re.compile(r"^(`{3,}|~{3,})[ \t]*([\w+-]*)[^\n]*\n(.*?)^\1[ \t]*$", re.S | re.M)
_TOOL_CALL_TAG = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
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


def _parse_fenced(text: str) -> ToolCall | InvalidAction:
    blocks = [m.group(3) for m in _FENCE.finditer(text)]
    if not blocks:
        return InvalidAction(
            NO_COMMAND,
            "No command found. End your reply with exactly one fenced code block holding one "
            "command, e.g.\n```\nls -la\n```",
        )
    if len(blocks) > 1:
        return InvalidAction(
            MULTIPLE_COMMANDS,
            f"Your reply has {len(blocks)} fenced code blocks; put exactly one command in exactly "
            "one fenced block per reply (join shell commands with && if you must).",
        )
    body = blocks[0].strip("\n")
    if not body.strip():
        return InvalidAction(EMPTY_COMMAND, "The fenced code block is empty; put one command in it.")
    first_line, _, rest = body.partition("\n")
    words = first_line.split()
    if words[0] == "submit":
        if len(words) > 1 or rest.strip():
            return InvalidAction(BAD_ARGUMENTS, "`submit` takes no arguments; send it alone in the block.")
        return ToolCall("submit")
    if words[0] == "str_replace_editor":
        return _parse_editor_block(first_line, rest)
    return ToolCall("bash", {"command": body})


def _parse_editor_block(first_line: str, rest: str) -> ToolCall | InvalidAction:
    try:
        words = shlex.split(first_line)
    except ValueError as e:
        return InvalidAction(BAD_ARGUMENTS, f"Could not parse the str_replace_editor line: {e}.")
    if len(words) < 3:
        return InvalidAction(
            BAD_ARGUMENTS,
            "Usage: str_replace_editor <command> <path> [...]; commands: " + ", ".join(EDITOR_COMMANDS),
        )
    command, path, extra = words[1], words[2], words[3:]
    args: dict[str, Any] = {"command": command, "path": path}
    if command == "view":
        if extra:
            if len(extra) != 3 or extra[0] != "--view_range":
                return InvalidAction(BAD_ARGUMENTS, "Usage: str_replace_editor view <path> [--view_range START END]")
            try:
                args["view_range"] = [int(extra[1]), int(extra[2])]
            except ValueError:
                return InvalidAction(BAD_ARGUMENTS, f"--view_range needs two integers, got {extra[1:]}")
    elif command == "create":
        args["file_text"] = rest
    elif command == "str_replace":
        parsed = _search_replace(rest)
        if isinstance(parsed, InvalidAction):
            return parsed
        args["old_str"], args["new_str"] = parsed
    elif command == "insert":
        if len(extra) != 1:
            return InvalidAction(BAD_ARGUMENTS, "Usage: str_replace_editor insert <path> <line>, then the text on the next lines")
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
        return InvalidAction(BAD_ARGUMENTS, f"`str_replace_editor {command}` takes no text after its first line.")
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
        return InvalidAction(BAD_ARGUMENTS, "The SEARCH part is empty; it must quote the text to replace.")
    return old, new


# ----------------------------------------------------------------------------- json


def _parse_json(text: str) -> ToolCall | InvalidAction:
    tagged = _TOOL_CALL_TAG.findall(text)
    if len(tagged) > 1:
        return InvalidAction(MULTIPLE_COMMANDS, f"Your reply has {len(tagged)} <tool_call> blocks; send exactly one.")
    if tagged:
        candidates = [tagged[0].strip()]
    else:
        stripped = text.strip()
        fenced = [m.group(3) for m in _FENCE.finditer(stripped)]
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
            return InvalidAction(MULTIPLE_COMMANDS, f"{len(calls)} tool calls in one reply; send exactly one.")
        obj = calls[0].get("function", calls[0]) if isinstance(calls[0], dict) else calls[0]
    if not isinstance(obj, dict) or "name" not in obj:
        return InvalidAction(BAD_ARGUMENTS, 'A tool call is an object {"name": ..., "arguments": {...}}.')
    name, args = obj["name"], obj.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            return InvalidAction(BAD_JSON, f"`arguments` is a string but not valid JSON ({e.msg}).")
    if not isinstance(args, dict):
        return InvalidAction(BAD_ARGUMENTS, "`arguments` must be an object.")
    if name not in TOOLS:
        return InvalidAction(UNKNOWN_TOOL, f"unknown tool {name!r}; choose one of: {', '.join(TOOLS)}")
    return _check_args(ToolCall(name, args))


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
            return InvalidAction(BAD_ARGUMENTS, 'bash takes exactly {"command": "<shell command>"}.')
        if not a["command"].strip():
            return InvalidAction(EMPTY_COMMAND, "The bash command is empty.")
    elif call.tool == "submit":
        if a:
            return InvalidAction(BAD_ARGUMENTS, "submit takes no arguments.")
    else:
        cmd = a.get("command")
        if cmd not in _REQUIRED:
            return InvalidAction(
                BAD_ARGUMENTS, f"unknown str_replace_editor command {cmd!r}; choose one of: {', '.join(EDITOR_COMMANDS)}"
            )
        missing = [k for k in _REQUIRED[cmd] if k not in a]
        if missing:
            return InvalidAction(BAD_ARGUMENTS, f"str_replace_editor {cmd} is missing {', '.join(missing)}.")
        if cmd == "str_replace":
            a.setdefault("new_str", "")
        if cmd == "insert" and not isinstance(a["insert_line"], int):
            return InvalidAction(BAD_ARGUMENTS, "insert_line must be an integer.")
        if "view_range" in a and (
            not isinstance(a["view_range"], list) or len(a["view_range"]) != 2 or not all(isinstance(x, int) for x in a["view_range"])
        ):
            return InvalidAction(BAD_ARGUMENTS, "view_range must be [start, end] integers.")
        for k in ("path", "file_text", "old_str", "new_str"):
            if k in a and not isinstance(a[k], str):
                return InvalidAction(BAD_ARGUMENTS, f"{k} must be a string.")
    return call


def format_action(call: ToolCall, action_format: str = "fenced") -> str:
    """The inverse of ``parse_action``: the text of an action (used by the oracle and tests)."""
    if action_format == "json":
        return "<tool_call>" + json.dumps({"name": call.tool, "arguments": call.args}) + "</tool_call>"
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
            body = f"{head}\n{_SEARCH}\n{a['old_str']}\n{_DIVIDER}\n{a.get('new_str', '')}\n{_REPLACE}"
        elif cmd == "insert":
            body = f"{head} {a['insert_line']}\n{a['new_str']}"
        else:
            body = head
    fence = "````" if "```" in body else "```"
    return f"{fence}\n{body}\n{fence}"
