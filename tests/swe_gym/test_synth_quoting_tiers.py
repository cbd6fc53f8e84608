"""The tiers of swe_gym.synth whose issue quotes the buggy line. guided, the bottom rung of the
task ladder: single-line bugs whose issue states the file, the function and the line as it is and
as it should be, so that the fix is a faithful edit of what the agent reads. located, the rung
above: the same bugs, the line as it is and the kind of mistake, never the corrected line. The
oracle replays either in two turns."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest

import swe_gym  # noqa: F401  (registers the ids)
from swe_gym.synth import split_tasks, synthesize
from swe_gym.synth.pipeline import candidates
from swe_gym.synth.tiers import (
    EASY_OPERATORS,
    MISTAKES,
    changed_line,
    guided_issue,
    located_issue,
    patch_context,
)
from swe_gym.tasks import load_tasks
from tests.swe_gym.test_synth_easy import synth_config

# `x - 1` -> `x + 1` in `down` makes a line that `up` already has: that edit cannot be quoted as
# a unique str_replace, so the guided tier drops it (the easy tier keeps it)
SAMPLE = """\
def up(x):
    return x + 1


def down(x):
    if x < 0:
        return 0
    return x - 1
"""


@pytest.mark.parametrize("tier", ["guided", "located"])
def test_quoting_tiers_keep_single_line_edits_whose_buggy_line_is_unique(tmp_path: Path, tier: str):
    guided, _ = candidates({"m.py": SAMPLE}, synth_config(tmp_path, tier))
    easy, _ = candidates({"m.py": SAMPLE}, synth_config(tmp_path, "easy"))
    assert guided and {m.operator for m in guided} <= set(EASY_OPERATORS)
    assert {m.key(SAMPLE) for m in guided} < {m.key(SAMPLE) for m in easy}
    for m in guided:
        buggy, fixed = changed_line(m, SAMPLE)
        assert buggy != fixed and m.apply(SAMPLE).count(buggy) == 1, (m, buggy)


def test_guided_issue_states_where_and_the_exact_change():
    text = guided_issue("pkg/m.py", "clamp", "if x <= hi:", "if x > hi:", 2)
    assert text == (
        "2 tests fail. In `pkg/m.py`, function `clamp`, the line\n"
        "if x <= hi:\nshould be\nif x > hi:\n"
    )
    assert guided_issue("m.py", "f", "a", "b", 1).startswith("1 test fails.")
    assert patch_context("guided") == 0 and patch_context("easy") == 1


def test_located_issue_quotes_the_line_and_names_the_mistake_not_the_fix():
    text = located_issue("pkg/m.py", "clamp", "if x <= hi:", "comparison_flip", 1)
    assert text == (
        "1 test fails. In `pkg/m.py`, function `clamp`, the line\n"
        "if x <= hi:\nis wrong: its comparison is inverted. Fix that line.\n"
    )
    assert set(MISTAKES) == set(EASY_OPERATORS)  # every operator the tier runs has its sentence
    assert patch_context("located") == 0  # the oracle's edit is the quoted line and its fix
    with pytest.raises(ValueError, match="remove_statement"):
        located_issue("m.py", "f", "x = 1", "remove_statement", 1)


@pytest.mark.slow
@pytest.mark.parametrize("tier", ["guided", "located"])
def test_quoting_tier_tasks_are_solved_by_editing_the_quoted_line(
    tmp_path: Path, monkeypatch, tier: str
):
    from agents.models import OracleModel
    from agents.react import ReActAgent, run_episode

    cfg = synth_config(tmp_path, tier, max_candidates=4, workers=2)
    summary = synthesize(cfg, log=lambda _: None)
    tasks = load_tasks(cfg.out)
    assert len(tasks) >= 2, summary
    # the oracle reads the base file (to check the quoted text is unique) from the derived repo
    monkeypatch.setenv("SWE_GYM_REPOS", str(cfg.repos_dir))
    for task in tasks:
        assert task.meta["tier"] == tier and task.meta["lines_changed"] == 2
        # the gold patch (buggy -> clean) turns the line the issue quotes into the one it asks for
        buggy = [
            x[1:].strip()
            for x in task.patch.splitlines()
            if x.startswith("-") and not x.startswith("---")
        ]
        fixed = [
            x[1:].strip()
            for x in task.patch.splitlines()
            if x.startswith("+") and not x.startswith("+++")
        ]
        if tier == "guided":
            assert f"\n{buggy[0]}\nshould be\n{fixed[0]}\n" in task.problem_statement
        else:  # the line and the kind of mistake; the corrected line is the agent's to find
            assert f"\n{buggy[0]}\nis wrong: {MISTAKES[task.meta['operator']]}." in (
                task.problem_statement
            )
            assert fixed[0] not in task.problem_statement.splitlines()
        assert f"`{task.meta['file']}`" in task.problem_statement
        env = gym.make(
            "SWEStarter-v0",
            tasks=str(cfg.out),
            prompt="compact",
            max_turns=3,
            sandbox_options={"repos_dir": str(cfg.repos_dir)},
        )
        traj = run_episode(
            env, ReActAgent(OracleModel(tasks=tasks, explore=False)), task_id=task.instance_id
        )
        assert traj.resolved and len(traj.turns) == 2, (task.instance_id, traj.finish_reason)
        edit = traj.turns[0].action  # the edit quotes the issue's two lines verbatim
        assert f"<<<<<<< SEARCH\n{buggy[0]}\n=======\n{fixed[0]}\n>>>>>>> REPLACE" in edit
    rows = [json.loads(x) for x in cfg.out.read_text().splitlines()]
    train, test = split_tasks(rows, held_out=0.5, seed=0)
    assert not {r["meta"]["function"] for r in train} & {r["meta"]["function"] for r in test}
