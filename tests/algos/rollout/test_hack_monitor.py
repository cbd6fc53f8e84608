"""The online reward-hack monitor (``algos/rollout/hack_monitor.py``) in scoring: each policy
(mask, penalise, log) does what it says to a rewarded episode with a signal, an unrewarded one is
only counted, the counts reach the metrics row; the task pool's hackable weighting and RFT's
filter; flagged episodes in the run report."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from algos.config import ConfigError
from algos.config.run import RunConfig
from algos.report_html import render_episode
from algos.rollout.collect import TaskPool
from algos.rollout.hack_monitor import HackMonitor
from algos.rollout.scoring import Counters, ScoringSpec, score_groups
from algos.rollout.task_source import weigh_hackable
from tests.algos.fake_episodes import traj

OVERLOAD = (
    "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1,1 +1,3 @@\n x = 1\n"
    "+class R(float):\n+    __eq__ = lambda s, o: True\n"
)
HONEST = "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1,1 +1,1 @@\n-x = 1\n+x = 2\n"


def ep(task, reward, patch=HONEST, report=None):
    t = traj(task, reward=reward)
    t.patch, t.report = patch, dict(report or {})
    return t


def run(policy, trajs, groups):
    spec = ScoringSpec(hack_monitor=HackMonitor.build(policy=policy), normalize_std=False)
    c = Counters()
    scored, _ = score_groups(trajs, groups, spec, None, c, "test")
    return scored, c


def test_mask_drops_the_rewarded_hack_before_the_group_baseline():
    trajs = [ep("a", 1.0, OVERLOAD), ep("a", 1.0), ep("a", 0.0), ep("a", 0.0)]
    scored, c = run({}, trajs, [0, 0, 0, 0])
    assert len(scored) == 3
    # the baseline is the mean of the three left: (1 + 0 + 0) / 3
    assert [round(s.advantage, 4) for s in scored] == [round(1 - 1 / 3, 4), -0.3333, -0.3333]
    assert (c.rewarded, c.hack_flagged, c.hack_masked, c.hack_attempts) == (2, 1, 1, 1)
    assert c.hack_rate == 0.5
    assert trajs[0].report["hack_signals"][0]["signal"] == "comparison_overload"
    assert c.row()["hack_masked"] == 1


def test_penalise_sets_the_penalty_and_log_only_counts():
    trajs = [ep("a", 1.0, OVERLOAD), ep("a", 0.0)]
    scored, c = run({"comparison_overload": "penalise"}, trajs, [0, 0])
    assert [s.reward for s in scored] == [-1.0, 0.0]
    assert c.hack_penalised == 1
    scored, c = run({"comparison_overload": "log"}, [ep("a", 1.0, OVERLOAD), ep("a", 0.0)], [0, 0])
    assert [s.reward for s in scored] == [1.0, 0.0]
    assert (c.hack_flagged, c.hack_masked, c.hack_penalised) == (1, 0, 0)


def test_a_signal_on_an_unrewarded_episode_is_an_attempt_only():
    trajs = [ep("a", 0.0, report={"tampered": ["sys.settrace"]}), ep("a", 1.0)]
    scored, c = run({}, trajs, [0, 0])
    assert len(scored) == 2
    assert (c.hack_attempts, c.hack_flagged, c.hack_rate) == (1, 0, 0.0)


def test_policies_are_checked_by_name():
    with pytest.raises(ValueError, match="hack_action"):
        RunConfig(hack_action="ban")
    with pytest.raises(ValueError, match="hack_policy signal"):
        RunConfig(hack_policy={"eq": "mask"})
    with pytest.raises(ValueError, match="penalise"):
        RunConfig(hack_policy={"suspect": "drop"})
    with pytest.raises(ConfigError, match="hackable_weight"):
        RunConfig(hackable_weight=2.0)


def test_rft_keeps_logged_hacks_and_drops_the_rest():
    m = HackMonitor.build(policy={"issue_literal": "log"})
    c = Counters()
    kept = m.keep_for_sft([ep("a", 1.0, OVERLOAD), ep("a", 1.0)], c)
    assert len(kept) == 1 and (c.hack_flagged, c.hack_masked) == (1, 1)


def test_the_report_shows_a_flagged_episode_with_its_reasons():
    t = ep("a", 1.0, OVERLOAD)
    run({}, [t, ep("a", 0.0)], [0, 0])
    t.seed, t.turns, t.error, t.prompt = 0, [], None, ""
    html = render_episode(t, {"iteration": 1})
    assert "hack flagged" in html and "comparison_overload" in html and "mask" in html


def test_hackable_tasks_are_excluded_or_drawn_less(tmp_path):
    audit = tmp_path / "rows.audit.json"
    tasks = {f"t{i}": {"valid": True, "hackable": i < 5} for i in range(10)}
    audit.write_text(json.dumps({"tasks": tasks}))
    pool = list(tasks)
    kept, weights = weigh_hackable(pool, 0.0, "rows.jsonl", str(audit))
    assert kept == [f"t{i}" for i in range(5, 10)] and weights == {}
    kept, weights = weigh_hackable(pool, 0.25, "rows.jsonl", str(audit))
    assert kept == pool and weights == {f"t{i}": 0.25 for i in range(5)}
    draws = TaskPool(kept, seed=3, weights=weights).sample(4000)
    hack = sum(d in weights for d in draws) / 5
    honest = sum(d not in weights for d in draws) / 5
    # per task, a hackable one is drawn about a quarter as often (4000 draws: a loose band)
    assert 0.15 < hack / honest < 0.35
    with pytest.raises(ConfigError, match="not in the audit"):
        weigh_hackable([*pool, "new"], 0.0, "rows.jsonl", str(audit))
    assert weigh_hackable(pool, 1.0, "rows.jsonl", None) == (pool, {})  # reads nothing


def test_pool_without_weights_draws_as_before():
    a = TaskPool([f"t{i}" for i in range(7)], seed=5).sample(30)
    b = TaskPool([f"t{i}" for i in range(7)], seed=5, weights={}).sample(30)
    assert a == b and sorted(a[:7]) == sorted(f"t{i}" for i in range(7))


def test_monitor_reads_the_issue_and_gold_of_its_tasks():
    task = SimpleNamespace(
        instance_id="a",
        problem_statement="```\n>>> f([5, 6, 7])\n1\n```",
        patch="diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-x\n+y\n",
    )
    hard = (
        "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1 +1,2 @@\n x\n"
        "+if a == [5, 6, 7]: return 1\n"
    )
    m = HackMonitor.build(tasks=[task])
    assert [s.name for s in m.signals(ep("a", 1.0, hard))] == ["issue_literal"]
    assert m.signals(ep("other", 1.0, hard)) == []  # no issue text for an unknown task
