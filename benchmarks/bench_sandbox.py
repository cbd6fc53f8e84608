"""Local sandbox costs, side by side in one run (medians over N).

    python benchmarks/bench_sandbox.py [--n 200] [--resets 20] [--files 1000]

Rows: a fresh ``bash -c CMD`` per command; a fresh bubblewrap sandbox per command; a raw
persistent bash (write a line, read up to a marker); ``LocalSandbox.run`` round trip (the
persistent shell with job control, sentinel, exit code, bounded output, isolation) for ``true``
and ``echo hi``; ``LocalSandbox`` start()+close() on a generated repository of ``--files`` files
(target, not asserted: start <= 300 ms), once in the default temp dir and once on /dev/shm
(tmpfs): the checkout writes every file, so a slow disk dominates. Prints a table and writes
benchmarks/results/bench_sandbox.json.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def median_ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1000


def timed(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def make_repo(root: Path, files: int) -> tuple[Path, str]:
    repo = root / "bench__repo"
    repo.mkdir(parents=True)
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "b",
        "GIT_AUTHOR_EMAIL": "b@b",
        "GIT_COMMITTER_NAME": "b",
        "GIT_COMMITTER_EMAIL": "b@b",
    }
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=env)
    for i in range(files):
        d = repo / f"pkg{i % 25}"
        d.mkdir(exist_ok=True)
        (d / f"mod{i}.py").write_text(f"def f{i}(x):\n    return x + {i}\n" * 20)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "base"], cwd=repo, check=True, env=env)
    sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, check=True, env=env, capture_output=True, text=True
    ).stdout.strip()
    return repo, sha


def raw_persistent_bash(n: int) -> list[float]:
    p = subprocess.Popen(
        ["bash", "--norc", "--noprofile"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    fd_in, fd_out = p.stdin.fileno(), p.stdout.fileno()

    def one() -> None:
        os.write(fd_in, b"true; echo __END__\n")
        buf = b""
        while not buf.endswith(b"__END__\n"):
            select.select([fd_out], [], [])
            buf += os.read(fd_out, 65536)

    try:
        return timed(one, n)
    finally:
        p.kill()
        p.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200, help="commands timed per method")
    ap.add_argument("--resets", type=int, default=20, help="start()+close() cycles timed")
    ap.add_argument("--files", type=int, default=1000, help="files in the generated repository")
    ap.add_argument("--out", default="benchmarks/results/bench_sandbox.json")
    args = ap.parse_args()

    from swe_gym.sandbox.local import LocalSandbox, find_bwrap
    from swe_gym.tasks import Task

    bwrap = find_bwrap()
    rows: dict[str, dict] = {}
    tmp = Path(tempfile.mkdtemp(prefix="bench_sandbox_"))
    try:
        repo, sha = make_repo(tmp / "repos", args.files)
        task = Task("bench__repo-1", "bench/repo", sha, "p", "", "", ["t"], [])

        def add(name: str, xs: list[float], **extra) -> None:
            rows[name] = {
                "median_ms": median_ms(xs),
                "p90_ms": sorted(xs)[int(0.9 * (len(xs) - 1))] * 1000,
                "n": len(xs),
                **extra,
            }

        add(
            "fresh bash -c per command",
            timed(lambda: subprocess.run(["bash", "-c", "true"]), args.n),
        )
        if bwrap:
            argv = [
                bwrap,
                "--unshare-all",
                "--die-with-parent",
                "--new-session",
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
            add(
                "fresh bwrap per command", timed(lambda: subprocess.run(argv), max(20, args.n // 4))
            )
        add("raw persistent bash", raw_persistent_bash(args.n))

        with LocalSandbox(task, repos_dir=tmp / "repos") as sb:
            for cmd in ("true", "echo hi"):
                xs = timed(lambda cmd=cmd: sb.run(cmd), args.n)
                add(f"LocalSandbox.run {cmd!r}", xs, sandboxed=sb.sandboxed)
            assert sb.run("echo hi").output == "hi\n"

        places = [("", None)]
        if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
            places.append((", tmp_dir=/dev/shm", "/dev/shm"))
        for label, place in places:
            starts, closes, cycles = [], [], []
            for _ in range(args.resets):
                t0 = time.perf_counter()
                sb = LocalSandbox(task, repos_dir=tmp / "repos", tmp_dir=place)
                sb.start()
                t1 = time.perf_counter()
                sb.close()
                t2 = time.perf_counter()
                starts.append(t1 - t0)
                closes.append(t2 - t1)
                cycles.append(t2 - t0)
            add(f"LocalSandbox.start() ({args.files} files{label})", starts, target_ms=300)
            add(f"LocalSandbox.close(){label.replace(', ', ' (') + ')' if label else ''}", closes)
            add(
                f"LocalSandbox start()+close(){label.replace(', ', ' (') + ')' if label else ''}",
                cycles,
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    base = rows["raw persistent bash"]["median_ms"]
    width = max(len(k) for k in rows) + 2
    print(f"{'method':<{width}}{'median ms':>11}{'p90 ms':>10}{'x raw bash':>12}{'n':>6}")
    for name, r in rows.items():
        print(
            f"{name:<{width}}{r['median_ms']:>11.3f}{r['p90_ms']:>10.3f}"
            f"{r['median_ms'] / base:>12.1f}{r['n']:>6}"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "bwrap": bwrap,
        "euid": os.geteuid(),
        "files": args.files,
    }
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
