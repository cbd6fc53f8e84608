"""The easy tier of swe_gym.synth: local single-line bugs, an issue that names the file and
function without quoting the edit, and a split with no function on both sides."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from swe_gym.grading import grade_patch
from swe_gym.starter import repo_path
from swe_gym.synth import SynthConfig, split_tasks, synthesize
from swe_gym.synth.issue import issue_text
from swe_gym.synth.pipeline import candidates
from swe_gym.synth.tiers import EASY_OPERATORS, tier_operators
from swe_gym.tasks import load_tasks

SAMPLE = """\
def clamp(x, lo, hi):
    if x < lo and lo is not None:
        return lo
    if (x > hi
            or hi == 0):
        return hi
    for i in range(len([x])):
        x = x - i
    try:
        return round(x, 2)
    except ValueError:
        return 0
"""


def synth_config(tmp_path: Path, tier: str, **kw) -> SynthConfig:
    """A ``tier`` run on the bundled durations repository, writing under ``tmp_path`` (also
    used by test_synth_quoting_tiers)."""
    return SynthConfig(
        source=repo_path("starter/durations"),
        out=tmp_path / "t.jsonl",
        repos_dir=tmp_path / "repos",
        tier=tier,
        progress=False,
        **{"audit": False, "hidden_tests": False, **kw},  # the tier's own mechanics
    )


def test_easy_candidates_are_local_single_line_edits(tmp_path: Path):
    texts = {"m.py": SAMPLE}
    easy, _ = candidates(texts, synth_config(tmp_path, "easy"))
    every, _ = candidates(texts, synth_config(tmp_path, "all"))
    assert easy and len(easy) < len(every)
    assert {m.operator for m in easy} <= set(EASY_OPERATORS)
    for m in easy:
        assert "\n" not in SAMPLE[m.start : m.end] + m.replacement, m
    # the multi-line condition and the removals of the full tier are not in the easy one
    assert any("\n" in SAMPLE[m.start : m.end] for m in every)
    assert not {m.operator for m in easy} & {"remove_statement", "drop_exception_handling"}


def test_tier_errors_name_the_value_and_the_choices(tmp_path: Path):
    with pytest.raises(ValueError, match="unknown tier 'eazy'.*all, easy.*Did you mean 'easy'"):
        synth_config(tmp_path, "eazy")
    with pytest.raises(ValueError, match="tier 'easy' runs only comparison_flip"):
        tier_operators("easy", ["remove_statement"])
    assert tier_operators("easy", ["remove_statement", "off_by_one"]) == ["off_by_one"]


def test_location_line_goes_through_the_guard():
    log = "FAILED tests/test_m.py::test_a - assert 1 == 2\n"
    text = issue_text(
        "o/r",
        log,
        ["tests/test_m.py::test_a"],
        [],
        forbidden=["x = a < b"],
        location="The problem is in `m.py`, in `f`.",
    )
    assert "The problem is in `m.py`, in `f`." in text
    leaky = issue_text(
        "o/r",
        log,
        ["tests/test_m.py::test_a"],
        [],
        forbidden=["x = a < b"],
        location="see x = a < b in `m.py`",
    )
    assert "x = a < b" not in leaky


@pytest.fixture(scope="module")
def easy_tasks(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("easy")
    cfg = synth_config(tmp, "easy", max_candidates=5, workers=2)
    summary = synthesize(cfg, log=lambda _: None)
    return cfg, summary, load_tasks(cfg.out)


@pytest.mark.slow
def test_easy_tasks_end_to_end(easy_tasks):
    cfg, summary, tasks = easy_tasks
    assert len(tasks) >= 2, f"too few tasks accepted: {summary}"
    options = {"repos_dir": cfg.repos_dir}
    for task in tasks:
        meta = task.meta
        assert meta["tier"] == "easy" and meta["operator"] in EASY_OPERATORS
        assert meta["lines_changed"] == 2  # one line out, one line in
        # The issue names where to look...
        assert f"`{meta['file']}`" in task.problem_statement
        assert f"`{meta['qualname']}`" in task.problem_statement
        # ...but quotes neither the buggy line nor its fix.
        for line in task.patch.splitlines():
            if line[:1] in "+-" and not line.startswith(("+++", "---")):
                assert line[1:].strip() not in task.problem_statement, (task.instance_id, line)
        # One line of context: the oracle's edit stays short.
        hunk = [
            x for x in task.patch.splitlines() if x[:1] in " +-" and x[:3] not in ("+++", "---")
        ]
        assert len(hunk) <= 4, task.patch
        # F2P fail with the bug, pass with the gold patch.
        empty = grade_patch(task, "", sandbox_options=options)
        assert not empty.resolved and empty.f2p_failed == task.FAIL_TO_PASS
        assert grade_patch(task, task.patch, sandbox_options=options).resolved


@pytest.mark.slow
def test_easy_split_keeps_functions_apart(easy_tasks, tmp_path: Path):
    cfg, _, tasks = easy_tasks
    train, held = split_tasks(tasks, held_out=0.4, seed=0)
    assert train and held
    assert not {t.meta["function"] for t in train} & {t.meta["function"] for t in held}
    # the CLI helper writes the same split
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "swe_gym.synth.split",
            str(cfg.out),
            "--held-out",
            "0.4",
            "--train",
            str(tmp_path / "tr.jsonl"),
            "--test",
            str(tmp_path / "te.jsonl"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "held out" in out.stdout
    assert [t.instance_id for t in load_tasks(tmp_path / "te.jsonl")] == [
        t.instance_id for t in held
    ]
