"""SWE-RL format checks and similarity reward on hand-made responses (docs/methods.md#swe-rl)."""

from __future__ import annotations

import difflib
import subprocess

import pytest

from swe_gym.swerl import (
    REASONS,
    apply_patch,
    make_patch,
    parse_edits,
    swerl_reward,
)

CALC = """\
def add(a, b):
    return a - b


def mul(a, b):
    return a * b


def div(a, b):
    return a / b
"""
CALC_FIXED = CALC.replace("return a - b", "return a + b").replace(
    "    return a / b",
    "    if b == 0:\n        raise ZeroDivisionError('b is zero')\n    return a / b",
)
UTIL = "def helper():\n    return 1\n"
FILES = {"pkg/calc.py": CALC, "pkg/util.py": UTIL}
ORACLE = make_patch(FILES, {"pkg/calc.py": CALC_FIXED})


def block(path: str, search: str, replace: str, fence: str = "python") -> str:
    return f"```{fence}\n### {path}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n```"


def respond(*blocks: str, thought: str = "The add function subtracts.") -> str:
    return f"<think>\n{thought}\n</think>\n<solution>\n" + "\n\n".join(blocks) + "\n</solution>"


FIX_ADD = block(
    "pkg/calc.py", "def add(a, b):\n    return a - b", "def add(a, b):\n    return a + b"
)
FIX_DIV = block(
    "pkg/calc.py",
    "    return a / b",
    "    if b == 0:\n        raise ZeroDivisionError('b is zero')\n    return a / b",
)


def body(old: str, new: str) -> str:
    """The expected per-file diff, written out with difflib (docs/methods.md#swe-rl)."""
    lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=3))
    return "\n".join(lines[2:])


@pytest.mark.parametrize(
    "response, reason",
    [
        ("<think>x</think><think>y</think><solution>" + FIX_ADD + "</solution>", "think_tag_count"),
        ("<solution>" + FIX_ADD + "</solution>", "think_tag_count"),
        ("<think>x</think>" + FIX_ADD, "solution_tag_count"),
        ("<think>x</think><solution>" + FIX_ADD + "</solution></solution>", "solution_tag_count"),
        ("<solution>" + FIX_ADD + "</solution><think>x</think>", "tag_order"),
        ("<think>  \n </think><solution>" + FIX_ADD + "</solution>", "empty_thought"),
        (respond("I would change add to use +."), "no_edit_block"),
        (
            respond(block("pkg/calc.py", "    return a * b", "    return a * b")),
            "search_equals_replace",
        ),
        (
            respond(block("pkg/calc.py", "    return a ** b", "    return a * b")),
            "search_not_found",
        ),
        # "    return a" is a prefix of several lines but a whole line of none: whole-line match.
        (respond(block("pkg/calc.py", "    return a", "    return 0")), "search_not_found"),
        # two blank lines occur twice in calc.py (between the three functions)
        (respond(block("pkg/calc.py", "\n", "\n\n")), "search_ambiguous"),
        (respond(block("pkg/nope.py", "x = 1", "x = 2")), "unknown_file"),
        # a later block fails after an earlier good one: still a format error
        (
            respond(FIX_ADD, block("pkg/calc.py", "def add(a, b):\n    return a - b", "pass")),
            "search_not_found",
        ),
    ],
)
def test_format_errors_give_minus_one_with_reason(response: str, reason: str) -> None:
    r = swerl_reward(response, FILES, ORACLE)
    assert r.reward == -1.0
    assert r.reason == reason, r.detail
    assert reason in REASONS
    assert not r.format_ok


def test_perfect_patch_scores_one() -> None:
    r = swerl_reward(respond(FIX_ADD, FIX_DIV), FILES, ORACLE)
    assert r.reason is None
    assert r.reward == 1.0
    assert r.similarities == {"pkg/calc.py": 1.0}
    assert r.new_files["pkg/calc.py"] == CALC_FIXED
    assert [e.path for e in r.edits] == ["pkg/calc.py", "pkg/calc.py"]


def test_partial_edit_gives_hand_computed_ratio() -> None:
    r = swerl_reward(respond(FIX_ADD), FILES, ORACLE)
    pred_new = CALC.replace("return a - b", "return a + b")
    expected = difflib.SequenceMatcher(
        None, body(CALC, pred_new), body(CALC, CALC_FIXED), autojunk=False
    ).ratio()
    assert 0 < expected < 1
    assert r.reward == pytest.approx(expected)
    assert r.similarities["pkg/calc.py"] == pytest.approx(expected)


def test_edit_to_file_oracle_does_not_touch_counts_zero() -> None:
    extra = block("pkg/util.py", "    return 1", "    return 2")
    r = swerl_reward(respond(FIX_ADD, FIX_DIV, extra), FILES, ORACLE)
    assert r.similarities == {"pkg/calc.py": 1.0, "pkg/util.py": 0.0}
    assert r.reward == pytest.approx(0.5)


def test_missing_an_oracle_file_counts_zero() -> None:
    oracle = make_patch(
        FILES, {"pkg/calc.py": CALC_FIXED, "pkg/util.py": "def helper():\n    return 2\n"}
    )
    r = swerl_reward(respond(FIX_ADD, FIX_DIV), FILES, oracle)
    assert r.similarities == {"pkg/calc.py": 1.0, "pkg/util.py": 0.0}
    assert r.reward == pytest.approx(0.5)


def test_edits_that_cancel_out_score_zero_not_one() -> None:
    undo = block(
        "pkg/calc.py", "def add(a, b):\n    return a + b", "def add(a, b):\n    return a - b"
    )
    r = swerl_reward(respond(FIX_ADD, undo), FILES, ORACLE)
    assert r.format_ok
    assert r.reward == 0.0


def test_parse_edits_several_blocks_and_files_and_empty_sides() -> None:
    text = "\n".join(
        [
            block("a.py", "x = 1", "x = 2"),
            "some prose in between",
            block("b/c.py", "old", "", fence=""),
            "```\n### a.py\n<<<<<<< SEARCH\n=======\nnew line\n>>>>>>> REPLACE\n```",
        ]
    )
    edits = parse_edits(text)
    assert [(e.path, e.search, e.replace) for e in edits] == [
        ("a.py", "x = 1", "x = 2"),
        ("b/c.py", "old", ""),
        ("a.py", "", "new line"),
    ]
    assert parse_edits(edits[0].to_text()) == [edits[0]]


def test_deleting_lines_and_file_without_final_newline() -> None:
    files = {"m.py": "a = 1\nb = 2\nc = 3"}
    oracle = make_patch(files, {"m.py": "a = 1\nc = 3"})
    r = swerl_reward(respond(block("m.py", "b = 2", "")), files, oracle)
    assert r.new_files["m.py"] == "a = 1\nc = 3"
    assert r.reward == 1.0


def test_make_patch_and_apply_patch_round_trip_through_git_apply(tmp_path) -> None:
    new = {
        "pkg/calc.py": CALC_FIXED,
        "pkg/util.py": "def helper():\n    return 2",
        "pkg/new.py": "X = 1\n",
    }
    patch = make_patch(FILES, new)
    assert apply_patch(FILES, patch) == new
    # and git itself accepts the patch we write (the execution reward feeds it to git apply)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    for path, content in FILES.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(content)
    subprocess.run(["git", "apply", "-"], input=patch.encode(), cwd=tmp_path, check=True)
    for path, content in new.items():
        assert (tmp_path / path).read_text() == content


def test_apply_patch_reads_real_git_diff_output(tmp_path) -> None:
    """The oracle is a gold patch written by git (not by us): parse git's own output."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=tmp_path,
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    git("init", "-q")
    for path, content in FILES.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(content)
    git("add", "-A")
    git("commit", "-qm", "base")
    (tmp_path / "pkg/calc.py").write_text(CALC_FIXED)
    (tmp_path / "pkg/util.py").unlink()
    (tmp_path / "logo.bin").write_bytes(b"\x00\x01binary")
    git("add", "-A")
    patch = git("diff", "--binary", "--cached")
    out = apply_patch(FILES, patch)
    assert out == {"pkg/calc.py": CALC_FIXED, "pkg/util.py": None}
    r = swerl_reward(respond(FIX_ADD, FIX_DIV), FILES, patch)
    # util.py deleted by the oracle only: 0 for it; calc.py exact: 1
    assert r.similarities == {"pkg/calc.py": 1.0, "pkg/util.py": 0.0}
