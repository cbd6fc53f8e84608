"""The text the env shows the agent: system prompt (tool docs + action format) and task prompt.

Two styles (``PROMPTS``): ``full`` (the default: every tool and editor command, with examples)
and ``compact`` (about 150 tokens with SmolLM2's tokenizer: the same tools, one example each, for
small models whose every training step pays for the prompt's tokens; ``envs.prompted``).
"""

from __future__ import annotations

from swe_gym.errors import unknown_choice
from swe_gym.tools.parsing import ACTION_FORMATS

_TOOLS = """\
You have three tools.

1. bash: run one non-interactive shell command in a persistent bash session (the working
   directory and exported variables persist between commands). Each command has a time limit
   of {timeout:g} s; long outputs are cut in the middle. Interactive programs (vim, nano, less,
   top, a bare python REPL, ...) are not available: use non-interactive equivalents
   (cat, sed -n, grep, python -c, python script.py).
2. str_replace_editor: view and edit files. Commands:
   - view <path> [--view_range START END]: a file with line numbers, or a directory listing
   - create <path>: create a new file with the given text
   - str_replace <path>: replace one exact, unique occurrence of the old text with the new text
   - insert <path> <line>: insert text after line <line> (0 = at the top)
   - undo_edit <path>: undo the last edit of <path>
3. submit: finish. Your changes to the repository (its `git diff`) are graded by running the
   project's tests. Submit only when you are done.
"""

_FENCED = """\
Format: every reply is your reasoning followed by exactly ONE command in ONE fenced code block.
Examples:

I will look at the failing function first.
```
grep -n "def parse" src/pkg/module.py
```

To edit a file:
```
str_replace_editor str_replace src/pkg/module.py
<<<<<<< SEARCH
    return a - b
=======
    return a + b
>>>>>>> REPLACE
```

To create a file (its text follows the first line):
```
str_replace_editor create src/pkg/new_module.py
def helper():
    return 1
```

To insert after line 10:
```
str_replace_editor insert src/pkg/module.py 10
    extra_line = True
```

When you are done:
```
submit
```
A reply with no code block or with several code blocks is rejected and costs a turn.
"""

_JSON = """\
Format: every reply is your reasoning followed by exactly ONE tool call as JSON inside
<tool_call></tool_call> tags, {"name": <tool>, "arguments": {...}}. Examples:

<tool_call>{"name": "bash", "arguments": {"command": "grep -n 'def parse' src/pkg/module.py"}}</tool_call>
<tool_call>{"name": "str_replace_editor", "arguments": {"command": "str_replace", "path": "src/pkg/module.py", "old_str": "return a - b", "new_str": "return a + b"}}</tool_call>
<tool_call>{"name": "str_replace_editor", "arguments": {"command": "view", "path": "src/pkg/module.py", "view_range": [1, 40]}}</tool_call>
<tool_call>{"name": "submit", "arguments": {}}</tool_call>
A reply with no tool call or with several tool calls is rejected and costs a turn.
"""


PROMPTS = ("full", "compact")

_COMPACT_FENCED = """\
You fix an issue in a code repository. Reply with one short sentence, then exactly ONE command \
in ONE fenced code block. Commands: a bash command; str_replace_editor view PATH; \
str_replace_editor str_replace PATH, to replace a unique text:
```
str_replace_editor str_replace src/pkg/module.py
<<<<<<< SEARCH
return a - b
=======
return a + b
>>>>>>> REPLACE
```
and, when done, submit (the tests grade your changes):
```
submit
```
"""

_COMPACT_JSON = """\
You fix an issue in a code repository. Reply with one short sentence, then exactly ONE tool \
call: <tool_call>{"name": ..., "arguments": {...}}</tool_call>. Tools: bash {"command"}; \
str_replace_editor {"command": "view" or "str_replace", "path", "old_str", "new_str"} (old_str \
must be unique); submit {} when done (the tests grade your changes). Example:
<tool_call>{"name": "str_replace_editor", "arguments": {"command": "str_replace", "path": \
"src/pkg/module.py", "old_str": "return a - b", "new_str": "return a + b"}}</tool_call>
"""


def compact_system_prompt(action_format: str = "fenced") -> str:
    """The ``compact`` style: the tools and the action format in one example each."""
    if action_format not in ACTION_FORMATS:
        raise unknown_choice("action_format", action_format, ACTION_FORMATS)
    return _COMPACT_FENCED if action_format == "fenced" else _COMPACT_JSON


def compact_task_prompt(problem_statement: str, workdir: str, max_turns: int) -> str:
    """The ``compact`` style's first observation: the issue, the turn budget, the directory."""
    return (
        f"<issue>\n{problem_statement.strip()}\n</issue>\n"
        f"You have {max_turns} turns.\n(Current directory: {workdir})"
    )


def system_prompt(action_format: str = "fenced", command_timeout: float = 60.0) -> str:
    if action_format not in ACTION_FORMATS:
        raise unknown_choice("action_format", action_format, ACTION_FORMATS)
    intro = (
        "You are a software engineer working in a code repository. You resolve the issue you are "
        "given by editing the repository's source files, using the tools below, one command per turn.\n\n"
    )
    fmt = _FENCED if action_format == "fenced" else _JSON
    return intro + _TOOLS.format(timeout=command_timeout) + "\n" + fmt


def task_prompt(problem_statement: str, workdir: str, max_turns: int) -> str:
    return (
        f"The repository is checked out at {workdir} (your current directory).\n"
        "Resolve the following issue. Change only non-test source files; do not edit existing tests.\n\n"
        f"<issue>\n{problem_statement.strip()}\n</issue>\n\n"
        f"You have at most {max_turns} turns. Start by exploring the repository.\n"
        f"(Current directory: {workdir})"
    )
