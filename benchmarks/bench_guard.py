"""The runtime guard's cost and its false alarms: every starter task's gold patch graded with the
guard and without it (the channel alone, as before the guard), side by side in one run; and a
real repository's own test suite run under the grader's plugin with and without the guard.

    python benchmarks/bench_guard.py [--backends local docker] [--repeat 3]
    python benchmarks/bench_guard.py --suite DIR --python PY [--tests tests] [--patched PATH]
    python benchmarks/bench_guard.py --pythons 3.8 3.9 3.12 3.13
    python benchmarks/bench_guard.py --rows ROWS --repos-dir D

Per backend: the median grading time of each task with and without the guard (interleaved, so
machine load falls on both alike), their ratio over the suite, the median test-run share of
the grading time, and how many gold patches the guard calls ``tampered`` (the target is none).
Prints a table and writes ``benchmarks/results/bench_guard.json``. Docker needs a daemon
(``eval "$(bash .ci/docker-up.sh)"``).

``--suite``: a checkout of a repository whose tests run with ``PY -m pytest`` (its packages
installed there). Every test is watched and every ``test_*.py`` under ``--tests`` is a task
test file (the most the guard ever checks); ``--patched`` names a file to treat as patched.
Runs alternate with and without the hook, ``--repeat`` times each; reported: median wall times,
the overhead, and the tamper records of the honest suite (the target is none). Writes
``bench_guard_suite.json``.

``--pythons``: the red team of ``tests/security/test_runtime_tamper.py`` (every mechanism, the
gold patch and the honest fix beside the same features) graded on the local backend in a task
environment built at each Python (``uv``, pytest from PyPI: needs the registry), to show the
guard on every Python with audit hooks. Writes ``bench_guard_pythons.json``.

``--rows``: published (or your own) rows over local clones, each graded with the empty and the
gold patch in its own environment: the guard's false alarms on real repositories (the target
is no gold patch ``tampered``). Writes ``bench_guard_rows.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path


def grade_once(task, backend: str, guard: bool, options: dict) -> tuple[float, object]:
    from swe_gym.grading import grade_patch

    t = dataclasses.replace(
        task, install_config={**(task.install_config or {}), "verdict_guard": guard}
    )
    t0 = time.perf_counter()
    report = grade_patch(t, task.patch, backend=backend, sandbox_options=options, timeout=600)
    return time.perf_counter() - t0, report


def run(backends: list[str], repeat: int) -> dict:
    from swe_gym.starter import starter_tasks

    tasks = starter_tasks()
    out: dict = {"tasks": len(tasks), "repeat": repeat, "backends": {}}
    for backend in backends:
        options: dict = {}
        if backend == "docker":
            import docker

            options = {"client": docker.from_env()}
        rows, tampered, unresolved = [], [], []
        for task in tasks:
            times: dict[bool, list[float]] = {True: [], False: []}
            for _ in range(repeat):
                for guard in (True, False):
                    dt, report = grade_once(task, backend, guard, options)
                    times[guard].append(dt)
                    if guard and report.tampered:
                        tampered.append((task.instance_id, report.tampered[:3]))
                    if not report.resolved:
                        unresolved.append((task.instance_id, guard, report.reason))
            rows.append(
                {
                    "task": task.instance_id,
                    "guard_s": statistics.median(times[True]),
                    "no_guard_s": statistics.median(times[False]),
                }
            )
        total_on = sum(r["guard_s"] for r in rows)
        total_off = sum(r["no_guard_s"] for r in rows)
        out["backends"][backend] = {
            "rows": rows,
            "total_guard_s": total_on,
            "total_no_guard_s": total_off,
            "ratio": total_on / total_off,
            "gold_tampered": tampered,
            "gold_unresolved": unresolved,
        }
    return out


def run_suite(suite: str, python: str, tests: str, patched: list[str], repeat: int) -> dict:
    import os
    import secrets
    import subprocess
    import tempfile

    from swe_gym.grading import verdict

    here = Path(__file__).resolve().parent.parent / "swe_gym" / "grading"
    root = str(Path(suite).resolve())
    folder = Path(tempfile.mkdtemp(prefix="bench-guard-"))
    for module, name in verdict.SHIPPED.items():
        (folder / f"{module}.py").write_bytes((here / name).read_bytes())
    files = sorted(str(p.relative_to(root)) for p in Path(root, tests).rglob("test_*.py"))
    times: dict[bool, list[float]] = {True: [], False: []}
    tampered: list[str] = []
    summary: dict[bool, str] = {}
    for _ in range(repeat):
        for hook in (True, False):
            cfg = {"root": root, "patched": patched, "tests": files, "watched": [], "hook": hook}
            (folder / "guard.json").write_text(json.dumps(cfg))
            (folder / "run.key").write_text(secrets.token_hex(32))
            rec = folder / "run.rec"
            rec.unlink(missing_ok=True)
            env = {
                **os.environ,
                "SWE_GYM_VERDICT_KEYFILE": str(folder / "run.key"),
                "SWE_GYM_VERDICT_PATH": str(rec),
                "SWE_GYM_VERDICT_GUARD": str(folder / "guard.json"),
                "SWE_GYM_VERDICT_PLUGINS": "[]",
                "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
                "PYTEST_PLUGINS": "swe_gym_verdict",
                "PYTHONPATH": str(folder),
            }
            t0 = time.perf_counter()
            out = subprocess.run(
                [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", tests],
                cwd=root,
                env=env,
                capture_output=True,
                text=True,
            )
            times[hook].append(time.perf_counter() - t0)
            summary[hook] = (
                out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr
            )
            if hook:
                tampered += [x for x in rec.read_text().splitlines() if '"tamper"' in x]
    on, off = statistics.median(times[True]), statistics.median(times[False])
    version = subprocess.run([python, "--version"], capture_output=True, text=True).stdout
    return {
        "suite": Path(root).name,  # names, not this machine's paths
        "python": version.strip(),
        "test_files": len(files),
        "summary": summary[True],
        "same_outcome": summary[True].split(" in ")[0] == summary[False].split(" in ")[0],
        "guard_s": on,
        "no_guard_s": off,
        "overhead": on / off - 1,
        "times": {"guard": times[True], "no_guard": times[False]},
        "tamper_records": tampered[:20],
    }


def run_pythons(pythons: list[str]) -> dict:
    import sys
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import tests.security.payloads as red
    from swe_gym.grading import grade_patch
    from tests.security.patching import patch_maker

    base = red.tinystats_task()
    make = patch_maker(base, Path(tempfile.mkdtemp(prefix="bench-guard-")))
    cases = {
        "gold": base.patch,
        "honest": make({red.CODE: red.fix, red.INIT: ("append", red.HONEST)}),
    }
    for name, payload in sorted(red.APPENDED.items()):
        cases[name] = make({red.INIT: ("append", payload)})
    out: dict = {}
    for py in pythons:
        task = dataclasses.replace(
            base, install_config={**base.install_config, "python": py, "packages": ["pytest"]}
        )
        rows = {}
        for name, patch in cases.items():
            r = grade_patch(task, patch, sandbox_options={"environment": "task"}, timeout=300)
            rows[name] = {
                "resolved": r.resolved,
                "reason": r.reason,
                "first": (r.tampered or [r.detail])[0][:160],
            }
        out[py] = rows
    return out


def run_rows(rows: str, repos_dir: str) -> list[dict]:
    from swe_gym.grading import grade_patch
    from swe_gym.tasks import load_tasks

    out = []
    for task in load_tasks(rows):
        opts = {"repos_dir": repos_dir}
        row = {"instance_id": task.instance_id}
        for name, patch in (("empty", ""), ("gold", task.patch)):
            r = grade_patch(task, patch, sandbox_options=opts, timeout=1800)
            row[name] = {"resolved": r.resolved, "reason": r.reason, "tampered": r.tampered[:5],
                         "seconds": round(r.duration_s, 1)}  # fmt: skip
        out.append(row)
        print(
            f"{task.instance_id:45} empty {row['empty']['reason'] or 'RESOLVED':>18}  "
            f"gold {row['gold']['reason'] or 'RESOLVED':>18}  "
            f"gold tampered {len(row['gold']['tampered'])}",
            flush=True,
        )
    return out


def _save(res: object, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    print(f"wrote {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backends", nargs="+", default=["local"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=None)
    ap.add_argument("--suite", help="a repository checkout whose own tests to run")
    ap.add_argument("--python", default="python3", help="--suite: the interpreter to run it")
    ap.add_argument("--tests", default="tests", help="--suite: the tests' folder")
    ap.add_argument("--patched", nargs="*", default=[], help="--suite: files taken as patched")
    ap.add_argument("--pythons", nargs="*", help="the red team at these Pythons (task envs)")
    ap.add_argument("--rows", help="rows to grade (empty and gold) in their environments")
    ap.add_argument("--repos-dir", help="--rows: the clones (owner__name)")
    args = ap.parse_args()
    results = Path(__file__).parent / "results"
    if args.rows:
        res_rows = run_rows(args.rows, args.repos_dir)
        _save(res_rows, Path(args.out or results / "bench_guard_rows.json"))
        return
    if args.pythons:
        res = run_pythons(args.pythons)
        names = list(next(iter(res.values())))
        print(f"{'case':40} " + " ".join(f"{py:>18}" for py in res))
        for name in names:
            cells = []
            for py in res:
                row = res[py][name]
                cells.append(f"{'RESOLVED' if row['resolved'] else row['reason']:>18}")
            print(f"{name:40} " + " ".join(cells))
        _save(res, Path(args.out or results / "bench_guard_pythons.json"))
        return
    if args.suite:
        res = run_suite(args.suite, args.python, args.tests, args.patched, args.repeat)
        print(f"{'suite':30} {'files':>5} {'guard s':>8} {'no guard s':>10} {'overhead':>8} "
              f"{'tamper':>6}  result")  # fmt: skip
        print(
            f"{Path(res['suite']).name:30} {res['test_files']:>5} {res['guard_s']:>8.2f} "
            f"{res['no_guard_s']:>10.2f} {res['overhead']:>8.1%} {len(res['tamper_records']):>6}"
            f"  {res['summary']} (same as without: {res['same_outcome']})"
        )
        _save(res, Path(args.out or results / "bench_guard_suite.json"))
        return
    res = run(args.backends, args.repeat)
    print(f"{'backend':8} {'tasks':>5} {'guard s':>9} {'no guard s':>11} {'ratio':>6} "
          f"{'gold tampered':>14} {'gold unresolved':>16}")  # fmt: skip
    for name, b in res["backends"].items():
        print(
            f"{name:8} {res['tasks']:>5} {b['total_guard_s']:>9.1f} {b['total_no_guard_s']:>11.1f} "
            f"{b['ratio']:>6.2f} {len(b['gold_tampered']):>14} {len(b['gold_unresolved']):>16}"
        )
    _save(res, Path(args.out or results / "bench_guard.json"))


if __name__ == "__main__":
    main()
