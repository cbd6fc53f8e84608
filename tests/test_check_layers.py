"""scripts/check_layers.py: the layering ARCHITECTURE.md writes down holds, and an upward import,
lazy or relative, is named with its file and line."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "check_layers.py"

_spec = importlib.util.spec_from_file_location("check_layers", SCRIPT)
assert _spec is not None and _spec.loader is not None
check_layers = importlib.util.module_from_spec(_spec)
sys.modules["check_layers"] = check_layers  # dataclasses look their module up by name
_spec.loader.exec_module(check_layers)

SPEC = """# Architecture

## Layers

```layers
low
mid   # comments and blank lines are ignored

top
```
"""


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "ARCHITECTURE.md").write_text(SPEC)
    return root / "ARCHITECTURE.md"


def test_the_repository_imports_no_layer_above_its_own():
    run = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_layers_are_read_from_architecture():
    ranks = check_layers.read_layers((ROOT / "ARCHITECTURE.md").read_text())
    order = ["swe_gym", "envs", "agents", "algos.objectives", "algos.learner", "algos.config"]
    order += ["algos.rollout", "algos", "algos.loop", "algos.dapo"]
    assert [ranks[name] for name in order] == sorted({ranks[name] for name in order})
    assert len({ranks[name] for name in order}) == len(order)  # each its own layer, in order
    # the entry points share the top layer
    assert ranks["algos.dapo"] == ranks["algos.grpo"] == ranks["algos.rft"] == max(ranks.values())


def test_upward_imports_are_found_also_lazy_ones(tmp_path):
    spec = _tree(
        tmp_path,
        {
            "low/__init__.py": "",
            "low/a.py": "import os\nfrom low import b\n\n\ndef f():\n    import top.x\n",
            "low/b.py": "from . import a\nimport mid.m\n",
            "low/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from mid import m\n",
            "mid/__init__.py": "from . import m\nfrom low import a\n",  # same layer, below: fine
            "mid/m.py": "",
            "top/__init__.py": "",
            "top/x.py": "import low.a, mid.m\n",
        },
    )
    found = sorted(str(v).split(": ", 1)[1] for v in check_layers.check(tmp_path, spec))
    assert found == [
        "low.a (layer low) imports top.x (layer top, above it)",
        "low.b (layer low) imports mid.m (layer mid, above it)",
        "low.c (layer low) imports mid.m (layer mid, above it)",
    ]
    lines = {str(v).split(": ", 1)[0] for v in check_layers.check(tmp_path, spec)}
    assert lines == {f"{tmp_path}/low/a.py:6", f"{tmp_path}/low/b.py:2", f"{tmp_path}/low/c.py:3"}


def test_a_subpackage_line_puts_it_below_the_rest_of_its_package(tmp_path):
    spec = _tree(
        tmp_path,
        {
            "low/__init__.py": "",
            "low/core/__init__.py": "from low import app\n",  # core sits below the rest of low
            "low/core/x.py": "from ..app import thing\nfrom . import y\n",  # relative: low.app
            "low/app.py": "from low.core import thing\n",
        },
    )
    spec.write_text(spec.read_text().replace("low\nmid", "low.core\nlow\nmid"))
    found = sorted(str(v).split(": ", 1)[1] for v in check_layers.check(tmp_path, spec))
    assert found == [
        "low.core (layer low.core) imports low.app (layer low, above it)",
        "low.core.x (layer low.core) imports low.app.thing (layer low, above it)",
    ]


def test_a_missing_layers_block_is_an_error():
    with pytest.raises(SystemExit, match="no '## Layers' section"):
        check_layers.read_layers("# Architecture\n\nno block here\n")
