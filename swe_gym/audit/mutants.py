"""Wrong patches by mutation: the gold-fixed code of the touched functions, mutated by the
synthesis operators (``swe_gym.synth.operators``). A mutant the task's tests still accept is a
wrong patch that would be paid: a gap in the tests.

A mutant that gives back the base text (it re-creates the bug) is left out: it is the bug, not
a new wrong patch. Candidates are interleaved across operators in a seeded order and cut to
``limit``, as synthesis does, so a large function does not spend the budget on one operator.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass

from swe_gym.audit.targets import Sources
from swe_gym.swerl.apply import make_patch
from swe_gym.synth.operators import mutations_of


@dataclass(frozen=True)
class Mutant:
    name: str  # operator@path:line
    operator: str
    patch: str


def build_mutants(sources: Sources, limit: int, seed: int = 0) -> list[Mutant]:
    """Up to ``limit`` mutants of the gold-fixed touched functions, each as a patch from
    ``base_commit``."""
    quals = {(t.path, t.qualname) for t in sources.targets}
    by_op: dict[str, list[Mutant]] = defaultdict(list)
    seen: set[str] = set()
    for path in sorted({t.path for t in sources.targets}):
        fixed = sources.fixed[path]
        assert fixed is not None  # a target's file exists after the gold patch
        for m in mutations_of(path, fixed):
            if (path, m.qualname) not in quals:
                continue
            text = m.apply(fixed)
            if text == sources.base.get(path) or text in seen:
                continue
            seen.add(text)
            patch = make_patch(sources.base, {**sources.fixed, path: text})
            by_op[m.operator].append(Mutant(f"{m.operator}@{path}:{m.lineno}", m.operator, patch))
    rng = random.Random(seed)
    queues = []
    for op in sorted(by_op):
        rng.shuffle(by_op[op])
        queues.append(by_op[op])
    order: list[Mutant] = []
    for i in range(max((len(q) for q in queues), default=0)):
        order += [q[i] for q in queues if i < len(q)]
    return order[:limit]


__all__ = ["Mutant", "build_mutants"]
