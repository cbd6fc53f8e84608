"""benchmarks/bench_swe_learning.py end to end at a toy size: a tiny random policy, a few guided
tasks of one bundled repository, one run per stage. It checks the plumbing a user relies on
(tasks, split, base -> RFT -> DAPO through the real entry points, the table, JSON and PNG),
not a learning result: that is the benchmark's job at full size."""

from __future__ import annotations

import importlib.util
import json
import math
import statistics
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_swe_learning.py"
if str(BENCH.parent) not in sys.path:  # the benchmark's modules import each other by name
    sys.path.insert(0, str(BENCH.parent))


PRESETS = Path(__file__).resolve().parents[2] / "algos" / "presets"


@pytest.mark.slow
@pytest.mark.parametrize("preset", [None, "swe_learning_gpu.yaml"], ids=["cpu", "gpu-preset"])
def test_bench_swe_learning_toy_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], preset: str | None
):
    """The default (CPU) preset and the one-GPU preset, each cut to a toy size by flags."""
    bench = _bench()
    out = tmp_path / "result.json"
    rc = bench.main(
        [
            "--work",
            str(tmp_path / "work"),
            "--out",
            str(out),
            # both presets train RFT on some repositories (rft_repos) and DAPO on the others
            "--repos",
            "starter/durations,starter/textkit",
            "--rft-repos",
            "starter/durations",
            "--candidates",
            "5",
            "--max-train",
            "1",
            "--max-rl",
            "1",
            "--runs",
            "1",
            "--own-runs",
            "1",
            "--min-own",
            "1",
            "--rft-epochs",
            "1",
            "--dapo-iterations",
            "1",
            "--problems",
            "1",
            "--group-size",
            "2",
            "--policy",
            "tiny-random",
            # the one-GPU preset's run also trains a branched arm from the same RFT checkpoint
            *(["--preset", str(PRESETS / preset), "--arm", 'branched={"branch_at": "turn:1"}']
              if preset else ["--dapo-seeds", "0,1"]),
        ]
    )  # fmt: skip
    assert rc == 0
    result = json.loads(out.read_text())
    dapo_runs = ["DAPO branched"] if preset else ["DAPO seed 1"]
    assert [s["stage"] for s in result["stages"]] == ["base", "RFT", "DAPO", *dapo_runs]
    assert ("dapo_seed1_vs_rft" in result["gains"]) == (not preset)
    assert ("dapo_branched_vs_rft" in result["gains"]) == bool(preset)
    assert list(result["arms"]) == (["DAPO", "branched"] if preset else ["DAPO"])
    for stage in result["stages"][2:]:  # every arm's run: its cost, the trunk counted once
        assert stage["costs"]["tokens_sampled"] > 0 and stage["costs"]["train_wall_s"] > 0
    if preset:
        assert result["stages"][3]["costs"]["branched_groups"] >= 1
        assert (tmp_path / "work" / "dapo-branched" / "checkpoint").is_dir()
    tasks = result["tasks"]
    assert tasks["n_train"] >= 1 and tasks["n_held_out"] >= 1
    # paths in the saved result are relative (here, outside the repository: names only)
    assert str(tmp_path) not in out.read_text()
    work = tmp_path / "work"
    train = [json.loads(x) for x in (work / tasks["train"]).read_text().splitlines()]
    held = [json.loads(x) for x in (work / tasks["held_out"]).read_text().splitlines()]
    assert {r["meta"]["tier"] for r in train + held} == {"guided"}  # the default preset's tier
    assert not {r["meta"]["function"] for r in train} & {r["meta"]["function"] for r in held}
    rl = [json.loads(x) for x in (work / tasks["rl"]).read_text().splitlines()]
    assert len(rl) == tasks["n_rl"] == 1
    assert not {r["instance_id"] for r in rl} & {r["instance_id"] for r in train + held}
    assert {r["repo"] for r in train} == {"synth/durations"}
    assert {r["repo"] for r in rl + held} == {"synth/textkit"}
    # A random policy solves nothing: RFT must have warmed up on the oracle's passing runs.
    data = result["stages"][1]["data"]
    assert data["source"] == "own + oracle (warm start)" and data["oracle_resolved"] >= 1
    for s in result["stages"]:
        h = s["held_out"]
        assert 0.0 <= h["pass@1"] <= 1.0 and h["episodes"] >= 1
        assert 0.0 <= h["format_valid_rate"] <= 1.0 and h["tokens_per_trajectory"] > 0
        assert 0.0 < h["shared_prompt_share"] < 1.0
    # the format probe ran before RFT's first epoch and after it
    assert [r["epoch"] for r in result["rft_metrics"] if "format_valid" in r] == [0, 1]
    assert "two standard errors" in capsys.readouterr().out
    assert out.with_suffix(".png").stat().st_size > 0


def test_a_stage_reruns_when_a_file_it_reads_changes(tmp_path: Path):
    """Resuming reuses a finished stage only while its command and the files it names (a
    config section, a checkpoint's weights) are unchanged."""
    bench = _bench()
    run = bench.Runner(tmp_path / "work", tmp_path / "repos", progress=False)
    cfg, count = tmp_path / "stage.yaml", tmp_path / "runs.txt"
    cfg.write_text("lr: 1.0e-5\n")
    argv = ("-c", f"open({str(count)!r}, 'a').write('x')", str(cfg))
    run("stage", *argv)
    run("stage", *argv, "--concurrency", "4")  # how many run at once is not part of the key
    assert count.read_text() == "x"
    cfg.write_text("lr: 2.0e-5\n")
    run("stage", *argv)
    assert count.read_text() == "xx"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_swe_learning", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_rft_repos_splits_the_stages_by_repository():
    """``synth.rft_repos``: RFT's rows come from those repositories only; DAPO's and the
    held-out ones from the others, one repository after the other (a cap takes both alike)."""
    from swe_learning_tasks import by_repos

    def rows(repo: str, n: int, side: str) -> list[str]:
        return [json.dumps({"repo": f"synth/{repo}", "id": f"{repo}-{side}{i}"}) for i in range(n)]

    train = rows("a", 3, "t") + rows("b", 4, "t") + rows("c", 2, "t")
    held = rows("a", 2, "h") + rows("b", 3, "h") + rows("c", 1, "h")
    repos = ["starter/a", "starter/b", "starter/c"]
    rft, rl, held_out = by_repos(["starter/a"], repos, train, held)
    ids = [[json.loads(r)["id"] for r in side] for side in (rft, rl, held_out)]
    assert ids[0] == ["a-t0", "a-t1", "a-t2"]
    assert ids[1] == ["b-t0", "c-t0", "b-t1", "c-t1", "b-t2", "b-t3"]
    assert ids[2] == ["b-h0", "c-h0", "b-h1", "b-h2"]
    for bad in (["starter/zz"], repos):  # unknown, or every repository (nothing left for DAPO)
        with pytest.raises(SystemExit, match="rft_repos"):
            by_repos(bad, repos, train, held)


def test_gain_pairs_the_stages_over_their_tasks():
    """Two stages on the same tasks: the gain's paired s.e. is that of the mean of the tasks'
    differences (here 0, 1/3, 2/3, 1 over four tasks), beside the independent-runs one."""
    from swe_learning_report import gain

    a = {
        "pass@1": 0.25,
        "stderr": 0.05,
        "per_task": {"t1": 0.0, "t2": 0.0, "t3": 1 / 3, "t4": 0.0},
    }
    b = {
        "pass@1": 0.75,
        "stderr": 0.10,
        "per_task": {"t1": 0.0, "t2": 1 / 3, "t3": 1.0, "t4": 1.0},
    }
    g = gain(a, b)
    d = [0.0, 1 / 3, 2 / 3, 1.0]
    assert g["gain"] == pytest.approx(0.5)
    assert g["stderr"] == pytest.approx(math.hypot(0.05, 0.10))
    assert g["paired_tasks"] == 4
    assert g["paired_stderr"] == pytest.approx(statistics.stdev(d) / 2)
    b.pop("per_task")  # an older result without per-task rates: no paired figure
    assert "paired_stderr" not in gain(a, b)


@pytest.mark.parametrize("preset", sorted(p.name for p in PRESETS.glob("swe_learning*.yaml")))
def test_every_learning_preset_is_a_valid_configuration(preset: str):
    """Each benchmark preset loads (sections, seeds, env options) and its rft and dapo sections
    are RFTConfig / DAPOConfig fields, so a mistyped key stops at once, not after the hour of
    synthesis and RFT that comes before the DAPO stage reads it."""
    from algos.config import build_config
    from algos.dapo import DAPOConfig
    from algos.rft import RFTConfig
    from swe_gym.synth.tiers import TIERS

    bench = _bench()
    cfg = bench.load_config(bench.parse_args(["--preset", str(PRESETS / preset)]))
    assert cfg["synth"]["tier"] in TIERS
    assert set(cfg["synth"].get("rft_repos") or []) <= set(cfg["synth"]["repos"])
    rft = build_config(RFTConfig, (preset, cfg["rft"]))
    dapo = build_config(DAPOConfig, (preset, cfg["dapo"]))
    assert rft.max_turns == dapo.max_turns == cfg["eval"]["max_turns"]  # every stage alike


def test_arms_parse_with_errors_that_name_the_arm():
    from swe_learning_arms import parse_arms, run_name

    arms = parse_arms({"tree": {"branch_at": "sample"}}, ['branched={"branch_at": "turn:1"}'])
    assert arms == {
        "DAPO": {},
        "tree": {"branch_at": "sample"},
        "branched": {"branch_at": "turn:1"},
    }
    assert [run_name(a, i, s) for a in ("DAPO", "tree") for i, s in ((0, 0), (1, 1))] == [
        "dapo", "dapo-seed1", "dapo-tree", "dapo-tree-seed1"
    ]  # fmt: skip
    for flag, match in [
        ("x={bad", "not JSON"),
        ("DAPO={}", "other than 'DAPO'"),
        ("a b={}", "letters, digits"),
        ("x", "not a mapping"),
        ('x=["turn:1"]', "not a mapping"),
    ]:
        with pytest.raises(SystemExit, match=match):
            parse_arms(None, [flag])
