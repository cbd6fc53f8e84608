"""Launch helpers for the distributed tests: real torchrun processes on CPU with gloo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
ROOT = HERE.parents[2]


def torchrun(args: list[str], nproc: int, timeout: float = 240) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc-per-node nproc <args>`` from the repository root."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        *args,
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
        )
    return proc


@pytest.fixture(scope="session")
def torchrun_fn():
    """The :func:`torchrun` launcher (fixtures, because test modules cannot import conftest)."""
    return torchrun


@pytest.fixture
def run_worker(tmp_path):
    """Run a worker script of this folder under torchrun; return the JSON it wrote."""

    def run(script: str, nproc: int, *extra: str) -> dict:
        out = tmp_path / f"{Path(script).stem}-{nproc}.json"
        torchrun([str(HERE / script), str(out), *extra], nproc)
        return json.loads(out.read_text())

    return run
