"""Counts the files one training iteration passes through, from ``Trainer.run`` to the first
``optimizer.step()``: a profiler hook records every call into the project's packages on the
trainer's thread (the toy run: one DAPO iteration, tiny random policy, a few seconds on a CPU).

    python scripts/trace_iteration.py [--show]

Prints the distinct files and the file-to-file calls (a function in one file calling one in
another, each pair once), and the count with ``--as-one`` folders as one part each (ARCHITECTURE's
RL loop draws ``algos/objectives/``, pure tensor math, as one); ``--show`` lists the calls.
``tests/algos/loop/test_iteration_path.py`` keeps the count within the issue's bound.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class IterationPath:
    files: list[str]  # distinct, sorted
    calls: list[tuple[str, str]]  # (caller file, callee file), each pair once, sorted

    def parts(self, as_one: tuple[str, ...] = ("algos/objectives",)) -> list[str]:
        """The files with each ``as_one`` folder counted as one part."""
        boxes = tuple(f.rstrip("/") + "/" for f in as_one)
        return sorted({next((b for b in boxes if f.startswith(b)), f) for f in self.files})


def trace_path(packages: tuple[str, ...] = ("algos",), **toy: Any) -> IterationPath:
    """The files and calls of one toy DAPO iteration up to its first optimiser step."""
    sys.path.insert(0, str(ROOT))
    from algos.loop.trainer import Trainer
    from tests.algos.toy_run import toy_cfg

    roots = tuple(str(ROOT / p) + "/" for p in packages)
    files: set[str] = set()
    calls: set[tuple[str, str]] = set()
    done = threading.Event()
    main_thread = threading.get_ident()

    def project_file(frame: FrameType) -> str | None:
        name = frame.f_code.co_filename
        return str(Path(name).relative_to(ROOT)) if name.startswith(roots) else None

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or done.is_set() or threading.get_ident() != main_thread:
            return
        callee = project_file(frame)
        if callee is None:
            return
        files.add(callee)
        caller = frame.f_back  # the nearest project frame above: library frames skipped
        while caller is not None and project_file(caller) is None:
            caller = caller.f_back
        if caller is not None and (source := project_file(caller)) not in (None, callee):
            calls.add((str(source), callee))

    sizes = {"iterations": 1, "group_size": 4, "problems_per_iteration": 2, "batch_size": 2}
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(toy_cfg(Path(tmp), **{**sizes, **toy}), "dapo")
        optimizer = trainer.learner.optimizer
        real_step = optimizer.step  # the instance's (an LR scheduler wraps it there)

        def step(*a: Any, **kw: Any) -> Any:  # the path ends at the first optimiser step
            done.set()
            return real_step(*a, **kw)

        optimizer.step = step  # type: ignore[method-assign]
        sys.setprofile(hook)
        try:
            trainer.run()
        finally:
            sys.setprofile(None)
            optimizer.step = real_step  # type: ignore[method-assign]
            trainer.close()
    return IterationPath(sorted(files), sorted(calls))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--show", action="store_true", help="list the file-to-file calls")
    ap.add_argument("--packages", default="algos", help="packages counted (comma-separated)")
    ap.add_argument(
        "--as-one",
        default="algos/objectives",
        help="folders counted as one part, as ARCHITECTURE's RL loop draws them (comma-separated)",
    )
    args = ap.parse_args()
    path = trace_path(tuple(args.packages.split(",")))
    as_one = tuple(f for f in args.as_one.split(",") if f)
    print(
        f"{len(path.files)} files, {len(path.calls)} file-to-file calls (caller file -> callee "
        "file, each pair once) from Trainer.run to optimizer.step"
    )
    print(
        f"{len(path.parts(as_one))} parts as ARCHITECTURE draws them ({', '.join(as_one)} one each)"
    )
    for f in path.files:
        print(f"  {f}")
    if args.show:
        for a, b in path.calls:
            print(f"  {a} -> {b}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
