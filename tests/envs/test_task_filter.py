"""``gym.make(..., task_filter=...)``: the env serves the tasks the hackability audit keeps; the
bundled suite ships an audit that is current with its tasks."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import swe_gym  # noqa: F401 - registers the ids
from swe_gym.audit.run import cache_key
from swe_gym.audit.select import STARTER_AUDIT, filter_tasks, load_verdicts
from swe_gym.starter import starter_tasks


@pytest.fixture
def rows_and_audit(tmp_path):
    tasks = starter_tasks()[:4]
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in tasks))
    verdicts = {t.instance_id: {"valid": True, "hackable": i % 2 == 0} for i, t in enumerate(tasks)}
    (tmp_path / "rows.audit.json").write_text(json.dumps({"tasks": verdicts}))
    return rows, [t.instance_id for t in tasks]


def make(rows, **kw):
    env = gym.make("SWEStarter-v0", tasks=str(rows), **kw)
    try:
        return [t.instance_id for t in env.unwrapped.tasks]
    finally:
        env.close()


def test_filter_reads_the_audit_beside_the_rows(rows_and_audit):
    rows, ids = rows_and_audit
    assert make(rows, task_filter="unhackable") == ids[1::2]
    assert make(rows, task_filter="hackable") == ids[0::2]
    assert make(rows, task_filter=lambda t: t.instance_id == ids[3]) == [ids[3]]


def test_bad_filters_name_what_is_accepted(rows_and_audit, tmp_path):
    rows, ids = rows_and_audit
    with pytest.raises(ValueError, match="task_filter.*unhackable"):
        make(rows, task_filter="strong")
    with pytest.raises(FileNotFoundError, match="python -m swe_gym.audit"):
        make(rows, task_filter="unhackable", audit=str(tmp_path / "none.json"))
    (tmp_path / "part.json").write_text(json.dumps({"tasks": {ids[0]: {"valid": True}}}))
    with pytest.raises(ValueError, match="not in the audit"):
        make(rows, task_filter="unhackable", audit=str(tmp_path / "part.json"))
    with pytest.raises(ValueError, match="keeps none"):
        make(rows, task_filter=lambda t: False)


def test_the_bundled_audit_covers_every_task_and_is_current():
    doc = json.loads(STARTER_AUDIT.read_text())
    verdicts = load_verdicts(STARTER_AUDIT)
    for t in starter_tasks():
        assert t.instance_id in verdicts, t.instance_id
        key = cache_key(t, doc["backend"], doc["max_mutants"], doc["seed"])
        assert verdicts[t.instance_id]["key"] == key, (
            f"{t.instance_id} changed since the audit: run "
            "python -m swe_gym.audit starter --out swe_gym/starter/tasks.audit.json"
        )
    kept = filter_tasks(starter_tasks(), "unhackable", "starter")
    assert [t.instance_id for t in kept] == [
        t.instance_id
        for t in starter_tasks()
        if verdicts[t.instance_id]["valid"] and not verdicts[t.instance_id]["hackable"]
    ]
