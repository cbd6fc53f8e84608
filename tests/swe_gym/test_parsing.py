import pytest

from swe_gym.tools.parsing import InvalidAction, ToolCall, format_action, parse_action


def test_fenced_bash_after_reasoning():
    call = parse_action("Let me look.\n```bash\nls -la\ncd src\n```\n", "fenced")
    assert call == ToolCall("bash", {"command": "ls -la\ncd src"})


def test_fenced_submit_and_editor():
    assert parse_action("done\n```\nsubmit\n```", "fenced") == ToolCall("submit")
    call = parse_action(
        "fix\n```\nstr_replace_editor str_replace a.py\n<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n>>>>>>> REPLACE\n```"
    )
    assert call == ToolCall("str_replace_editor", {"command": "str_replace", "path": "a.py", "old_str": "x = 1", "new_str": "x = 2"})
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
        ('<tool_call>{"name": "submit", "arguments": {}}</tool_call><tool_call>{"name": "submit", "arguments": {}}</tool_call>', "multiple_commands"),
        ('<tool_call>{"name": "str_replace_editor", "arguments": {"command": "insert", "path": "a", "new_str": "x"}}</tool_call>', "bad_arguments"),
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
        ToolCall("str_replace_editor", {"command": "create", "path": "n.py", "file_text": "a\n```\nb"}),
        ToolCall("str_replace_editor", {"command": "str_replace", "path": "a.py", "old_str": "a\nb", "new_str": ""}),
        ToolCall("str_replace_editor", {"command": "insert", "path": "a.py", "insert_line": 3, "new_str": "z"}),
        ToolCall("str_replace_editor", {"command": "view", "path": "a b.py", "view_range": [1, 2]}),
    ],
)
def test_format_round_trips(fmt, call):
    assert parse_action(format_action(call, fmt), fmt) == call
