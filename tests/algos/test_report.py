"""Saved episodes and ``python -m algos.report``, checked in a real headless browser.

The page is loaded by Debian's chromium (``scripts/setup.sh`` installs it); its DOM after the
page's script ran comes from ``--dump-dom`` and script errors from the browser's console log.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from agents.trajectory import Trajectory, Turn
from algos import dapo, report
from algos.loop.metrics import read_metrics

# a hostile observation: markup that would run if the page did not escape it
PAYLOAD = (
    '<script>document.body.setAttribute("data-pwned","1")</script>'
    "<img src=x onerror=\"document.body.setAttribute('data-pwned','2')\">"
)


def _traj(task: str, seed: int, reward: float, observation: str = "ok") -> Trajectory:
    turn = Turn(
        prompt_delta_ids=[1, 2],
        completion_ids=[3],
        completion_logprobs=[-0.5],
        action=f"echo {task}",
        observation=observation,
        tool="bash",
        reward=reward,
    )
    return Trajectory(
        task_id=task,
        seed=seed,
        prompt="fix it",
        turns=[turn],
        reward=reward,
        resolved=reward > 0,
        finish_reason="submitted",
        token_exact=True,
    )


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    rows = [
        {"iteration": i, "reward_mean": r, "loss": 0.1 * i, "mismatch_kl": 1e-4}
        for i, r in enumerate([0.0, 0.5, 0.75], 1)
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report.save_iteration_episodes(
        run, 1, [_traj("task-a", 0, 0.0, PAYLOAD), _traj("task-a", 1, 1.0)], policy_version=0
    )
    report.save_iteration_episodes(run, 2, [_traj('task-"b"&<c>', 0, 0.25)], policy_version=3)
    return run


def test_episode_selection_caps_and_keeps_groups_together():
    trajs = [_traj(t, s, 0.0) for t in "abc" for s in range(3)]
    rng = random.Random(0)
    groups = report.select_episodes(trajs, 6, "groups", rng)
    assert len(groups) == 6 and len({t.task_id for t in groups}) == 2  # two whole tasks
    # no whole task fits: the first episodes of one task
    assert len({t.task_id for t in report.select_episodes(trajs, 2, "groups", rng)}) == 1
    picked = report.select_episodes(trajs, 4, "random", rng)
    assert len(picked) == 4 and picked == [t for t in trajs if t in picked]  # original order
    assert report.select_episodes(trajs, None, "random", rng) == trajs
    with pytest.raises(ValueError, match="groups, random"):
        report.select_episodes(trajs, 1, "first", rng)


def test_saved_episodes_are_token_exact_trajectories_with_their_policy_version(tmp_path):
    run = _run_dir(tmp_path)
    back = Trajectory.load_jsonl(run / "episodes" / "iter-000001.jsonl")
    assert [t.turns[0].observation for t in back] == [PAYLOAD, "ok"]
    assert back[0].to_sample_arrays() == ([1, 2, 3], [0, 0, 1], [0.0, 0.0, -0.5])
    meta = json.loads((run / "episodes" / "iter-000002.meta.json").read_text())
    assert meta["policy_version"] == 3 and meta["saved"] == meta["episodes"] == 1


def _chromium() -> str:
    exe = shutil.which("chromium")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (scripts/setup.sh installs it)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return exe


def load_in_browser(page: Path, tmp_path: Path) -> tuple[str, list[str]]:
    """``(DOM after the page's scripts ran, console errors)`` from headless chromium."""
    profile = tmp_path / f"profile-{page.stem}"
    cmd = [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        "--dump-dom",
        page.resolve().as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if "CONSOLE" in line]
    errors = [line for line in console if re.search(r"Uncaught|Refused|Error", line)]
    return proc.stdout, errors


def test_report_loads_without_script_errors_and_shows_the_episodes(tmp_path):
    run = _run_dir(tmp_path)
    page = report.write_report(run)
    assert page == run / "report.html"
    text = page.read_text()
    assert "http://" not in text and "https://" not in text  # nothing to fetch
    dom, errors = load_in_browser(page, tmp_path)
    assert errors == []
    assert 'data-ready="1"' in dom  # the page's own script ran (its CSP hash matched)
    assert "data-pwned" not in dom.split("<body", 1)[1].split(">", 1)[0]
    # the hostile observation is shown as text, escaped once, and made no element
    assert "&lt;script&gt;document.body.setAttribute" in dom
    assert "<img" not in dom
    assert dom.count("<script>") == 1
    for task in ("task-a", "task-&quot;b&quot;&amp;&lt;c&gt;"):
        assert f'data-task="{task}"' in dom
    assert "reward 0.25" in dom and "reward 1" in dom and "policy version 3" in dom
    assert "1 of 2 tasks" not in dom and "2 of 2 tasks" in dom  # the script's task count
    assert dom.count("<svg") == 3  # reward_mean, loss, mismatch_kl


def test_the_browser_check_catches_a_script_error(tmp_path):
    # the harness itself: a page whose script throws must be reported
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><body><script>notDefined();</script></body>")
    _, errors = load_in_browser(page, tmp_path)
    assert any("notDefined" in e for e in errors)


def test_report_cli_errors_on_a_missing_run_dir(tmp_path, capsys):
    with pytest.raises(SystemExit, match="does not exist"):
        report.main([str(tmp_path / "nope")])


TINY_RUN = [
    "--env",
    "ToyKeyword-v0",
    "--env-kwargs",
    '{"target": "w"}',
    "--policy",
    "tiny-random",
    "--max-new-tokens",
    "3",
    "--max-turns",
    "1",
    "--max-context-tokens",
    "128",
    "--group-size",
    "4",
    "--problems-per-iteration",
    "2",
    "--batch-size",
    "4",
    "--max-steps-per-iteration",
    "1",
    "--filter",
    "none",
    "--length-penalty",
    "false",
    "--concurrency",
    "8",
    "--checkpoint-every",
    "0",
    "--progress",
    "false",
    "--iterations",
    "1",
    "--save-episodes",
    "4",
    "--off-policy-correction",
    "tis",
]


def test_a_run_saves_its_episodes_and_logs_the_mismatch(tmp_path):
    run = tmp_path / "dapo"
    assert dapo.main([*TINY_RUN, "--run-dir", str(run)]) == 0
    (row,) = read_metrics(run)
    # one optimiser step on the weights that sampled: the learner agrees with the sampler to
    # float32 rounding (the module is shared)
    assert row["mismatch_kl"] < 1e-4 and abs(row["mismatch_ratio_mean"] - 1) < 1e-3
    assert row["is_capped_frac"] == 0.0
    saved = Trajectory.load_jsonl(run / "episodes" / "iter-000001.jsonl")
    assert len(saved) == 4 and len({t.task_id for t in saved}) == 1  # one whole group
    meta = json.loads((run / "episodes" / "iter-000001.meta.json").read_text())
    assert meta == {
        "iteration": 1,
        "policy_version": 0,
        "episodes": 8,
        "saved": 4,
        "cap": 4,
        "sampling": "groups",
    }
    assert f'data-task="{saved[0].task_id}"' in report.write_report(run).read_text()
