"""Mutation testing (mutmut) of the modules the RL results rest on; run by hand, not in CI.

    python benchmarks/mutation.py                      # every module below, time-boxed
    python benchmarks/mutation.py core --minutes 20    # one module
    python benchmarks/mutation.py trainer --only '*_collect*' '*apply_filter*'

Each module is mutated in a throw-away copy of the working tree (``$TMPDIR/swe-gym-mutation/
<module>``; the checkout gets no ``mutants/`` folder and no config), against only the tests that
exercise it (``MODULES`` below), because every surviving mutant costs one run of them. mutmut
runs the tests of a function only for that function's mutants. A module whose tests are slow is
sampled with ``--only`` (mutant-name globs) or cut by ``--minutes``: the score is then over the
mutants that ran, and says so.

Prints killed / survived / timeout / not checked per module and the score (killed + timeout over
checked), and writes ``benchmarks/results/mutation.json`` with every survivor's name. Survivors
are triaged in ``benchmarks/mutation_survivors.md``: killed by a new test, or equivalent (no
observable behaviour changes) with the reason. ``mutmut show NAME`` in the copy prints a diff.
Needs ``pip install mutmut`` (the ``dev`` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PACKAGES = ("swe_gym", "envs", "agents", "algos")

# module -> (file, the tests that exercise it: fast ones first)
MODULES: dict[str, tuple[str, list[str]]] = {
    "core": ("algos/core.py", ["tests/algos/test_core.py", "tests/algos/test_objectives.py"]),
    "learner": ("algos/learner.py", ["tests/algos/test_learner.py", "-m", "not slow",
                                     "-k", "not killed_process"]),
    "trainer": ("algos/trainer.py", ["tests/algos/test_trainer_guards.py",
                                     "tests/algos/test_trainer_faults.py",
                                     "-k", "not ctrl_c"]),
    "grading": ("swe_gym/grading.py", ["tests/swe_gym/test_grading.py",
                                       "tests/swe_gym/test_grading_outcomes.py"]),
}


def prepare(module: str, work: Path) -> Path:
    """A copy of the project (no .git) with mutmut's config for ``module`` in pyproject.toml."""
    path, tests = MODULES[module]
    dest = work / module
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(
        ".git", "mutants", "runs", "eval_out", "__pycache__", ".ruff_cache", "*.egg-info"))
    package = path.split("/")[0]
    config = {
        "source_paths": [f"{package}/"],
        "only_mutate": [path],
        "also_copy": [f"{p}/" for p in PACKAGES if p != package],
        "pytest_add_cli_args_test_selection": tests,
        "pytest_add_cli_args": ["-p", "no:cacheprovider", "-q", "-x"],
    }
    with open(dest / "pyproject.toml", "a", encoding="utf-8") as f:
        f.write("\n[tool.mutmut]\n")
        for key, value in config.items():
            f.write(f"{key} = {json.dumps(value)}\n")
    return dest


def run(module: str, work: Path, minutes: float, only: list[str], children: int) -> dict:
    dest = prepare(module, work)
    cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(children), *only]
    env = {**os.environ, "PYTHONPATH": str(dest), "OMP_NUM_THREADS": "1"}
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=dest, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=minutes * 60)
        timed_out = False
    except subprocess.TimeoutExpired:  # the time box: stop the run, keep what it checked
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate()
        timed_out = True
    wall = time.monotonic() - t0
    res = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"],
                         cwd=dest, env=env, capture_output=True, text=True)
    status: dict[str, str] = {}
    for line in res.stdout.splitlines():
        name, sep, state = line.strip().rpartition(": ")
        if sep:
            status[name] = state
    counts: dict[str, int] = {}
    for state in status.values():
        counts[state] = counts.get(state, 0) + 1
    killed, survived = counts.get("killed", 0), counts.get("survived", 0)
    timeouts = counts.get("timeout", 0)
    checked = killed + survived + timeouts
    return {
        "module": MODULES[module][0], "tests": MODULES[module][1], "only": only,
        "wall_s": round(wall, 1), "time_boxed": timed_out, "counts": counts,
        "checked": checked, "total": len(status),
        "score": (killed + timeouts) / checked if checked else None,
        "survivors": sorted(n for n, s in status.items() if s == "survived"),
        "copy": str(dest), "stderr_tail": (err or "")[-2000:] if not checked else "",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("modules", nargs="*", default=list(MODULES),
                    help=f"any of: {', '.join(MODULES)} (default: all)")
    ap.add_argument("--minutes", type=float, default=15.0, help="time box per module")
    ap.add_argument("--only", nargs="*", default=[], help="mutant-name globs (sampling)")
    ap.add_argument("--max-children", type=int, default=1, help="parallel test processes")
    ap.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "swe-gym-mutation"))
    args = ap.parse_args()
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        ap.error(f"unknown module(s) {unknown}; choose from: {', '.join(MODULES)}")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    out_path = RESULTS / "mutation.json"
    results: dict = {}
    print(f"{'module':>20} {'mutants':>7} {'checked':>7} {'killed':>6} {'survived':>8} "
          f"{'timeout':>7} {'score':>6} {'wall s':>7}")
    for module in args.modules:
        r = run(module, work, args.minutes, args.only, args.max_children)
        results[module] = r
        c = r["counts"]
        score = f"{100 * r['score']:5.1f}%" if r["score"] is not None else "    -"
        print(f"{r['module']:>20} {r['total']:>7} {r['checked']:>7} {c.get('killed', 0):>6} "
              f"{c.get('survived', 0):>8} {c.get('timeout', 0):>7} {score:>6} "
              f"{r['wall_s']:>7.0f}{' (time box)' if r['time_boxed'] else ''}")
        if r["stderr_tail"]:
            print(r["stderr_tail"], file=sys.stderr)
    RESULTS.mkdir(parents=True, exist_ok=True)
    # read just before writing: other modules' results may come from a run going on beside
    merged = json.loads(out_path.read_text()) if out_path.exists() else {}
    out_path.write_text(json.dumps({**merged, **results}, indent=1))
    print(f"wrote {out_path}; survivors: mutmut show NAME in the module's copy")


if __name__ == "__main__":
    main()
