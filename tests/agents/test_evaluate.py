"""``python -m agents.evaluate``: metrics, outputs, and the oracle acceptance run."""

from __future__ import annotations

import itertools
import json
import math

import pytest

from agents.eval_metrics import pass_at_k, summarise
from agents.evaluate import main
from agents.models import SPEC_FORMS, ScriptedModel, load_model
from agents.trajectory import Trajectory, load_jsonl


def _brute_pass_at_k(n: int, c: int, k: int) -> float:
    """Fraction of k-subsets of n samples (c correct) holding at least one correct one."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize(
    "n,c,k", [(5, 0, 1), (5, 2, 1), (5, 2, 3), (6, 1, 6), (7, 3, 2), (4, 4, 2)]
)
def test_pass_at_k_matches_enumeration(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(_brute_pass_at_k(n, c, k))


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError, match="n=3 c=4"):
        pass_at_k(3, 4, 1)


def test_summary_mean_and_standard_error_over_runs():
    # Two tasks x 3 runs; run-wise pass rates 1.0, 0.5, 0.0.
    pattern = {"a": [True, True, False], "b": [True, False, False]}
    trajs = [
        Trajectory(task_id=tid, resolved=ok, finish_reason="submitted")
        for tid, oks in pattern.items()
        for ok in oks
    ]
    s = summarise(trajs, ["a", "b"], runs=3)
    assert s["pass@1_per_run"] == [1.0, 0.5, 0.0]
    assert s["pass@1"] == pytest.approx(0.5)
    assert s["pass@1_stderr"] == pytest.approx(0.5 / math.sqrt(3))
    assert s["pass@k"]["3"] == pytest.approx(1.0)
    assert s["pass@k"]["2"] == pytest.approx((pass_at_k(3, 2, 2) + pass_at_k(3, 1, 2)) / 2)
    assert s["per_task"]["a"]["resolved"] == 2


def test_evaluate_cli_oracle_on_two_tasks(tmp_path, starter_task_ids, capsys):
    tasks = starter_task_ids[:2]
    rc = main(
        [
            "--env",
            "SWEStarter-v0",
            "--model",
            "oracle",
            "--runs",
            "2",
            "--tasks",
            *tasks,
            "--out",
            str(tmp_path),
            "--concurrency",
            "2",
            "--no-progress",
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "pass@1 = 100.0% +- 0.0" in out and tasks[0] in out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["pass@1"] == 1.0 and summary["pass@k"]["2"] == 1.0
    trajs = load_jsonl(tmp_path / "trajectories.jsonl")
    assert len(trajs) == 4 and all(t.resolved for t in trajs)
    for name in ("predictions.jsonl", "predictions_run1.jsonl"):
        preds = [json.loads(x) for x in (tmp_path / name).read_text().splitlines()]
        assert [p["instance_id"] for p in preds] == tasks
        assert all(p["model_patch"].startswith("diff --git") for p in preds)


def test_outputs_go_to_a_run_folder_by_default_not_the_cwd(
    tmp_path, starter_task_ids, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    assert main(["--model", "oracle", "--tasks", starter_task_ids[0], "--no-progress"]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["runs"]
    (out,) = (tmp_path / "runs").iterdir()
    assert out.name.startswith("eval-SWEStarter-v0-") and (out / "summary.json").is_file()
    assert f"wrote runs/{out.name}/trajectories.jsonl" in capsys.readouterr().out


@pytest.mark.parametrize("verbose", [False, True])
def test_a_vllm_model_logs_to_the_out_folder(tmp_path, starter_task_ids, monkeypatch, verbose):
    """The engine's log lines go to OUT/engine.log (agents.models.engine_logs), not the terminal,
    unless --verbose; the model is stopped right where it would be built."""
    import agents.evaluate

    seen = {}

    def load(spec, **kw):
        seen.update(kw, spec=spec)
        raise KeyboardInterrupt  # stop before any engine starts

    monkeypatch.setattr(agents.evaluate, "load_model", load)
    argv = ["--model", "vllm:smollm2", "--tasks", starter_task_ids[0], "--out", str(tmp_path)]
    with pytest.raises(KeyboardInterrupt):
        main([*argv, *(["--verbose"] if verbose else [])])
    assert seen == {
        "spec": "vllm:smollm2",
        "log_file": str(tmp_path / "engine.log"),
        "verbose": verbose,
    }


@pytest.mark.slow
def test_acceptance_oracle_resolves_every_starter_task(tmp_path, starter_task_ids, capsys):
    assert (
        main(
            ["--env", "SWEStarter-v0", "--model", "oracle", "--out", str(tmp_path), "--no-progress"]
        )
        == 0
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["num_tasks"] == len(starter_task_ids)
    unresolved = [t for t, p in summary["per_task"].items() if p["resolved"] != p["n"]]
    assert unresolved == []


def test_unknown_task_id_is_named(tmp_path):
    with pytest.raises(SystemExit, match="unknown task id"):
        main(["--model", "oracle", "--tasks", "nope-1", "--out", str(tmp_path), "--no-progress"])


def test_load_model_specs(tmp_path):
    with pytest.raises(ValueError, match="unknown model spec 'gpt'") as e:
        load_model("gpt")
    for form in SPEC_FORMS:
        assert form in str(e.value)
    with pytest.raises(ValueError, match="openai:<base_url>#<model>"):
        load_model("openai:http://localhost:8000/v1")
    script = tmp_path / "replies.json"
    script.write_text(json.dumps({"task-a": ["one", "two"]}))
    model = load_model(f"scripted:{script}")
    assert isinstance(model, ScriptedModel) and model.name == "scripted:replies.json"
    with pytest.raises(FileNotFoundError, match="missing.json"):
        load_model(f"scripted:{tmp_path / 'missing.json'}")


def test_tasks_file_is_given_to_the_env(tmp_path, capsys):
    """``--tasks PATH`` (issue 11): the env loads its tasks from the file; the table and the
    outputs hold exactly its tasks."""
    from swe_gym.tasks import load_tasks

    task = load_tasks("starter")[1]
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(task.to_dict()) + "\n")
    out = tmp_path / "out"
    assert (
        main(["--tasks", str(path), "--model", "oracle", "--out", str(out), "--no-progress"]) == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["per_task"]) == [task.instance_id] and summary["pass@1"] == 1.0


def test_tasks_argument_splits_a_file_from_ids(tmp_path):
    from agents.evaluate import split_tasks_arg

    assert split_tasks_arg(None) == (None, [])
    assert split_tasks_arg(["a", "b"]) == (None, ["a", "b"])
    path = tmp_path / "t.parquet"
    path.write_bytes(b"")
    assert split_tasks_arg([str(path), "a"]) == (str(path), ["a"])
    with pytest.raises(SystemExit, match="task file 'missing.jsonl' does not exist"):
        split_tasks_arg(["missing.jsonl"])


def test_local_models_get_the_small_budget_and_it_is_printed(capsys):
    from agents.eval_budget import (
        LOCAL_MAX_NEW_TOKENS,
        LOCAL_MAX_TURNS,
        is_local_model,
        print_budget,
    )

    assert all(is_local_model(s) for s in ("smollm2", "hf:/m", "vllm:smollm2"))
    assert not any(is_local_model(s) for s in ("oracle", "openai:http://h/v1#m", "scripted:f"))
    print_budget(27, LOCAL_MAX_TURNS, LOCAL_MAX_NEW_TOKENS, concurrency=4, turn_s=3.0)
    err = capsys.readouterr().err
    # 27 episodes, 4 at a time -> 7 rounds x 4 turns x 3 s = 84 s
    assert f"27 episodes x <= {LOCAL_MAX_TURNS} turns" in err and "~1.4 min" in err


def test_progress_counts_turns(starter_task_ids, capsys):
    """The bar advances per turn; turns an episode did not use leave its total, so it ends at
    the number of turns taken."""
    from agents.evaluate import evaluate

    model = load_model("oracle")
    trajs, _ = evaluate(
        "SWEStarter-v0",
        model,
        starter_task_ids[:1],
        runs=1,
        max_turns=30,
        env_kwargs={"max_turns": 30},
        progress_bar=True,
    )
    turns = sum(t.num_turns for t in trajs)
    assert 1 < turns < 30
    err = capsys.readouterr().err
    assert f"{turns}/{turns} [" in err and "episodes 1/1, resolved 1" in err


def test_runs_sample_with_different_seeds(tmp_path, starter_task_ids, monkeypatch):
    """``--runs R`` must give R independent samples: a seed fixed for every turn made each run of
    a seeded engine (vLLM) repeat one completion. Every turn of every episode gets its own seed."""
    import agents.evaluate as ev

    seen: list[tuple[int | None, int]] = []  # (sampling seed, turn index)

    class Spy:
        def __init__(self, inner):
            self.inner, self.name = inner, "spy"

        def __getattr__(self, attr):
            return getattr(self.inner, attr)

        def generate(self, conversation, params):
            turn = sum(m["role"] == "assistant" for m in conversation.messages)
            seen.append((params.seed, turn))
            return self.inner.generate(conversation, params)

    real = ev.load_model
    monkeypatch.setattr(ev, "load_model", lambda spec, **kw: Spy(real(spec, **kw)))
    rc = main(
        [
            "--env",
            "SWEStarter-v0",
            "--model",
            "oracle",
            "--runs",
            "3",
            "--tasks",
            starter_task_ids[0],
            "--out",
            str(tmp_path),
            "--concurrency",
            "1",
            "--no-progress",
            "--seed",
            "7",
        ]
    )
    assert rc == 0 and seen
    assert all(seed is not None for seed, _ in seen)
    first_turn = [seed for seed, turn in seen if turn == 0]
    assert len(first_turn) == 3 and len(set(first_turn)) == 3  # the runs differ
    assert len({seed for seed, _ in seen}) == len(seen)  # and so do the turns of one episode


def test_a_run_whose_episodes_crash_exits_1_naming_the_error(
    tmp_path, starter_task_ids, monkeypatch, capsys
):
    """An engine that fails every request: the outputs are written, and the exit is 1 with the
    first error, not a pass@1 of 0 that reads as the model's result."""
    import agents.evaluate as ev

    class Broken:
        name = "broken"

        def generate(self, conversation, params):
            raise RuntimeError("engine step failed: CPU Generator does not use offset")

    monkeypatch.setattr(ev, "load_model", lambda spec, **kw: Broken())
    rc = main(
        [
            "--env",
            "SWEStarter-v0",
            "--model",
            "oracle",
            "--tasks",
            *starter_task_ids[:2],
            "--out",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert rc == 1
    err = capsys.readouterr().err
    assert "2 of 2 episodes failed" in err and "CPU Generator does not use offset" in err
    trajs = load_jsonl(tmp_path / "trajectories.jsonl")
    assert [t.finish_reason for t in trajs] == ["error", "error"]


def test_a_run_whose_episodes_time_out_exits_1(tmp_path, starter_task_ids, monkeypatch, capsys):
    """A timed-out episode is a failed one (agents.trajectory.FAILURES), as for training: the
    exit is 1, not a pass@1 of 0 that reads as the model's result."""
    import threading

    import agents.evaluate as ev

    release = threading.Event()

    class Stuck:
        name = "stuck"

        def generate(self, conversation, params):
            release.wait(120)  # until the run has ended
            raise RuntimeError("released")

    monkeypatch.setattr(ev, "load_model", lambda spec, **kw: Stuck())
    try:
        rc = main(
            [
                "--env",
                "SWEStarter-v0",
                "--model",
                "oracle",
                "--tasks",
                *starter_task_ids[:2],
                "--out",
                str(tmp_path),
                "--no-progress",
                "--episode-timeout",
                "1",
            ]
        )
    finally:
        release.set()
    assert rc == 1
    err = capsys.readouterr().err
    assert "2 of 2 episodes failed" in err and "episode_timeout_s" in err
    assert [t.finish_reason for t in load_jsonl(tmp_path / "trajectories.jsonl")] == ["timeout"] * 2
