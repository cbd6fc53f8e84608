"""The SWE-RL prompt (docs/methods.md#swe-rl): a system prompt asking for a thinking part and a
solution part, and a user prompt with the issue, the code context and the SEARCH/REPLACE
format instructions. Wording is ours; the structure follows the SWE-RL paper's prompt."""

from __future__ import annotations

from collections.abc import Mapping

SYSTEM_PROMPT = """\
You will be given a task. First think it through (an inner monologue, as long as you need), \
then give the solution.

Answer in exactly this shape:
<think>
your reasoning, drafts and checks
</think>
<solution>
the final solution
</solution>"""

FORMAT_INSTRUCTIONS = """\
First find where the bug is, using the issue text, then fix it with *SEARCH/REPLACE* edits.

Every *SEARCH/REPLACE* edit has this shape:
1. the file path, on a line starting with ### and a space
2. the line <<<<<<< SEARCH
3. a contiguous run of whole lines copied exactly from the current file
4. the line =======
5. the lines to put in their place
6. the line >>>>>>> REPLACE

For example:

```python
### src/shop/cart.py
<<<<<<< SEARCH
def total(items):
    return sum(items)
=======
def total(items):
    return sum(item.price for item in items)
>>>>>>> REPLACE
```

Indentation matters: write every line with its full leading whitespace. The SEARCH lines must \
occur exactly once in the file, so include enough lines to make them unique. Put each edit in \
its own fenced code block; use as many edits as you need, on any of the files shown."""


def format_file(path: str, content: str) -> str:
    return f"### {path}\n{content}"


def build_prompt(problem_statement: str, files: Mapping[str, str]) -> str:
    """The user prompt: issue, then every context file, then the output format."""
    blocks = "\n".join(
        format_file(p, c if c.endswith("\n") or not c else c + "\n") for p, c in files.items()
    )
    return (
        "We are fixing the following issue in our repository.\n"
        "--- BEGIN ISSUE ---\n"
        f"{problem_statement.strip()}\n"
        "--- END ISSUE ---\n\n"
        "Below are the contents of some files of the repository. One or more of them may hold "
        "the bug.\n\n"
        "--- BEGIN FILES ---\n"
        f"```\n{blocks}```\n"
        "--- END FILES ---\n\n"
        f"{FORMAT_INSTRUCTIONS}"
    )
