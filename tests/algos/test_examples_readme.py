"""Every command of examples/README.md runs as written.

The commands are read from the README's fenced ``bash`` blocks here, so the doc and this test
cannot drift: a command added there runs here. Each block runs in a fresh folder holding a link
to ``examples/`` (the default ``runs/`` folders land there); ``python -m X ARGS`` runs X's own
``main(ARGS)`` in this process, ``python FILE ARGS`` runs the file as ``__main__``, and a line
ending in ``&`` (a server for the next lines) runs in its own process until the block ends.
Two documented changes, both named in the README next to the commands: the long training runs
get ``SIZE_FLAGS`` appended, and the gateway block runs on a free port instead of 8000.
"""

from __future__ import annotations

import importlib
import os
import re
import runpy
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "examples" / "README.md"
# Appended to the README's commands of these programs (long training runs); the README says so.
SIZE_FLAGS = {
    "algos.dapo": "--iterations 1 --problems-per-iteration 4 --group-size 8 --batch-size 8"
}
PORT = "8000"  # the README's gateway port, replaced by a free one


def readme_blocks() -> list[list[list[str]]]:
    """Each fenced bash block of examples/README.md as its commands (argv lists)."""
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M)
    return [
        [
            argv
            for line in block.replace("\\\n", " ").splitlines()
            if (argv := shlex.split(line, comments=True))
        ]
        for block in blocks
    ]


def _block_id(block: list[list[str]]) -> str:
    return "+".join(a[2] if a[1] == "-m" else Path(a[1]).name for a in block)


BLOCKS = readme_blocks()
# a DAPO run, even cut to one iteration, takes ~35 s here: marked slow
CASES = [
    pytest.param(
        b,
        id=_block_id(b),
        marks=[pytest.mark.slow] * any(a[1:3] == ["-m", "algos.dapo"] for a in b),
    )
    for b in BLOCKS
]


def test_the_readme_has_commands_and_names_what_the_tests_change():
    assert len(BLOCKS) >= 3 and all(BLOCKS)
    text = " ".join(README.read_text(encoding="utf-8").split())
    for module, flags in SIZE_FLAGS.items():
        assert any(a[1:3] == ["-m", module] for b in BLOCKS for a in b), module
        assert f"`{flags}`" in text, f"the README must name the flags the test adds: {flags}"
    for block in BLOCKS:
        for argv in block:
            assert argv[0] == "python", f"not a python command: {shlex.join(argv)}"


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _start_server(argv: list[str], cwd: Path, log: Path) -> subprocess.Popen:
    """A ``... &`` line: its own process, waited on until it prints its URL."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    with log.open("w") as out:  # the child keeps its own handle
        proc = subprocess.Popen(
            [sys.executable, *argv[1:]],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    deadline = time.monotonic() + 240
    while "http://" not in log.read_text():
        assert proc.poll() is None, f"{shlex.join(argv)} exited: {log.read_text()[-2000:]}"
        assert time.monotonic() < deadline, f"{shlex.join(argv)} printed no URL"
        time.sleep(0.5)
    return proc


def _run(argv: list[str]) -> int:
    """``python -m X ARGS`` as ``X.main(ARGS)``; ``python FILE ARGS`` as ``__main__``."""
    try:
        if argv[1] == "-m":
            return importlib.import_module(argv[2]).main(argv[3:]) or 0
        saved = sys.argv
        sys.argv = argv[1:]
        try:
            runpy.run_path(argv[1], run_name="__main__")
        finally:
            sys.argv = saved
        return 0
    except SystemExit as e:
        return e.code or 0


def _check_run(argv: list[str], before: set[Path], runs: Path) -> None:
    """A training command wrote a run with a metrics row; with ``--agent P``, every episode it
    kept or saved was played by P, token-exact."""
    from agents.trajectory import Trajectory
    from algos.loop.metrics import read_metrics

    (run,) = set(runs.iterdir()) - before
    assert read_metrics(run), f"{run}: no metrics row"
    if "--agent" in argv:
        program = argv[argv.index("--agent") + 1]
        files = [run / "rft_data.jsonl", *sorted((run / "episodes").glob("iter-*.jsonl"))]
        episodes = [t for f in files if f.exists() for t in Trajectory.load_jsonl(f)]
        assert episodes, f"{run}: no episodes saved"
        assert all(t.agent["program"] == program and t.token_exact for t in episodes)


@pytest.mark.parametrize("block", CASES)
def test_readme_block_runs_as_written(block, tmp_path: Path, monkeypatch):
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "runs"
    runs.mkdir()
    port = _free_port()
    servers = []
    try:
        for k, argv in enumerate(block):
            argv = [a.replace(f":{PORT}", f":{port}") for a in argv]
            if argv[-1] == "&":
                servers.append(
                    _start_server(
                        [*argv[:-1], "--port", port], tmp_path, tmp_path / f"server{k}.log"
                    )
                )
                continue
            if argv[1] == "-m" and argv[2] in SIZE_FLAGS:
                argv = [*argv, *SIZE_FLAGS[argv[2]].split()]
            before = set(runs.iterdir())
            assert _run(argv) == 0, shlex.join(argv)
            if argv[1] == "-m" and argv[2].startswith("algos."):
                _check_run(argv, before, runs)
    finally:
        for proc in servers:
            proc.terminate()
            proc.wait(timeout=60)
    for k in range(len(servers)):
        assert "Traceback" not in (tmp_path / f"server{k}.log").read_text()
