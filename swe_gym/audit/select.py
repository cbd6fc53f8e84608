"""Reading audits back: where a source's audit lives, its verdicts, and ``task_filter``.

``task_filter="unhackable"`` keeps the valid tasks the audit did not flag; ``"hackable"`` keeps
the flagged ones (a weak set on purpose, for studying hacks); a callable ``Task -> bool`` is used
as it is. A task the audit does not hold is an error that names the command to run: a silent
keep would train on unaudited tasks under a name that says they were checked.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from swe_gym.errors import unknown_choice
from swe_gym.tasks import Task

TASK_FILTERS = ("unhackable", "hackable")
STARTER_AUDIT = Path(__file__).resolve().parent.parent / "starter" / "tasks.audit.json"
TaskFilter = str | Callable[[Task], bool]


def default_audit_path(source: Any) -> Path:
    """Where ``python -m swe_gym.audit`` writes a source's audit: ``<rows>.audit.json`` beside
    a rows file, ``starter.audit.json`` (the current folder) for the bundled suite, else
    ``<dataset id with __ for />.audit.json``."""
    if isinstance(source, (str, os.PathLike)):
        s = str(source)
        if s == "starter":
            return Path("starter.audit.json")
        p = Path(s)
        if p.suffix in (".jsonl", ".json", ".parquet"):
            return p.with_name(p.stem + ".audit.json")
        return Path(s.strip("/").replace("/", "__") + ".audit.json")
    raise ValueError(
        f"no default audit file for a task source of type {type(source).__name__}; pass audit=PATH"
    )


def audit_path_for(source: Any) -> Path:
    """The audit a filter reads for ``source``: the bundled suite's shipped audit, else the
    file beside the rows."""
    if source == "starter":
        return STARTER_AUDIT
    return default_audit_path(source)


def load_verdicts(path: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """``instance_id -> the audit's record`` (``valid``, ``hackable``, ``reasons``, ...)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(
            f"no audit at {p}; run `python -m swe_gym.audit <tasks> --out {p}` first"
        )
    doc = json.loads(p.read_text(encoding="utf-8"))
    tasks = doc.get("tasks") if isinstance(doc, dict) else None
    if not isinstance(tasks, dict):
        raise ValueError(f"{p} is not an audit file (no 'tasks' mapping)")
    return tasks


def flagged(verdict: dict[str, Any]) -> bool:
    """Whether training should treat the task as hackable: flagged, or not shown valid."""
    return bool(verdict.get("hackable")) or not verdict.get("valid", False)


def hackable_ids(source: Any, audit: str | os.PathLike | None = None) -> set[str]:
    """The ids an audit flags (``flagged``) for ``source``."""
    verdicts = load_verdicts(audit if audit is not None else audit_path_for(source))
    return {i for i, v in verdicts.items() if flagged(v)}


def filter_tasks(
    tasks: Sequence[Task],
    task_filter: TaskFilter,
    source: Any,
    audit: str | os.PathLike | None = None,
) -> list[Task]:
    """The tasks ``task_filter`` keeps (see the module doc)."""
    if callable(task_filter):
        return [t for t in tasks if task_filter(t)]
    if task_filter not in TASK_FILTERS:
        raise unknown_choice("task_filter", task_filter, TASK_FILTERS)
    path = Path(audit) if audit is not None else audit_path_for(source)
    verdicts = load_verdicts(path)
    missing = [t.instance_id for t in tasks if t.instance_id not in verdicts]
    if missing:
        raise ValueError(
            f"{len(missing)} task(s) are not in the audit {path} (e.g. {missing[:3]}); "
            "run `python -m swe_gym.audit` on this source again"
        )
    want = task_filter == "hackable"
    return [t for t in tasks if flagged(verdicts[t.instance_id]) == want]


__all__ = [
    "STARTER_AUDIT",
    "TASK_FILTERS",
    "TaskFilter",
    "audit_path_for",
    "default_audit_path",
    "filter_tasks",
    "flagged",
    "hackable_ids",
    "load_verdicts",
]
