"""Mutation testing (mutmut) of the modules the RL results rest on; run by hand, not in CI.

    python benchmarks/mutation.py                      # every module below, time-boxed
    python benchmarks/mutation.py policy_losses --minutes 20    # one module
    python benchmarks/mutation.py scoring --only '*apply_filter*'   # some functions

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
import fnmatch
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
    "policy_losses": (
        "algos/objectives/policy_losses.py",
        [
            "tests/algos/objectives/test_policy_losses.py",
            "tests/algos/objectives/test_objectives.py",
        ],
    ),
    "advantages": (
        "algos/objectives/advantages.py",
        ["tests/algos/objectives/test_advantages.py", "tests/algos/objectives/test_objectives.py"],
    ),
    # learner: its own tests and the off-policy-correction tests that run a Learner; the
    # killed-process resume test (a subprocess per run, minutes) is left out
    "learner": (
        "algos/learner/learner.py",
        [
            "tests/algos/learner/test_learner.py",
            "tests/algos/objectives/test_objectives.py",
            "-m",
            "not slow",
            "-k",
            "not killed_process",
        ],
    ),
    "trainer": (
        "algos/loop/trainer.py",
        [
            "tests/algos/loop/test_trainer_guards.py",
            "tests/algos/loop/test_trainer_faults.py",
            "-k",
            "not ctrl_c",
        ],
    ),
    # scoring (split out of the trainer): rewards, failure masking, advantages, filters
    "scoring": (
        "algos/rollout/scoring.py",
        [
            "tests/algos/rollout/test_scoring.py",
            "tests/algos/objectives/test_objectives.py",
            "tests/algos/loop/test_loud_failure.py",
            "tests/algos/loop/test_trainer_guards.py",
            "-k",
            "not ctrl_c",
        ],
    ),
    # rollouts (split out of the trainer): task sampling, one iteration's rounds with the
    # dynamic-sampling refill, the solve count; the trainer tests that drive collect()
    "rollouts": (
        "algos/rollout/collect.py",
        [
            "tests/algos/rollout/test_collect.py",
            "tests/algos/loop/test_trainer_guards.py",
            "tests/algos/loop/test_trainer_faults.py",
            "tests/algos/loop/test_loud_failure.py",
            "-k",
            "not ctrl_c",
        ],
    ),
    # grading: the local-backend outcome and tamper tests (bubblewrap, seconds each; the
    # Docker ones left out) and the pure ones
    "grading": (
        "swe_gym/grading/grade.py",
        [
            "tests/swe_gym/test_grading.py",
            "tests/swe_gym/test_grading_outcomes.py",
            "tests/swe_gym/test_grading_testinfra.py",
            "tests/security/test_grading_tamper.py",
            "-k",
            "not docker",
        ],
    ),
}


def prepare(module: str, work: Path) -> tuple[Path, list[str]]:
    """A copy of the project (no .git) with mutmut's config for ``module`` in pyproject.toml."""
    path, tests = MODULES[module]
    tests = [t for t in tests if not t.endswith(".py") or (ROOT / t).exists()]  # before/after
    dest = work / module
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(
        ROOT,
        dest,
        ignore=shutil.ignore_patterns(
            ".git", "mutants", "runs", "eval_out", "__pycache__", ".ruff_cache", "*.egg-info"
        ),
    )
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
    return dest, tests


def statuses(dest: Path, env: dict[str, str]) -> dict[str, str]:
    """mutant name -> killed / survived / timeout / not checked / no tests, in a copy."""
    res = subprocess.run(
        [sys.executable, "-m", "mutmut", "results", "--all", "true"],
        cwd=dest,
        env=env,
        capture_output=True,
        text=True,
    )
    status: dict[str, str] = {}
    for line in res.stdout.splitlines():
        name, sep, state = line.strip().rpartition(": ")
        if sep:
            status[name] = state
    return status


def run(
    module: str,
    work: Path,
    minutes: float,
    only: list[str],
    children: int,
    resume: bool = False,
    earlier: dict | None = None,
) -> dict:
    """One mutmut run over ``module``. ``resume``: continue in the existing copy (its verdicts
    stand, mutmut checks the rest). ``earlier``: a previous result of this module; only its
    survivors and unchecked mutants run (with today's tests), its killed ones count as killed:
    adding tests cannot revive a killed mutant, so the score compares with the earlier one."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    sample = list(only)
    if resume and (work / module / "mutants").is_dir():
        dest = work / module
        tests = json.loads((dest / "mutation-tests.json").read_text())
        if only:  # mutmut reruns every mutant it is named: name only the unchecked ones
            only = [
                n
                for n, st in statuses(dest, {**env, "PYTHONPATH": str(dest)}).items()
                if st == "not checked" and any(fnmatch.fnmatchcase(n, g) for g in only)
            ]
    else:
        dest, tests = prepare(module, work)
        (dest / "mutation-tests.json").write_text(json.dumps(tests))
    if earlier is not None:  # (within the --only sample, when one is given)
        only = [
            n
            for n in earlier["survivors"] + earlier.get("not_checked", [])
            if not only or any(fnmatch.fnmatchcase(n, g) for g in only)
        ]
    cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(children), *only]
    env["PYTHONPATH"] = str(dest)
    t0 = time.monotonic()
    err, timed_out = "", False
    if sample and not only:
        pass  # the sample holds nothing left to check (no names: mutmut would run them all)
    else:
        proc = subprocess.Popen(
            cmd,
            cwd=dest,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            _, err = proc.communicate(timeout=minutes * 60)
        except subprocess.TimeoutExpired:  # the time box: stop the run, keep what it checked
            os.killpg(proc.pid, signal.SIGTERM)
            _, err = proc.communicate()
            timed_out = True
    wall = time.monotonic() - t0
    status = statuses(dest, env)
    if earlier is not None:  # the rest keep the earlier verdict
        status = {n: status.get(n, "not checked") for n in only}
    counts: dict[str, int] = {}
    for name in ("killed", "timeout", "no tests") if earlier is not None else ():
        if earlier["counts"].get(name):
            counts[name] = earlier["counts"][name]
    for state in status.values():
        counts[state] = counts.get(state, 0) + 1
    killed, survived = counts.get("killed", 0), counts.get("survived", 0)
    timeouts = counts.get("timeout", 0)
    checked = killed + survived + timeouts
    return {
        "module": MODULES[module][0],
        "tests": tests,
        "only": sample,
        "wall_s": round(wall, 1),
        "time_boxed": timed_out,
        "counts": counts,
        "checked": checked,
        "total": earlier["total"] if earlier else len(status),
        "score": (killed + timeouts) / checked if checked else None,
        "survivors": sorted(n for n, s in status.items() if s == "survived"),
        "not_checked": sorted(n for n, s in status.items() if s == "not checked"),
        "after": earlier is not None,
        "copy": str(dest),
        "stderr_tail": (err or "")[-2000:] if not checked else "",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "modules",
        nargs="*",
        default=list(MODULES),
        help=f"any of: {', '.join(MODULES)} (default: all)",
    )
    ap.add_argument("--minutes", type=float, default=15.0, help="time box per module")
    ap.add_argument("--only", nargs="*", default=[], help="mutant-name globs (sampling)")
    ap.add_argument("--max-children", type=int, default=1, help="parallel test processes")
    ap.add_argument(
        "--label",
        default="",
        help="suffix of the result's key in the JSON "
        "(e.g. 'before': keeps a score beside a later run's)",
    )
    ap.add_argument(
        "--resume", action="store_true", help="continue a time-boxed run in its copy (same tests)"
    )
    ap.add_argument(
        "--after",
        metavar="LABEL",
        default=None,
        help="rerun only the survivors and unchecked mutants of the result "
        "MODULE-LABEL in the JSON, with the current tests",
    )
    ap.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "swe-gym-mutation"))
    args = ap.parse_args()
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        ap.error(f"unknown module(s) {unknown}; choose from: {', '.join(MODULES)}")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    out_path = RESULTS / "mutation.json"
    results: dict = {}
    print(
        f"{'module':>20} {'mutants':>7} {'checked':>7} {'killed':>6} {'survived':>8} "
        f"{'timeout':>7} {'score':>6} {'wall s':>7}"
    )
    previous = json.loads(out_path.read_text()) if out_path.exists() else {}
    for module in args.modules:
        earlier = None
        if args.after is not None:
            earlier = previous.get(f"{module}-{args.after}")
            if earlier is None:
                ap.error(
                    f"no result {module}-{args.after!s} in {out_path}; have: {', '.join(previous)}"
                )
        r = run(module, work, args.minutes, args.only, args.max_children, args.resume, earlier)
        results[f"{module}-{args.label}" if args.label else module] = r
        c = r["counts"]
        score = f"{100 * r['score']:5.1f}%" if r["score"] is not None else "    -"
        print(
            f"{r['module']:>20} {r['total']:>7} {r['checked']:>7} {c.get('killed', 0):>6} "
            f"{c.get('survived', 0):>8} {c.get('timeout', 0):>7} {score:>6} "
            f"{r['wall_s']:>7.0f}{' (time box)' if r['time_boxed'] else ''}"
        )
        if r["stderr_tail"]:
            print(r["stderr_tail"], file=sys.stderr)
    RESULTS.mkdir(parents=True, exist_ok=True)
    # read just before writing: other modules' results may come from a run going on beside
    merged = json.loads(out_path.read_text()) if out_path.exists() else {}
    out_path.write_text(json.dumps({**merged, **results}, indent=1))
    print(f"wrote {out_path}; survivors: mutmut show NAME in the module's copy")


if __name__ == "__main__":
    main()
