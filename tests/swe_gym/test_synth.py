"""swe_gym.synth: mutation operators, issue text, split, and synthesis end to end in the sandbox."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest

from swe_gym.grading import grade_patch
from swe_gym.starter import repo_path
from swe_gym.synth import OPERATORS, SynthConfig, mutations_of, split_tasks, synthesize
from swe_gym.synth.hidden import HIDDEN_NAME
from swe_gym.synth.issue import issue_text
from swe_gym.synth.pipeline import is_mutable_file
from swe_gym.tasks import load_tasks

SAMPLE = '''\
"""A module."""

LIMIT = 10


def clamp(x, lo, hi):
    """Doc."""
    if x < lo:
        return lo
    if x > hi and hi is not None:
        return hi
    return round(x, 2)


class Box:
    def total(self, items):
        out = 0
        for i in range(len(items)):
            out += items[i] * 2
        try:
            out = int(out)
        except ValueError:
            out = 0
        return not out == LIMIT
'''


def _edits(op: str) -> list[tuple[str, str, str]]:
    return [
        (m.qualname, SAMPLE[m.start : m.end], m.replacement)
        for m in mutations_of("m.py", SAMPLE, [op])
    ]


# ------------------------------------------------------------------------------ operators


def test_every_operator_proposes_valid_minimal_edits_inside_functions():
    muts = mutations_of("m.py", SAMPLE)
    assert {m.operator for m in muts} == set(OPERATORS)
    module_level = SAMPLE.index("def clamp")
    for m in muts:
        mutant = m.apply(SAMPLE)
        assert ast.dump(ast.parse(mutant)) != ast.dump(ast.parse(SAMPLE)), m
        assert m.start >= module_level, f"{m} edits module-level code"
        # Only the span changes: the text before and after it is byte-for-byte the original.
        assert mutant[: m.start] == SAMPLE[: m.start]
        assert mutant[m.start + len(m.replacement) :] == SAMPLE[m.end :]
    assert {m.qualname for m in muts} == {"clamp", "Box.total"}
    assert len({m.key(SAMPLE) for m in muts}) == len(muts), "duplicate programs were not merged"


def test_comparison_and_boolean_operators():
    assert ("clamp", "<", ">=") in _edits("comparison_flip")
    assert ("clamp", "is not", "is") in _edits("comparison_flip")
    assert ("clamp", ">", ">=") in _edits("boundary_shift")
    flips = _edits("boolean_flip")
    assert ("clamp", "and", "or") in flips
    assert ("Box.total", "not out == LIMIT", "(out == LIMIT)") in flips


def test_off_by_one_swap_return_constant_and_removal():
    assert ("Box.total", "len(items)", "len(items) - 1") in _edits("off_by_one")
    assert ("Box.total", "i", "i + 1") in _edits("off_by_one")
    assert ("clamp", "x, 2", "2, x") in _edits("swap_arguments")
    assert ("clamp", "lo", "None") in _edits("wrong_return")
    assert ("Box.total", "0", "1") in _edits("change_constant")
    removed = [(q, old.strip(), new) for q, old, new in _edits("remove_statement")]
    assert (
        "Box.total",
        "out += items[i] * 2",
        "            pass\n",
    ) in removed  # sole statement of the loop
    assert ("Box.total", "out = int(out)", "            pass\n") in removed
    assert not any('"""Doc."""' in old for _, old, _ in removed), (
        "a docstring is not a statement to remove"
    )
    conditions = _edits("remove_condition")
    assert ("clamp", "x < lo", "True") in conditions


def test_drop_exception_handling_dedents_the_body():
    (m,) = mutations_of("m.py", SAMPLE, ["drop_exception_handling"])
    assert "        out = int(out)\n        return" in m.apply(SAMPLE)
    assert "except" not in m.apply(SAMPLE)


def test_a_node_without_an_end_position_is_refused_by_name():
    from swe_gym.synth.source import SourceFile

    src = SourceFile("m.py", "x = 1\n")
    parsed = ast.parse(src.text).body[0]
    assert src.span(parsed) == (0, 5) and src.node_lines(parsed) == (0, 6)
    built = ast.Pass(lineno=1, col_offset=0)  # by hand: typeshed's Optional end positions
    with pytest.raises(ValueError, match="Pass at line 1 has no end position"):
        src.span(built)


def test_unknown_operator_is_named():
    with pytest.raises(ValueError, match="unknown operator.*'flip'.*accepted: comparison_flip"):
        mutations_of("m.py", SAMPLE, ["flip"])


def test_test_files_are_not_mutated():
    assert is_mutable_file("pkg/mod.py")
    for path in (
        "tests/test_mod.py",
        "pkg/tests/helpers.py",
        "test_x.py",
        "x_test.py",
        "conftest.py",
        "README.md",
    ):
        assert not is_mutable_file(path), path
    assert is_mutable_file("tests/helpers.py", include=["tests/*.py"])


# ------------------------------------------------------------------------------ issue text and split

LOG = """\
___________________________ test_clamp ___________________________

    def test_clamp():
>       assert clamp(5, 0, 3) == 3
E       assert 5 == 3
E        +  where 5 = clamp(5, 0, 3)

tests/test_m.py:4: AssertionError
=========================== short test summary info ============================
PASSED tests/test_m.py::test_other
FAILED tests/test_m.py::test_clamp - assert 5 == 3
"""


def test_issue_text_comes_from_the_failures_and_hides_edited_lines():
    text = issue_text(
        "synth/m", LOG, ["tests/test_m.py::test_clamp"], ["tests/test_m.py::test_other"]
    )
    assert "tests/test_m.py::test_clamp" in text and "assert 5 == 3" in text
    assert "where 5 = clamp(5, 0, 3)" in text
    # A message quoting an edited source line is left out.
    hidden = issue_text(
        "synth/m",
        LOG,
        ["tests/test_m.py::test_clamp"],
        [],
        forbidden=["    where 5 = clamp(5, 0, 3)"],
    )
    assert "clamp(5, 0, 3)" not in hidden

    seen = {}

    def rewrite(text: str, context: dict) -> str:
        seen.update(context)
        return "clamp() ignores the upper bound: where 5 = clamp(5, 0, 3)\nPlease fix."

    out = issue_text(
        "synth/m",
        LOG,
        ["tests/test_m.py::test_clamp"],
        [],
        forbidden=["where 5 = clamp(5, 0, 3)"],
        rewrite=rewrite,
    )
    assert out == "Please fix.\n"
    assert seen["fail_to_pass"] == ["tests/test_m.py::test_clamp"]


def _row(func: str, n: int) -> dict:
    return {"instance_id": f"{func}-{n}", "meta": {"function": func}}


def test_split_keeps_functions_apart_and_is_deterministic():
    rows = [_row(f"m.py::f{i}", j) for i in range(20) for j in range(i % 3 + 1)]
    train, test = split_tasks(rows, held_out=0.25, seed=3)
    assert len(train) + len(test) == len(rows)
    assert not {r["meta"]["function"] for r in train} & {r["meta"]["function"] for r in test}
    assert 0.15 * len(rows) <= len(test) <= 0.35 * len(rows)
    assert split_tasks(list(reversed(rows)), held_out=0.25, seed=3)[1] == list(reversed(test))
    assert split_tasks(rows, held_out=0.25, seed=4)[1] != test
    with pytest.raises(ValueError, match="held_out must be a fraction"):
        split_tasks(rows, held_out=25)


# ------------------------------------------------------------------------------ end to end


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("synth")
    cfg = SynthConfig(
        source=repo_path("starter/textkit"),
        out=tmp / "tasks.jsonl",
        repos_dir=tmp / "repos",
        max_candidates=6,
        workers=2,
        progress=False,
    )
    summary = synthesize(cfg, log=lambda _: None)
    return cfg, summary, load_tasks(cfg.out)


@pytest.mark.slow
def test_synthesized_rows_are_real_tasks(synthesized):
    cfg, summary, tasks = synthesized
    assert tasks, f"no task accepted: {summary}"
    assert summary["accepted"] == len(tasks)
    assert summary["accepted"] + sum(summary["dropped"].values()) == summary["candidates"] == 6
    assert sum(c["candidates"] for c in summary["per_operator"].values()) == 6
    assert json.loads(cfg.summary_path.read_text())["accepted"] == len(tasks)
    options = {"repos_dir": cfg.repos_dir}
    for task in tasks:
        assert task.repo == "synth/textkit" and task.FAIL_TO_PASS
        # the only test patch is the hidden test synthesis writes (swe_gym/synth/hidden.py)
        assert task.test_files in ([], [f"tests/{HIDDEN_NAME}"]), task.test_files
        assert bool(task.test_files) == task.meta["hidden_test"]
        gold = grade_patch(task, task.patch, sandbox_options=options)
        assert gold.resolved, (task.instance_id, gold.reason, gold.f2p_failed, gold.p2p_failed)
        empty = grade_patch(task, "", sandbox_options=options)
        assert not empty.resolved
        assert empty.f2p_failed == task.FAIL_TO_PASS and not empty.p2p_failed  # F2P fail at base
        edited = [
            line[1:].strip()
            for line in task.patch.splitlines()
            if line[:1] in "+-" and not line.startswith(("+++", "---"))
        ]
        for line in edited:
            if len(line) > 6:
                assert line not in task.problem_statement, (task.instance_id, line)
        meta = task.meta
        assert (
            meta["file"] in task.code_files
            and meta["function"] == f"{meta['file']}::{meta['qualname']}"
        )
        assert meta["f2p_count"] == len(task.FAIL_TO_PASS) and meta["lines_changed"] >= 1


@pytest.mark.slow
def test_buggy_commit_does_not_show_the_fix_and_rerun_resumes(synthesized):
    cfg, summary, tasks = synthesized
    repo = cfg.repos_dir / "synth__textkit"
    for task in tasks:
        parents = subprocess.run(
            ["git", "rev-list", "--parents", "-n", "1", task.base_commit],
            cwd=repo,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert parents == [task.base_commit], "the buggy commit's parent would show the mutation"
    before = cfg.out.read_text()
    again = synthesize(dataclasses.replace(cfg), log=lambda _: None)
    assert again["validated_this_run"] == 0 and again["accepted"] == summary["accepted"]
    assert cfg.out.read_text() == before


MODULE = """\
def total(items):
    out = 0
    for x in items:
        out += x
    return out


def count_to(n):
    i = 0
    while i < n:
        i += 1
    return i


def untested(x):
    return x * 2


VALUE = total([1, 2])
"""
TESTS = """\
from mod import VALUE, count_to, total


def test_total():
    assert total([1, 2, 3]) == 6


def test_count_to():
    assert count_to(3) == 3


def test_value():
    assert VALUE == 3
"""


@pytest.mark.slow
def test_a_plain_checkout_and_every_drop_reason(tmp_path: Path):
    cfg = SynthConfig(
        source=_repo(tmp_path, TESTS),
        out=tmp_path / "out" / "tasks.jsonl",
        repos_dir=tmp_path / "repos",
        operators=["remove_statement", "wrong_return"],
        workers=2,
        progress=False,
        test_cmd="PYTHONPATH=. pytest -rA",
        audit=False,  # the validation's own drops; the audit's: the test below
    )
    summary = synthesize(cfg, log=lambda _: None)
    # Removing `out = 0` breaks the import-time VALUE (collection); removing `i += 1` makes
    # count_to loop forever; a wrong return in untested() fails no test.
    assert summary["dropped"] == {"collection_error": 1, "no_fail_to_pass": 1, "timeout": 1}
    tasks = load_tasks(cfg.out)
    assert len(tasks) == summary["accepted"] == 4
    assert {t.meta["qualname"] for t in tasks} == {"total", "count_to"}
    by_func = {(t.meta["qualname"], t.meta["operator"]): t.FAIL_TO_PASS for t in tasks}
    assert by_func[("count_to", "wrong_return")] == ["tests/test_mod.py::test_count_to"]
    assert by_func[("total", "wrong_return")] == [
        "tests/test_mod.py::test_total",
        "tests/test_mod.py::test_value",
    ]


STRICT_TESTS = """\
from mod import VALUE, count_to, total


def test_total():
    for items, want in (([1, 2, 3], 6), ([5], 5), ([], 0), ([2, -7], -5)):
        got = total(items)
        assert type(got) is int and got == want


def test_count_to():
    for n, want in ((0, 0), (4, 4), (9, 9), (-2, 0)):  # -2: returning n itself is wrong
        got = count_to(n)
        assert type(got) is int and got == want


def test_value():
    assert type(VALUE) is int and VALUE == 3
"""


def _repo(root: Path, tests: str) -> Path:
    src = root / "proj"
    (src / "tests").mkdir(parents=True)
    (src / "mod.py").write_text(MODULE)
    (src / "tests" / "test_mod.py").write_text(tests)
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run(["git", *args], cwd=src, env=env, check=True)
    return src


# `==` only, but on inputs the issue (the first failure) does not show: the hidden test replays
# them strictly, so neither the always-equal object nor the quoted call's special case passes.
MIXED_TESTS = """\
from mod import VALUE, count_to, total


def test_total():
    assert total([1, 2, 3]) == 6
    assert total([5]) == 5 and total([]) == 0


def test_count_to():
    assert count_to(3) == 3
    assert count_to(5) == 5 and count_to(-1) == 0


def test_value():
    assert VALUE == 3
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "tests, hackable", [(TESTS, True), (STRICT_TESTS, False), (MIXED_TESTS, False)]
)
def test_the_audit_rejects_candidates_whose_tests_accept_an_exploit(tmp_path, tests, hackable):
    cfg = SynthConfig(
        source=_repo(tmp_path, tests),
        out=tmp_path / "out" / "tasks.jsonl",
        repos_dir=tmp_path / "repos",
        operators=["wrong_return"],
        include=["mod.py"],
        workers=2,
        progress=False,
        test_cmd="PYTHONPATH=. pytest -rA",
    )
    summary = synthesize(cfg, log=lambda _: None)
    states = [json.loads(line) for line in cfg.state_path.read_text().splitlines()]
    # count_to returns None when mutated, and `count_to(3) == 3` accepts an always-equal object;
    # total's mutant is caught by test_value, whose VALUE is computed at import, before any
    # rebinding could reach it
    if hackable:
        assert summary["accepted"] == 1 and summary["dropped"].get("hackable") == 1, summary
        (rejected,) = [s for s in states if s["reason"] == "hackable"]
        assert rejected["qualname"] == "count_to"
        assert any("always_equal" in r for r in rejected["audit"]), rejected
    else:
        assert summary["accepted"] == 2 and "hackable" not in summary["dropped"], summary
        rows = load_tasks(cfg.out)
        # each row's hidden test replays recorded calls the issue does not quote, strictly
        for row in rows:
            gold = grade_patch(row, row.patch, sandbox_options={"repos_dir": cfg.repos_dir})
            assert gold.resolved, (gold.reason, gold.f2p_failed, gold.p2p_failed)
            hidden = f"tests/{HIDDEN_NAME}::test_hidden_{row.meta['qualname']}"
            assert row.meta["hidden_test"] and hidden in row.FAIL_TO_PASS, row.FAIL_TO_PASS
            if tests is MIXED_TESTS:
                assert "(([5],), {}, 5)" in row.test_patch or "((5,), {}, 5)" in row.test_patch
                assert "count_to(5)" not in row.problem_statement
                assert "total([5])" not in row.problem_statement
