import random
import re
import subprocess

import pytest

from swe_gym.sandbox.interactive import interactive_command_message
from swe_gym.sandbox.shell import ansi_c_quote
from swe_gym.tools.parsing import (
    InvalidAction,
    ToolCall,
    _tool_call_tags,
    fenced_blocks,
    format_action,
    parse_action,
)


def test_fenced_bash_after_reasoning():
    call = parse_action("Let me look.\n```bash\nls -la\ncd src\n```\n", "fenced")
    assert call == ToolCall("bash", {"command": "ls -la\ncd src"})


def test_fenced_submit_and_editor():
    assert parse_action("done\n```\nsubmit\n```", "fenced") == ToolCall("submit")
    call = parse_action(
        "fix\n```\nstr_replace_editor str_replace a.py\n<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n>>>>>>> REPLACE\n```"
    )
    assert call == ToolCall(
        "str_replace_editor",
        {"command": "str_replace", "path": "a.py", "old_str": "x = 1", "new_str": "x = 2"},
    )
    view = parse_action("```\nstr_replace_editor view a.py --view_range 3 9\n```")
    assert view.args == {"command": "view", "path": "a.py", "view_range": [3, 9]}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("I think the bug is in foo.", "no_command"),
        ("```\nls\n```\nand\n```\npwd\n```", "multiple_commands"),
        ("```\n\n```", "empty_command"),
        ("```\nsubmit now\n```", "bad_arguments"),
        ("```\nstr_replace_editor frobnicate a.py\n```", "bad_arguments"),
        ("```\nstr_replace_editor str_replace a.py\nno markers\n```", "bad_arguments"),
        ("```\nstr_replace_editor insert a.py notanumber\nx\n```", "bad_arguments"),
        ("```\nstr_replace_editor view\n```", "bad_arguments"),
    ],
)
def test_fenced_invalid(text, reason):
    out = parse_action(text, "fenced")
    assert isinstance(out, InvalidAction) and out.reason == reason and out.message


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>',
        '{"name": "bash", "arguments": "{\\"command\\": \\"ls\\"}"}',
        '{"tool_calls": [{"type": "function", "function": {"name": "bash", "arguments": "{\\"command\\": \\"ls\\"}"}}]}',
        'thinking...\n```json\n{"name": "bash", "arguments": {"command": "ls"}}\n```',
    ],
)
def test_json_formats(text):
    assert parse_action(text, "json") == ToolCall("bash", {"command": "ls"})


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("no call here", "no_command"),
        ("<tool_call>{not json}</tool_call>", "bad_json"),
        ('<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>', "unknown_tool"),
        ('<tool_call>{"name": "bash", "arguments": {"cmd": "ls"}}</tool_call>', "bad_arguments"),
        (
            '<tool_call>{"name": "submit", "arguments": {}}</tool_call><tool_call>{"name": "submit", "arguments": {}}</tool_call>',
            "multiple_commands",
        ),
        (
            '<tool_call>{"name": "str_replace_editor", "arguments": {"command": "insert", "path": "a", "new_str": "x"}}</tool_call>',
            "bad_arguments",
        ),
    ],
)
def test_json_invalid(text, reason):
    out = parse_action(text, "json")
    assert isinstance(out, InvalidAction) and out.reason == reason


def test_unknown_format_lists_accepted():
    with pytest.raises(ValueError, match="choose one of: fenced, json"):
        parse_action("x", "xml")


@pytest.mark.parametrize("fmt", ["fenced", "json"])
@pytest.mark.parametrize(
    "call",
    [
        ToolCall("bash", {"command": "echo '```' && ls"}),
        ToolCall("submit"),
        ToolCall(
            "str_replace_editor", {"command": "create", "path": "n.py", "file_text": "a\n```\nb"}
        ),
        ToolCall(
            "str_replace_editor",
            {"command": "str_replace", "path": "a.py", "old_str": "a\nb", "new_str": ""},
        ),
        ToolCall(
            "str_replace_editor",
            {"command": "insert", "path": "a.py", "insert_line": 3, "new_str": "z"},
        ),
        ToolCall("str_replace_editor", {"command": "view", "path": "a b.py", "view_range": [1, 2]}),
    ],
)
def test_format_round_trips(fmt, call):
    assert parse_action(format_action(call, fmt), fmt) == call


# -- linear-time parsing: same blocks as the old regex, adversarial inputs answered -------------

_OLD_FENCE = re.compile(r"^(`{3,}|~{3,})[ \t]*([\w+-]*)[^\n]*\n(.*?)^\1[ \t]*$", re.S | re.M)
_OLD_TAG = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


def test_the_scanner_finds_what_the_old_regex_found():
    rnd = random.Random(0)
    atoms = [
        "`",
        "```",
        "````",
        "~~~",
        "~",
        "\n",
        " ",
        "\t",
        "py",
        "\r",
        "<tool_call>",
        "</tool_call>",
    ]
    for _ in range(20_000):
        text = "".join(rnd.choice(atoms) for _ in range(rnd.randint(0, 25)))
        assert fenced_blocks(text) == [m.group(3) for m in _OLD_FENCE.finditer(text)], repr(text)
        assert _tool_call_tags(text) == _OLD_TAG.findall(text), repr(text)


FIVE_MB = 5_000_000


@pytest.mark.timeout(120)  # each takes well under a second when linear
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("`" * 200_000, "no_command"),
        ("```\n" * (FIVE_MB // 4), "multiple_commands"),
        ("```x\n" * (FIVE_MB // 5), "no_command"),
        ("~" * FIVE_MB + "\n~~~", "empty_command"),
        (
            "".join("`" * k + "\n" for k in range(3, 2000)) + ("`" * 2000 + "x\n") * 1000,
            "no_command",  # every run closes nothing below it
        ),
        ("````\n```\nls\n```\n````", ToolCall("bash", {"command": "```\nls\n```"})),
        (
            "```\n" + "$(" * (FIVE_MB // 2) + "\n```",
            ToolCall("bash", {"command": "$(" * (FIVE_MB // 2)}),
        ),
        ("```\nstr_replace_editor view " + "'" * FIVE_MB + "\n```", "bad_arguments"),
        ("```\nstr_replace_editor view '" + "a" * 20_000 + "'\n```", "bad_arguments"),
    ],
    ids=["backticks", "fences", "unclosed", "tildes", "runs", "nested", "subst", "quotes", "path"],
)
def test_adversarial_fenced_actions(text, expected):
    out = parse_action(text, "fenced")
    if isinstance(expected, str):
        assert isinstance(out, InvalidAction) and out.reason == expected
    else:
        assert out == expected


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("<tool_call>" * (FIVE_MB // 11), "no_command"),
        ("<tool_call>{}</tool_call>" * 1000, "multiple_commands"),
        ("`" * FIVE_MB, "no_command"),
        ("{" * FIVE_MB, "bad_json"),
    ],
    ids=["open-tags", "many-tags", "backticks", "braces"],
)
def test_adversarial_json_actions(text, reason):
    out = parse_action(text, "json")
    assert isinstance(out, InvalidAction) and out.reason == reason


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("cmd", "interactive"),
    [
        ("$(" * (FIVE_MB // 2), False),
        ("'\"" * (FIVE_MB // 2), False),
        ("echo '" + "x" * 1_000_000 + "' ; vim a", False),  # too long to check: it just runs
        ("x=" + "y" * 15_000 + " ; vim a", True),
        ("cat <<'EOF'\n" + "ls -la\n" * 2000 + "EOF\nless x", True),
    ],
    ids=["subst", "quotes", "too-long", "long-checked", "heredoc"],
)
def test_interactive_check_on_huge_commands(cmd, interactive):
    assert (interactive_command_message(cmd) is not None) == interactive


@pytest.mark.parametrize(
    "text", ["plain", "a'b\\c\n\t\x01\x7f ünï €", "lone \ud800 and \udcff", "\x00nul"]
)
def test_shell_quoting_takes_any_string(text):
    out = subprocess.run(
        ["bash", "-c", f"printf %s {ansi_c_quote(text)}"], capture_output=True, check=True
    )
    try:
        expected = text.replace("\x00", "").encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        expected = text.encode("utf-8", "surrogatepass")
    assert out.stdout == expected
