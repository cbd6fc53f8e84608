"""benchmarks/bench_swe_learning.py end to end at a toy size: a tiny random policy, two easy
tasks of one bundled repository, one run per stage. It checks the plumbing a user relies on
(tasks, split, base -> RFT -> DAPO through the real entry points, the table, JSON and PNG),
not a learning result: that is the benchmark's job at full size."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_swe_learning.py"


@pytest.mark.slow
def test_bench_swe_learning_toy_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    spec = importlib.util.spec_from_file_location("bench_swe_learning", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "result.json"
    rc = bench.main(
        [
            "--work",
            str(tmp_path / "work"),
            "--out",
            str(out),
            "--repos",
            "starter/durations",
            "--candidates",
            "3",
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
        ]
    )
    assert rc == 0
    result = json.loads(out.read_text())
    assert [s["stage"] for s in result["stages"]] == ["base", "RFT", "DAPO"]
    tasks = result["tasks"]
    assert tasks["n_train"] >= 1 and tasks["n_held_out"] >= 1
    train = [json.loads(x) for x in Path(tasks["train"]).read_text().splitlines()]
    held = [json.loads(x) for x in Path(tasks["held_out"]).read_text().splitlines()]
    assert not {r["meta"]["function"] for r in train} & {r["meta"]["function"] for r in held}
    # A random policy solves nothing: RFT must have warmed up on the oracle's passing runs.
    data = result["stages"][1]["data"]
    assert data["source"] == "own + oracle (warm start)" and data["oracle_resolved"] >= 1
    for s in result["stages"]:
        assert 0.0 <= s["held_out"]["pass@1"] <= 1.0 and s["held_out"]["episodes"] >= 1
    assert "two standard errors" in capsys.readouterr().out
    assert out.with_suffix(".png").stat().st_size > 0
