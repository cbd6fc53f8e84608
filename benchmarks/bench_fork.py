"""Forking an episode against replaying it: ``env.fork(n)`` beside n fresh ``reset`` + prefix.

    python benchmarks/bench_fork.py [--n 8] [--files 10000] [--backends local docker]

For each backend and task (a bundled starter task, and a generated repository of ``--files``
files), an episode runs a prefix of five actions (cd, export, an append to a tracked file, a
file created with the editor, a deleted file), then is copied into ``--n`` envs two ways:
``env.fork(n)`` (on Docker once per route, ``commit`` and ``archive``) and n fresh envs, each
``reset`` to the same task and stepped through the same prefix; ``--repeat`` interleaved rounds,
medians reported. Per child: wall time, the RSS of
its sandbox's processes (local: its pid namespace, from ``/proc``; Docker: the container's
memory usage) and its disk (local: the private temp dir's blocks; Docker: the container's
writable layer). Targets (not asserted): under 100 ms a child on local for the starter task,
under 1 s on Docker. Each child's shell is checked to be at the prefix's state. Prints a table
and writes ``benchmarks/results/fork.json`` (no absolute paths).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from swe_gym.tools.parsing import ToolCall, format_action

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sandbox import make_repo  # noqa: E402 - a sibling script, not a package

PREFIX = [
    ToolCall("bash", {"command": "export BENCH_FORK=1 && cd /testbed"}),
    ToolCall("bash", {"command": "f=$(git ls-files '*.py' | head -1); echo '# bench' >> \"$f\""}),
    ToolCall(
        "str_replace_editor", {"command": "create", "path": "/testbed/n.txt", "file_text": "x"}
    ),
    ToolCall("bash", {"command": 'rm -f "$(git ls-files | tail -1)"'}),
    ToolCall("bash", {"command": 'cd "$(dirname "$(git ls-files \'*.py\' | head -1)")"'}),
]
TARGET_MS = {"local": 100.0, "docker": 1000.0}


def play_prefix(env: Any) -> None:
    for call in PREFIX:
        obs, *_ = env.step(format_action(call, "fenced"))
        assert "ERROR" not in obs, obs


def check_state(env: Any, parent_cwd: str) -> None:
    r = env.unwrapped.sandbox.run('echo "$BENCH_FORK"; pwd; cat /testbed/n.txt')
    assert r.output.split("\n")[:3] == ["1", parent_cwd, "x"], r.output


def footprint(sandbox: Any, backend: str) -> tuple[float, float]:
    """(RSS MB of the sandbox's processes, disk MB of its own copy)."""
    if backend == "local":
        rss = 0
        for pid in sandbox._session.transport.remaining():
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        rss += int(line.split()[1])
            except OSError:
                pass
        du = subprocess.run(
            ["du", "-s", "--block-size=1", str(sandbox.root)], capture_output=True, text=True
        )
        return rss / 1024, int(du.stdout.split()[0]) / 2**20
    api = sandbox.client.api
    stats = api.stats(sandbox.container.id, stream=False, one_shot=True)
    mem = (stats.get("memory_stats") or {}).get("usage") or 0
    listed = api.containers(all=True, size=True, filters={"id": sandbox.container.id})
    size = (listed[0].get("SizeRw") if listed else 0) or 0
    return mem / 2**20, size / 2**20


def measure(make_env: Any, backend: str, task_id: str, n: int, route: str | None) -> dict:
    from envs.fork import fork_env

    env = make_env()
    kids: list[Any] = []
    try:
        env.reset(options={"task_id": task_id})
        play_prefix(env)
        cwd = env.unwrapped.sandbox.run("pwd").output.strip()
        t0 = time.perf_counter()
        if route is None:  # fresh: reset and replay the prefix, n times
            for _ in range(n):
                kid = make_env()
                kids.append(kid)
                kid.reset(options={"task_id": task_id})
                play_prefix(kid)
        else:
            if backend == "docker":
                import swe_gym.sandbox.docker_fork as docker_fork

                docker_fork.DEFAULT_FORK_METHOD = route
            kids = fork_env(env, n)
        per_child_ms = (time.perf_counter() - t0) * 1000 / n
        for kid in kids:
            check_state(kid, cwd)
        feet = [footprint(kid.unwrapped.sandbox, backend) for kid in kids]
        return {
            "per_child_ms": per_child_ms,
            "rss_mb": sum(f[0] for f in feet) / n,
            "disk_mb": sum(f[1] for f in feet) / n,
        }
    finally:
        for kid in kids:
            kid.close()
        env.close()


def median_run(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=8, help="children per fork")
    ap.add_argument("--files", type=int, default=10_000, help="files of the generated repository")
    ap.add_argument("--backends", nargs="+", default=["local", "docker"])
    ap.add_argument("--repeat", type=int, default=3, help="interleaved rounds (medians)")
    ap.add_argument("--out", default="benchmarks/results/fork.json")
    args = ap.parse_args()

    from envs.swe_env import SWEEnv
    from swe_gym.starter import starter_tasks
    from swe_gym.tasks import Task

    tmp = Path(tempfile.mkdtemp(prefix="bench_fork_"))
    rows: list[dict] = []
    try:
        t0 = time.perf_counter()
        _, sha = make_repo(tmp / "repos", args.files)
        print(f"generated {args.files} files in {time.perf_counter() - t0:.1f} s", flush=True)
        big = Task("bench__repo-1", "bench/repo", sha, "p", "", "", ["t"], [])
        starter = starter_tasks()[0]
        repos = {"repos_dir": str(tmp / "repos")}
        tasks = [("starter", [starter], starter.instance_id, {}),
                 (f"{args.files} files", [big], big.instance_id, repos)]  # fmt: skip
        for backend in args.backends:
            routes = ["commit", "archive"] if backend == "docker" else ["reflink-or-copy"]
            extra = []
            if backend == "local" and os.access("/dev/shm", os.W_OK):  # the copy on tmpfs
                extra = [(f"{args.files} files, tmp_dir=/dev/shm", [big], big.instance_id,
                          {**repos, "tmp_dir": "/dev/shm"})]  # fmt: skip
            for label, source, task_id, opts in tasks + extra:

                def make_env(source=source, opts=opts, backend=backend) -> Any:
                    return SWEEnv(source, backend=backend, sandbox_options=opts, max_turns=50)

                # interleaved rounds, medians: the machine's load swings between minutes
                runs: dict[str | None, list[dict]] = {r: [] for r in [None, *routes]}
                for _ in range(args.repeat):
                    for r in runs:
                        runs[r].append(measure(make_env, backend, task_id, args.n, r))
                fresh = median_run(runs[None])
                for route in routes:
                    forked = median_run(runs[route])
                    row = {
                        "backend": backend,
                        "task": label,
                        "route": route,
                        "n": args.n,
                        "fork_ms_per_child": round(forked["per_child_ms"], 1),
                        "fresh_ms_per_child": round(fresh["per_child_ms"], 1),
                        "speedup": round(fresh["per_child_ms"] / forked["per_child_ms"], 1),
                        "fork_rss_mb": round(forked["rss_mb"], 1),
                        "fresh_rss_mb": round(fresh["rss_mb"], 1),
                        "fork_disk_mb": round(forked["disk_mb"], 1),
                        "fresh_disk_mb": round(fresh["disk_mb"], 1),
                        "target_ms": TARGET_MS[backend],
                    }
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    head = ("backend", "task", "route", "fork ms/child", "fresh ms/child", "x", "RSS MB f/r",
            "disk MB f/r")  # fmt: skip
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in rows:
        cells = [r["backend"], r["task"], r["route"], f"{r['fork_ms_per_child']:.0f}",
                 f"{r['fresh_ms_per_child']:.0f}", f"{r['speedup']:.1f}",
                 f"{r['fork_rss_mb']:.1f} / {r['fresh_rss_mb']:.1f}",
                 f"{r['fork_disk_mb']:.1f} / {r['fresh_disk_mb']:.1f}"]  # fmt: skip
        print("| " + " | ".join(cells) + " |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"cpus": os.cpu_count(), "python": sys.version.split()[0], "euid": os.geteuid(),
            "n": args.n, "files": args.files, "prefix_actions": len(PREFIX),
            "repeat": args.repeat, "load_avg_at_end": os.getloadavg()[0]}  # fmt: skip
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
