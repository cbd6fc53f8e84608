"""Task rows in the SWE-bench / SWE-rebench schema (docs/methods.md#task-data), normalised.

``load_tasks(source)`` accepts a hub dataset id (through ``datasets``), a local JSONL / JSON /
parquet file, a list of dicts or of ``Task``; it returns ``list[Task]``. FAIL_TO_PASS and
PASS_TO_PASS are always lists, whether the source stored JSON strings (SWE-bench) or lists
(SWE-rebench). A bad row raises ``TaskError`` naming the row's id and the field; a row with
an empty FAIL_TO_PASS is refused (dict or ``Task`` alike) unless ``require_tests=False``.

Minimal row for a pure-pytest repository (a local JSONL line; clones are found as
``<repos_dir>/<owner>__<name>``, see ``swe_gym.repos``)::

    {"instance_id": "me__calc-1", "repo": "me/calc", "base_commit": "<40-hex sha>",
     "problem_statement": "add(2, 2) returns 0", "patch": "<gold diff>",
     "test_patch": "<diff adding/changing tests>",
     "FAIL_TO_PASS": ["tests/test_calc.py::test_add"], "PASS_TO_PASS": []}

Required: ``instance_id``, ``repo``, ``base_commit``, ``problem_statement``, ``patch``,
``test_patch`` (strings) and a non-empty ``FAIL_TO_PASS`` (a list, or a JSON string of one).
Defaults: ``PASS_TO_PASS`` empty; ``install_config`` absent means ``test_cmd`` ``pytest -rA``
(followed by the test patch's files) and ``log_parser`` ``parse_log_pytest``; set
``install_config.env_vars`` for variables; the Docker backend also needs ``install_config``'s
``python`` / ``pip_packages`` (or ``image_name``) to build an image. Test ids are pytest's
node ids as ``-rA`` prints them, relative to the repository root.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swe_gym.errors import SWEGymError, TaskError

REQUIRED_FIELDS = ("instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch")
_LIST_FIELDS = ("FAIL_TO_PASS", "PASS_TO_PASS")
_IMAGE_FIELDS = ("docker_image", "image_name")


@dataclass(frozen=True)
class Task:
    """One software-engineering task. Field names follow the datasets' own features."""

    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    patch: str
    test_patch: str
    FAIL_TO_PASS: list[str]
    PASS_TO_PASS: list[str]
    hints_text: str = ""
    version: str = ""
    environment_setup_commit: str = ""
    created_at: str = ""
    install_config: dict[str, Any] | None = None
    image_name: str | None = None
    license_name: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    # Everything else in the source row, kept so nothing is lost (requirements, environment, ...).
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def test_files(self) -> list[str]:
        """Paths the test patch touches (grading restores them before running the tests)."""
        return patch_files(self.test_patch)

    @property
    def code_files(self) -> list[str]:
        return patch_files(self.patch)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        extra = d.pop("extra")
        d.update(extra)
        return d

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> Task:
        return normalise_row(row)


def patch_files(patch: str) -> list[str]:
    """Paths (b-side, or a-side for deletions) of a unified git diff, in order, unique."""
    files: list[str] = []
    for line in patch.splitlines():
        if line.startswith("diff --git "):
            parts = line.split(" b/", 1)
            if len(parts) == 2:
                path = parts[1].strip()
                if path not in files:
                    files.append(path)
    return files


def _as_list(value: Any, iid: str, name: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return []
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise TaskError(
                iid, name, f"is a string but not a JSON list ({e.msg}): {text[:80]!r}"
            ) from None
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        raise TaskError(iid, name, f"must be a list of test ids, got {type(value).__name__}")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise TaskError(
                iid, name, f"item {i} must be a string test id, got {type(item).__name__}"
            )
        out.append(item)
    return out


def _as_dict(value: Any, iid: str, name: str) -> dict[str, Any] | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise TaskError(iid, name, f"is a string but not a JSON object ({e.msg})") from None
    if not isinstance(value, Mapping):
        raise TaskError(iid, name, f"must be a mapping, got {type(value).__name__}")
    return dict(value)


def normalise_row(row: Mapping[str, Any], *, require_tests: bool = True) -> Task:
    """Turn one dataset row into a ``Task``; raises ``TaskError`` naming the bad field.

    ``require_tests=False`` accepts rows without FAIL_TO_PASS (e.g. curated SWE-RL rows that were
    not execution-validated; they can be rewarded by similarity but not graded by tests).
    """
    if isinstance(row, Task):
        if require_tests and not row.FAIL_TO_PASS:
            raise TaskError(
                row.instance_id, "FAIL_TO_PASS", "is empty: a task needs at least one failing test"
            )
        return row
    if not isinstance(row, Mapping):
        raise TaskError(None, "<row>", f"must be a mapping, got {type(row).__name__}")
    iid = row.get("instance_id")
    if not isinstance(iid, str) or not iid:
        raise TaskError(None, "instance_id", f"missing or not a non-empty string (got {iid!r})")
    for name in REQUIRED_FIELDS[1:]:
        if name not in row or row[name] is None:
            raise TaskError(iid, name, "missing")
        if not isinstance(row[name], str):
            raise TaskError(iid, name, f"must be a string, got {type(row[name]).__name__}")
    for name in ("repo", "base_commit"):
        if not row[name].strip():
            raise TaskError(iid, name, "is empty")
    lists = {name: _as_list(row.get(name), iid, name) for name in _LIST_FIELDS}
    if require_tests and not lists["FAIL_TO_PASS"]:
        raise TaskError(iid, "FAIL_TO_PASS", "is empty: a task needs at least one failing test")
    image = next((row[k] for k in _IMAGE_FIELDS if row.get(k)), None)
    known = {f.name for f in dataclasses.fields(Task)} | set(_IMAGE_FIELDS)
    extra = {k: v for k, v in row.items() if k not in known}
    return Task(
        instance_id=iid,
        repo=row["repo"],
        base_commit=row["base_commit"],
        problem_statement=row["problem_statement"],
        patch=row["patch"],
        test_patch=row["test_patch"],
        FAIL_TO_PASS=lists["FAIL_TO_PASS"],
        PASS_TO_PASS=lists["PASS_TO_PASS"],
        hints_text=row.get("hints_text") or "",
        version=str(row.get("version") or ""),
        environment_setup_commit=row.get("environment_setup_commit") or "",
        created_at=str(row.get("created_at") or ""),
        install_config=_as_dict(row.get("install_config"), iid, "install_config"),
        image_name=image,
        license_name=row.get("license_name") or "",
        meta=_as_dict(row.get("meta"), iid, "meta") or {},
        extra=extra,
    )


TaskSource = str | os.PathLike | Iterable[Mapping[str, Any] | Task]


def _read_file(path: Path) -> list[dict[str, Any]]:
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        rows = []
        with path.open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise TaskError(
                        None, "<row>", f"{path}:{lineno} is not valid JSON ({e.msg})"
                    ) from None
        return rows
    if suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, Mapping):
            data = [data]
        return list(data)
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    raise ValueError(
        f"unknown task file type {suffix!r} for {path}; accepted: .jsonl, .json, .parquet"
    )


def load_tasks(
    source: TaskSource,
    *,
    split: str = "test",
    instance_ids: Iterable[str] | None = None,
    require_tests: bool = True,
) -> list[Task]:
    """Load and normalise tasks.

    Args:
        source: a local ``.jsonl``/``.json``/``.parquet`` path, a hub dataset id
            (``"nebius/SWE-rebench"``, loaded with ``datasets.load_dataset(source, split=split)``),
            a dataset folder in the hub layout (same loader), ``"starter"`` for the bundled suite, or an iterable of row dicts / ``Task``.
        split: dataset split for hub ids.
        instance_ids: keep only these ids (in the source's order); an unknown id is an error.
        require_tests: reject rows with an empty FAIL_TO_PASS (see ``normalise_row``).
    """
    norm = functools.partial(normalise_row, require_tests=require_tests)
    tasks = [norm(r) for r in load_rows(source, split=split)]
    seen: set[str] = set()
    for t in tasks:
        if t.instance_id in seen:
            raise TaskError(t.instance_id, "instance_id", "appears twice in the source")
        seen.add(t.instance_id)
    if instance_ids is not None:
        wanted = list(instance_ids)
        missing = [i for i in wanted if i not in seen]
        if missing:
            raise KeyError(
                f"unknown instance_id(s) {missing[:5]}; the source has {len(seen)} tasks"
            )
        keep = set(wanted)
        tasks = [t for t in tasks if t.instance_id in keep]
    return tasks


def _hub_reachable(timeout: float = 3.0) -> bool:
    import socket
    from urllib.parse import urlsplit

    from huggingface_hub import constants

    url = urlsplit(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _load_hub(dataset_id: str, split: str) -> Iterable[Mapping[str, Any]]:
    import datasets
    import datasets.config
    from huggingface_hub import constants

    hint = (
        f"could not load the hub dataset {dataset_id!r} (split {split!r}): {{e}}. Without network, "
        "pass tasks= a local .jsonl/.json/.parquet file (or a list of rows) in the same schema; "
        "see swe_gym.tasks for the minimal row"
    )
    offline = Path(dataset_id).is_dir() or constants.HF_HUB_OFFLINE or not _hub_reachable()
    # Unreachable: load from the local cache only (the online path retries for ~25 s first).
    saved = constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE
    if offline:
        constants.HF_HUB_OFFLINE = datasets.config.HF_HUB_OFFLINE = True
    try:
        return datasets.load_dataset(dataset_id, split=split)
    except (ConnectionError, OSError) as e:
        raise TaskSourceError(hint.format(e=e)) from e
    finally:
        constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE = saved


class TaskSourceError(SWEGymError, ConnectionError):
    """A task source could not be read (e.g. a hub id without network)."""


def load_rows(source: TaskSource, *, split: str = "test") -> list[Any]:
    """The raw rows of ``source`` (dicts or ``Task``), not normalised: for tools that judge each
    row on its own (``python -m swe_gym.validate``)."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if str(source) == "starter":
            from swe_gym.starter import starter_tasks

            return list(starter_tasks())
        if path.is_dir():
            return list(_load_hub(str(path), split))
        if path.exists():
            return _read_file(path)
        if isinstance(source, str) and "/" in source and not source.startswith((".", "/")):
            return list(_load_hub(source, split))
        raise FileNotFoundError(
            f"task source {str(source)!r} is neither an existing file nor a hub dataset id "
            "(owner/name); accepted: a .jsonl/.json/.parquet path, a hub id, 'starter', or a list of rows"
        )
    return list(source)
