"""One training iteration reads as one path: from ``Trainer.run`` to ``optimizer.step()`` it
passes through at most 15 parts as ARCHITECTURE draws them (``algos/objectives/`` one)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _trace():
    spec = importlib.util.spec_from_file_location(
        "trace_iteration", ROOT / "scripts" / "trace_iteration.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks the module up
    spec.loader.exec_module(module)
    return module.trace_path()


def test_one_iteration_passes_through_at_most_15_parts():
    path = _trace()
    parts = path.parts()
    assert len(parts) <= 15, f"{len(parts)} parts: {parts}"
    # the walk reaches the loss and the optimiser step, so it traced the whole iteration
    assert "algos/learner/learner.py" in parts and "algos/objectives/" in parts
    assert ("algos/loop/trainer.py", "algos/rollout/collect.py") in path.calls
