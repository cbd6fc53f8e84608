import json

import pytest

from swe_gym.errors import TaskError
from swe_gym.tasks import Task, load_tasks, normalise_row, patch_files

PATCH = "diff --git a/pkg/a.py b/pkg/a.py\n--- a/pkg/a.py\n+++ b/pkg/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
TEST_PATCH = "diff --git a/tests/test_a.py b/tests/test_a.py\n--- a/tests/test_a.py\n+++ b/tests/test_a.py\n@@ -1 +1 @@\n-y\n+z\n"


def row(**over):
    base = {
        "instance_id": "o__r-1",
        "repo": "o/r",
        "base_commit": "abc123",
        "problem_statement": "it breaks",
        "patch": PATCH,
        "test_patch": TEST_PATCH,
        "FAIL_TO_PASS": ["tests/test_a.py::test_x"],
        "PASS_TO_PASS": [],
    }
    base.update(over)
    return base


def test_json_string_lists_are_normalised_like_lists():
    a = normalise_row(row(FAIL_TO_PASS='["t::a", "t::b"]', PASS_TO_PASS="[]"))
    b = normalise_row(row(FAIL_TO_PASS=["t::a", "t::b"], PASS_TO_PASS=[]))
    assert a.FAIL_TO_PASS == b.FAIL_TO_PASS == ["t::a", "t::b"]
    assert a.PASS_TO_PASS == b.PASS_TO_PASS == []


def test_swerebench_fields_and_image_and_extra_are_kept():
    t = normalise_row(
        row(
            install_config={"test_cmd": "pytest -rA"},
            docker_image="img:1",
            meta={"k": 1},
            requirements="x==1",
        )
    )
    assert t.install_config == {"test_cmd": "pytest -rA"}
    assert t.image_name == "img:1"
    assert t.meta == {"k": 1}
    assert t.extra == {"requirements": "x==1"}
    assert t.to_dict()["requirements"] == "x==1"
    assert Task.from_dict(t.to_dict()) == t


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("patch", None, "'patch': missing"),
        ("base_commit", "  ", "'base_commit': is empty"),
        ("FAIL_TO_PASS", "not json", "'FAIL_TO_PASS': is a string but not a JSON list"),
        ("FAIL_TO_PASS", [], "'FAIL_TO_PASS': is empty"),
        ("PASS_TO_PASS", [1], "'PASS_TO_PASS': item 0 must be a string"),
        ("install_config", 5, "'install_config': must be a mapping"),
    ],
)
def test_bad_row_names_id_and_field(field, value, needle):
    with pytest.raises(TaskError) as e:
        normalise_row(row(**{field: value}))
    assert "o__r-1" in str(e.value) and needle in str(e.value)


def test_missing_field_is_named():
    r = row()
    del r["test_patch"]
    with pytest.raises(TaskError, match="o__r-1.*'test_patch': missing"):
        normalise_row(r)


def test_load_jsonl_json_parquet_and_list_agree(tmp_path):
    rows = [row(), row(instance_id="o__r-2", FAIL_TO_PASS=["t::c"])]
    (tmp_path / "t.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (tmp_path / "t.json").write_text(json.dumps(rows))
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "t.parquet")
    loaded = [load_tasks(tmp_path / n) for n in ("t.jsonl", "t.json", "t.parquet")] + [
        load_tasks(rows)
    ]
    for tasks in loaded:
        assert [t.instance_id for t in tasks] == ["o__r-1", "o__r-2"]
        assert tasks[1].FAIL_TO_PASS == ["t::c"]


def test_filter_by_ids_and_unknown_id(tmp_path):
    rows = [row(), row(instance_id="o__r-2")]
    assert [t.instance_id for t in load_tasks(rows, instance_ids=["o__r-2"])] == ["o__r-2"]
    with pytest.raises(KeyError, match="nope"):
        load_tasks(rows, instance_ids=["nope"])


def test_hub_layout_folder_goes_through_datasets(tmp_path):
    # The hub code path is `datasets.load_dataset(id, split=...)`; exercise it on a local
    # dataset folder in the hub's layout and schema (SWE-bench style JSON-string lists).
    import datasets

    (tmp_path / "data").mkdir()
    ds = datasets.Dataset.from_list([row(FAIL_TO_PASS='["t::a"]', PASS_TO_PASS='["t::b"]')])
    ds.to_parquet(str(tmp_path / "data" / "test-00000-of-00001.parquet"))
    (loaded,) = load_tasks(tmp_path, split="test")
    assert loaded.instance_id == "o__r-1"
    assert loaded.FAIL_TO_PASS == ["t::a"] and loaded.PASS_TO_PASS == ["t::b"]


def test_bad_jsonl_line_is_located(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps(row()) + "\n{broken\n")
    with pytest.raises(TaskError, match="t.jsonl:2"):
        load_tasks(p)


def test_unknown_source_lists_accepted():
    with pytest.raises(FileNotFoundError, match="accepted"):
        load_tasks("./nope.jsonl")


def test_patch_files():
    assert patch_files(PATCH + TEST_PATCH) == ["pkg/a.py", "tests/test_a.py"]


def test_rows_without_tests_load_when_allowed():
    rows = [row(FAIL_TO_PASS=[])]
    with pytest.raises(TaskError, match="FAIL_TO_PASS"):
        load_tasks(rows)
    assert load_tasks(rows, require_tests=False)[0].FAIL_TO_PASS == []


def test_task_objects_with_empty_fail_to_pass_are_refused():
    """A ``Task`` is checked like a dict row: an empty FAIL_TO_PASS would grade an empty patch 1.0."""
    bare = Task(**{**row(), "FAIL_TO_PASS": [], "instance_id": "o__r-empty"})
    with pytest.raises(TaskError, match=r"o__r-empty.*FAIL_TO_PASS.*empty"):
        load_tasks([bare])
    assert load_tasks([bare], require_tests=False) == [bare]


def test_hub_id_without_network_fails_fast_with_a_hint(monkeypatch):
    import swe_gym.tasks as tasks

    monkeypatch.setattr(tasks, "_hub_reachable", lambda timeout=3.0: False)
    with pytest.raises(tasks.TaskSourceError, match=r"no-owner/no-dataset.*pass tasks= a local"):
        load_tasks("no-owner/no-dataset")
