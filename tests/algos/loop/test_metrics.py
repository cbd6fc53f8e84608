"""A run's metrics file holds that run's rows: a resumed run drops the rows after its checkpoint,
a new run in a used run dir sets the earlier file aside (neither mixed in nor lost)."""

from __future__ import annotations

from pathlib import Path

from algos.loop.metrics import METRICS_FILE, MetricsLogger, read_metrics


def log_rows(run_dir: Path, iterations: range, resume_from: int | None = None) -> None:
    logger = MetricsLogger(run_dir, ["jsonl"], {}, resume_from=resume_from)
    for i in iterations:
        logger.log({"iteration": i, "reward_mean": i / 10})
    logger.close()


def test_a_resumed_run_keeps_the_rows_up_to_its_checkpoint(tmp_path: Path):
    log_rows(tmp_path, range(1, 5))
    log_rows(tmp_path, range(3, 6), resume_from=2)  # rows 3-4 belonged to work redone
    assert [r["iteration"] for r in read_metrics(tmp_path)] == [1, 2, 3, 4, 5]
    assert not list(tmp_path.glob("*.old"))


def test_a_new_run_in_a_used_run_dir_sets_the_earlier_rows_aside(tmp_path: Path):
    log_rows(tmp_path, range(1, 4))
    log_rows(tmp_path, range(1, 3))
    log_rows(tmp_path, range(1, 2))
    assert [r["iteration"] for r in read_metrics(tmp_path)] == [1]
    first = (tmp_path / f"{METRICS_FILE}.1.old").read_text().splitlines()
    second = (tmp_path / f"{METRICS_FILE}.2.old").read_text().splitlines()
    assert (len(first), len(second)) == (3, 2)
