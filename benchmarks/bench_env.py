"""SWEEnv on the local backend: step round trip, reset, grading time.

    python benchmarks/bench_env.py [--steps 300] [--resets 20]

Side by side in one run: a fresh `bash -c` per command and a fresh bubblewrap sandbox per command
(the naive designs) against `env.step` through the persistent session (parsing, tool and
observation formatting included); `reset()` on a generated 1,000-file repository; grading a
starter task (oracle patch); 5 MB actions (a reply of reasoning then one command, a 5 MB file
through the editor, and parsing alone on adversarial 5 MB replies). Prints a table and writes
benchmarks/results/bench_env.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import gymnasium as gym

import swe_gym  # noqa: F401


def _median_ms(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _git(cwd: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "b",
        "GIT_AUTHOR_EMAIL": "b@b",
        "GIT_COMMITTER_NAME": "b",
        "GIT_COMMITTER_EMAIL": "b@b",
        "PATH": "/usr/bin:/bin",
    }
    return subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def big_repo_task(root: Path, n_files: int = 1000) -> dict:
    repo = root / "bench__big"
    (repo / "pkg").mkdir(parents=True)
    for i in range(n_files):
        (repo / "pkg" / f"m{i:04d}.py").write_text(f"def f{i}(x):\n    return x + {i}\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "init")
    base = _git(repo, "rev-parse", "HEAD").strip()
    patch = "diff --git a/pkg/m0000.py b/pkg/m0000.py\n--- a/pkg/m0000.py\n+++ b/pkg/m0000.py\n@@ -1,2 +1,2 @@\n def f0(x):\n-    return x + 0\n+    return x\n"
    return {
        "instance_id": "bench__big-1",
        "repo": "bench/big",
        "base_commit": base,
        "problem_statement": "bench",
        "patch": patch,
        "test_patch": patch.replace("pkg/m0000.py", "tests/t.py"),
        "FAIL_TO_PASS": ["t::x"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--resets", type=int, default=20)
    ap.add_argument("--out", default="benchmarks/results/bench_env.json")
    args = ap.parse_args()
    rows: dict[str, float] = {}

    rows["fresh bash -c per command"] = _median_ms(
        lambda: subprocess.run(["bash", "-c", "true"]), args.steps
    )
    bwrap = shutil.which("bwrap")
    if bwrap:
        cmd = [
            bwrap,
            "--unshare-all",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
            "bash",
            "-c",
            "true",
        ]
        rows["fresh bwrap sandbox per command"] = _median_ms(
            lambda: subprocess.run(cmd), args.steps
        )

    env = gym.make("SWEStarter-v0", max_turns=10**6)
    env.reset(seed=0)
    action = "```\ntrue\n```"
    rows["env.step('true') persistent session"] = _median_ms(lambda: env.step(action), args.steps)
    task_id = env.unwrapped.task.instance_id

    five_mb = 5_000_000
    reply = "I think " * (five_mb // 8) + "\n```\ntrue\n```"
    rows["env.step: 5 MB reply (reasoning + one command)"] = _median_ms(lambda: env.step(reply), 3)
    body = "x = 1  # a line of code\n" * (five_mb // 24)
    creates = iter(range(10**6))
    rows["env.step: 5 MB file via str_replace_editor create"] = _median_ms(
        lambda: env.step(f"```\nstr_replace_editor create big{next(creates)}.py\n{body}```"), 3
    )
    env.close()

    from swe_gym.tools.parsing import parse_action

    for name, text in {
        "200k backticks": "`" * 200_000,
        "5 MB of fence lines": "```\n" * (five_mb // 4),
        "5 MB of unclosed fences": "```x\n" * (five_mb // 5),
        "5 MB of $( in one block": "```\n" + "$(" * (five_mb // 2) + "\n```",
    }.items():
        rows[f"parse_action: {name}"] = _median_ms(lambda t=text: parse_action(t), 3)

    with tempfile.TemporaryDirectory() as d:
        row = big_repo_task(Path(d))
        big = gym.make("SWEStarter-v0", tasks=[row], sandbox_options={"repos_dir": d})
        rows["reset() on a 1,000-file repo"] = _median_ms(lambda: big.reset(seed=0), args.resets)
        big.close()

    from swe_gym.grading import grade_patch
    from swe_gym.tasks import load_tasks

    (task,) = load_tasks("starter", instance_ids=[task_id])
    rows[f"grade gold patch ({task_id})"] = _median_ms(lambda: grade_patch(task, task.patch), 5)

    width = max(map(len, rows))
    print(f"{'measure':<{width}}  median ms")
    for k, v in rows.items():
        print(f"{k:<{width}}  {v:9.3f}")
    step = rows["env.step('true') persistent session"]
    ratios = {}
    if bwrap:
        ratios["fresh bwrap / env.step"] = rows["fresh bwrap sandbox per command"] / step
        print(
            f"fresh bwrap per command is {ratios['fresh bwrap / env.step']:.1f}x slower than env.step"
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"median_ms": rows, "ratios": ratios}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
