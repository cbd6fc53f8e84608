"""The learning benchmark's stage runner: each stage its own process, resumable.

A stage that finished before with the same command, the same files and the same checkpoints
is not run again, so a benchmark cut off midway resumes where it stopped (split from
``bench_swe_learning.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


class Runner:
    """Runs each stage as its own process (clean memory, one engine each), logs to WORK/logs."""

    def __init__(self, work: Path, repos_dir: Path, progress: bool):
        self.logs = work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            "SWE_GYM_REPOS": str(repos_dir),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
        self.progress = progress
        self.walls: dict[str, float] = {}  # every stage's wall time, resumed ones included

    def __call__(self, name: str, *argv: str) -> float:
        """Run one stage; its wall time. A stage that finished before with the same command is
        not run again (a re-run after a failure resumes; its first wall time is kept)."""
        done = self.logs / f"{name}.done.json"
        key = _key(argv)
        before = json.loads(done.read_text()) if done.exists() else None
        if before is not None and before.get("key", _key(before["argv"])) == key:
            print(f"{name}: done before (see {done})", flush=True)
            self.walls[name] = float(before["wall_s"])
            return self.walls[name]
        t0 = time.perf_counter()
        log = self.logs / f"{name}.log"
        print(f"[{time.strftime('%H:%M:%S')}] {name}: python {' '.join(argv)[:200]}", flush=True)
        with log.open("w", encoding="utf-8") as fh:
            rc = subprocess.run(
                [sys.executable, *argv], cwd=ROOT, env=self.env, stdout=fh, stderr=subprocess.STDOUT
            ).returncode
        if rc:
            tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-30:])
            raise SystemExit(f"stage {name} failed (exit {rc}); {log}:\n{tail}")
        wall = time.perf_counter() - t0
        done.write_text(
            json.dumps({"argv": list(argv), "key": key, "wall_s": wall}), encoding="utf-8"
        )
        self.walls[name] = wall
        return wall


def _key(argv: Any) -> list[str]:
    """A stage's command without --concurrency (episodes are seeded per task, run and turn, so
    how many run at once does not change the result), each file it names followed by a hash of
    its content and each model folder by its weights' time stamps: a changed config section or
    a retrained checkpoint runs the stage again."""
    argv = list(argv)
    if "--concurrency" in argv:
        i = argv.index("--concurrency")
        del argv[i : i + 2]
    return [x for token in argv for x in (token, *_fingerprint(token))]


def _fingerprint(token: str) -> list[str]:
    path = Path(token.split(":", 1)[1] if token.startswith(("vllm:", "hf:")) else token)
    if not path.is_absolute() or not path.exists():
        return []
    if path.is_file():
        return [hashlib.sha256(path.read_bytes()).hexdigest()[:16]]
    return [f"{w.name}@{w.stat().st_mtime_ns}" for w in sorted(path.glob("*.safetensors"))]


__all__ = ["Runner"]
