"""Docker backend costs, side by side in one run: container start, one command, reset, parallel.

    eval "$(.ci/docker-up.sh)" && python -m swe_gym.images base && python benchmarks/bench_docker.py

Rows (medians): a bare ``containers.run`` until running; one ``exec_run`` per command; one
command through the persistent bash on the exec socket (``DockerSandbox.run``); a reset from a
cached image to a ready workspace (``DockerSandbox.start``); 16 sandboxes started at once (wall,
failures); step throughput with N = 1, 4, 16 sandboxes in parallel threads. Targets (not
asserted): reset <= 600 ms; step <= 3 ms and >= 15x faster than exec_run; 16 concurrent
resets <= 4 s with 0 failures. Prints a table and writes benchmarks/results/bench_docker.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def median_ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1000


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=10, help="container starts / resets to time")
    p.add_argument("--steps", type=int, default=200, help="commands to time per method")
    p.add_argument("--out", default="benchmarks/results/bench_docker.json")
    args = p.parse_args()

    from swe_gym import reap
    from swe_gym.docker_daemon import get_client
    from swe_gym.images.resolve import ensure_image
    from swe_gym.sandbox.docker import DockerSandbox
    from swe_gym.starter import starter_tasks

    client = get_client()
    task = starter_tasks()[0]
    image = ensure_image(task, client=client)  # built once, cached by tag afterwards
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    labels = {"owner": "swe-gym", "swe-gym.run": run_id}
    rows: dict[str, dict] = {}
    try:
        # 1. bare containers.run until running
        starts = []
        for _ in range(args.reps):
            t = time.perf_counter()
            c = client.containers.run(
                image, ["sleep", "infinity"], detach=True, network_mode="none", labels=labels
            )
            c.reload()
            assert c.status == "running"
            starts.append(time.perf_counter() - t)
            c.remove(force=True)
        rows["bare containers.run"] = {"median_ms": median_ms(starts), "n": len(starts)}

        # 2. exec_run per command vs 3. persistent bash over the exec socket
        sb = DockerSandbox(task, client=client, run_id=run_id)
        sb.start()
        ex = []
        for _ in range(max(20, args.steps // 5)):
            t = time.perf_counter()
            sb.container.exec_run(["true"])
            ex.append(time.perf_counter() - t)
        st = []
        for _ in range(args.steps):
            t = time.perf_counter()
            r = sb.run("true")
            st.append(time.perf_counter() - t)
            assert r.exit_code == 0
        sb.close()
        rows["exec_run per command"] = {"median_ms": median_ms(ex), "n": len(ex)}
        rows["DockerSandbox.run (exec socket)"] = {"median_ms": median_ms(st), "n": len(st)}

        # 4. reset: a fresh sandbox from the cached image to a ready workspace
        resets, closes = [], []
        for _ in range(args.reps):
            t = time.perf_counter()
            sb = DockerSandbox(task, client=client, run_id=run_id)
            sb.start()
            resets.append(time.perf_counter() - t)
            t = time.perf_counter()
            sb.close()
            closes.append(time.perf_counter() - t)
        rows["reset (start, cached image)"] = {"median_ms": median_ms(resets), "n": len(resets)}
        rows["close"] = {"median_ms": median_ms(closes), "n": len(closes)}

        # 5. 16 sandboxes started concurrently
        def start_one(_: int):
            sb = DockerSandbox(task, client=client, run_id=run_id)
            try:
                sb.start()
                return sb, None
            except Exception as e:  # counted, not raised: the row reports failures
                sb.close()
                return None, repr(e)

        t = time.perf_counter()
        with ThreadPoolExecutor(16) as pool:
            got = list(pool.map(start_one, range(16)))
        wall = time.perf_counter() - t
        failures = [e for _, e in got if e]
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda x: x[0] and x[0].close(), got))
        rows["16 concurrent resets"] = {
            "wall_ms": wall * 1000,
            "failures": len(failures),
            "errors": failures[:3],
        }

        # 6. throughput: N sandboxes stepping in parallel threads
        for n in (1, 4, 16):
            sbs = [DockerSandbox(task, client=client, run_id=run_id) for _ in range(n)]
            with ThreadPoolExecutor(n) as pool:
                list(pool.map(lambda s: s.start(), sbs))
            steps = max(20, args.steps // 2)

            def work(s: DockerSandbox, k: int = steps) -> None:
                for i in range(k):
                    s.run(f"echo {i} > /tmp/x")

            t = time.perf_counter()
            with ThreadPoolExecutor(n) as pool:
                list(pool.map(work, sbs))
            dt = time.perf_counter() - t
            for s in sbs:
                s.close()
            rows[f"throughput N={n}"] = {"steps_per_s": n * steps / dt, "n": n * steps}
    finally:
        left = reap.reap(run_id=run_id, client=client)

    step = rows["DockerSandbox.run (exec socket)"]["median_ms"]
    summary = {
        "exec_run / step (x faster)": rows["exec_run per command"]["median_ms"] / step,
        "reset / bare run": rows["reset (start, cached image)"]["median_ms"]
        / rows["bare containers.run"]["median_ms"],
        "containers left after the run (reaped)": left,
        "targets": {
            "reset_ms<=600": rows["reset (start, cached image)"]["median_ms"] <= 600,
            "step_ms<=3": step <= 3,
            "step>=15x exec_run": rows["exec_run per command"]["median_ms"] / step >= 15,
            "16 concurrent<=4s, 0 failures": rows["16 concurrent resets"]["wall_ms"] <= 4000
            and rows["16 concurrent resets"]["failures"] == 0,
        },
    }
    print(f"{'measure':38s} {'value':>14s}")
    for name, r in rows.items():
        if "median_ms" in r:
            val = f"{r['median_ms']:.2f} ms"
        elif "wall_ms" in r:
            val = f"{r['wall_ms']:.0f} ms, {r['failures']} fail"
        else:
            val = f"{r['steps_per_s']:.0f} steps/s"
        print(f"{name:38s} {val:>14s}")
    for k, v in summary.items():
        print(f"{k:38s} {v if isinstance(v, dict) else round(v, 2)}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "summary": summary, "image": image}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
