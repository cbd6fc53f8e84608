"""Train / held-out split that keeps every function's bugs on one side.

Two bugs in one function share most of what an agent must learn (where the code is, what it
should do), so a held-out task whose function also appears in training measures recall, not
generalisation. Functions are ordered by a hash of ``(seed, function)`` and taken into the
held-out side until it holds the requested fraction of tasks: the split depends on the seed
and the set of functions, not on row order.

    python -m swe_gym.synth.split tasks.jsonl --held-out 0.2 --seed 0 --train train.jsonl --test heldout.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from swe_gym.tasks import Task

Row = TypeVar("Row", Task, Mapping[str, Any])


def function_of(row: Task | Mapping[str, Any]) -> str:
    """The group a row belongs to: ``meta["function"]`` (``path::qualname``), else its instance id."""
    meta = row.meta if isinstance(row, Task) else row.get("meta") or {}
    iid = row.instance_id if isinstance(row, Task) else row["instance_id"]
    return str(meta.get("function") or iid)


def split_tasks(
    rows: Iterable[Row], held_out: float = 0.2, seed: int = 0
) -> tuple[list[Row], list[Row]]:
    """``(train, held_out)``, each in input order; no function has rows on both sides.

    ``held_out`` is the target fraction of rows (reached as closely as whole functions allow,
    at least one function when there are two or more)."""
    if not 0.0 <= held_out <= 1.0:
        raise ValueError(f"held_out must be a fraction in [0, 1], got {held_out!r}")
    rows = list(rows)
    groups: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        groups[function_of(row)].append(i)
    order = sorted(groups, key=lambda f: hashlib.sha256(f"{seed}\0{f}".encode()).hexdigest())
    target = held_out * len(rows)
    test_idx: set[int] = set()
    for func in order:
        if len(test_idx) >= target or (
            held_out < 1.0 and len(test_idx) + len(groups[func]) > target and test_idx
        ):
            continue
        test_idx.update(groups[func])
    if held_out > 0 and not test_idx and len(groups) > 1:
        test_idx.update(groups[order[0]])
    if held_out < 1 and len(test_idx) == len(rows) and len(groups) > 1:
        test_idx.difference_update(groups[order[-1]])
    train = [r for i, r in enumerate(rows) if i not in test_idx]
    test = [r for i, r in enumerate(rows) if i in test_idx]
    return train, test


def _read(path: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


def _write(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m swe_gym.synth.split", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "tasks", type=Path, help="tasks JSONL (rows with meta.function, as synth writes)"
    )
    p.add_argument(
        "--held-out", type=float, default=0.2, help="fraction of rows held out (default 0.2)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train", type=Path, required=True, help="where the training rows go")
    p.add_argument("--test", type=Path, required=True, help="where the held-out rows go")
    args = p.parse_args(argv)
    train, test = split_tasks(_read(args.tasks), args.held_out, args.seed)
    _write(args.train, train)
    _write(args.test, test)
    funcs = len({function_of(r) for r in train}), len({function_of(r) for r in test})
    print(f"train: {len(train)} rows ({funcs[0]} functions) -> {args.train}")
    print(f"held out: {len(test)} rows ({funcs[1]} functions) -> {args.test}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["function_of", "split_tasks"]
