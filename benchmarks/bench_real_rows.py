"""Published (or your own) rows over local clones: environment build, reset, grade, and
agreement with swebench's own verdict, before (the host's interpreter) and after (the row's
environment), side by side.

    python benchmarks/bench_real_rows.py ROWS --repos-dir D [--ids ID ...] [--fresh-cache]
        [--resets 3] [--allow-nearest-python] [--generated]

Per row: the environment (key and Python, or why it cannot be built), its build time on
first use and when cached (``--fresh-cache`` builds in a temp toolkit cache, so the first
time is a real build), the median ``LocalSandbox`` start()+close() over ``--resets``, the
grading time of the empty and the gold patch, and both verdicts (ours, swebench's own
functions on the same log) with the host's interpreter and with the row's environment, the
environment's seeds and their date, and the gold patch's failures that need the network. A
row that fails in any step is recorded with its reason and the run goes on; the JSON is
rewritten after every row.
``--generated`` makes rows over generated repositories (no network: the repositories of
``tests/swe_gym/taskenv/genrepos.py``) and runs on those. Prints a table and writes
benchmarks/results/bench_real_rows.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from swe_gym import taskenv  # noqa: E402
from swe_gym.grading.official import grade_logged, swebench_verdict  # noqa: E402
from swe_gym.sandbox.local import LocalSandbox  # noqa: E402
from swe_gym.tasks import load_rows, normalise_row  # noqa: E402


def _verdicts(task, opts: dict) -> dict:
    out = {}
    for name, patch in (("empty", ""), ("gold", task.patch)):
        t0 = time.monotonic()
        report, log = grade_logged(task, patch, "local", opts, "official")
        out[name] = {
            "ours": report.resolved,
            "swebench": swebench_verdict(task, log),
            "reason": report.reason,
            "needs_network": report.needs_network,
            "s": round(time.monotonic() - t0, 2),
        }
        if report.reason and report.reason != "tests_failed":
            out[name]["detail"] = (report.detail or "")[:300]
    return out


def bench_row(row: dict, repos: str, resets: int, nearest: bool) -> dict:
    task = normalise_row(row)
    opts = {"repos_dir": repos, "allow_nearest_python": nearest}
    res: dict = {"id": task.instance_id}
    t0 = time.monotonic()
    try:
        env = taskenv.resolve(task, "auto", repos, nearest)
    except Exception as e:  # the row's reason, not the bench's failure
        res.update(env=f"not built: {type(e).__name__}: {e}"[:300], built=False)
        res["before"] = _verdicts(task, {**opts, "environment": "host"})
        return res
    first = time.monotonic() - t0
    t0 = time.monotonic()
    taskenv.resolve(task, "auto", repos, nearest)
    cached = time.monotonic() - t0
    m = env.manifest if env is not None else {}
    res.update(
        env="host" if env is None else f"{env.key[:12]} py{m['python']}",
        seeds=m.get("seeds", {}),
        seed_cut=m.get("seed_cut", ""),
        install_commit=m.get("install_commit", ""),
        built=True,
        first_s=round(env.manifest["build_s"] if env is not None and env.built_now else first, 2),
        built_now=bool(env is not None and env.built_now),
        cached_s=round(cached, 3),
    )
    times = []
    for _ in range(resets):
        t0 = time.monotonic()
        with LocalSandbox(task, **opts):
            pass
        times.append(time.monotonic() - t0)
    res["reset_s"] = round(statistics.median(times), 3)
    res["before"] = _verdicts(task, {**opts, "environment": "host"})
    res["after"] = _verdicts(task, opts)
    return res


def _mini(repos: Path) -> dict:
    """A row with no recipe (the host's interpreter): the tests' ``local/mini`` shape."""
    from tests.conftest import CALC, CALC_FIXED, TESTS, TESTS_NEW, diff_of, git

    repo = repos / "local__mini"
    (repo / "tests").mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "calc.py").write_text(CALC)
    (repo / "tests" / "test_calc.py").write_text(TESTS)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "calc")
    return {
        "instance_id": "local__mini-1", "repo": "local/mini", "problem_statement": "add",
        "base_commit": git(repo, "rev-parse", "HEAD").strip(),
        "patch": diff_of(repo, "calc.py", CALC_FIXED),
        "test_patch": diff_of(repo, "tests/test_calc.py", TESTS_NEW),
        "FAIL_TO_PASS": ["tests/test_calc.py::test_add"],
        "PASS_TO_PASS": ["tests/test_calc.py::test_sub"],
        "install_config": {"test_cmd": "python -m pytest -rA -p no:cacheprovider"},
    }  # fmt: skip


def _fmt(v: dict | None) -> str:
    if not v:
        return "-"
    return " ".join(f"{k}:{int(bool(x['ours']))}/{int(bool(x['swebench']))}" for k, x in v.items())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rows", nargs="?")
    p.add_argument("--repos-dir")
    p.add_argument("--ids", nargs="*")
    p.add_argument("--resets", type=int, default=3)
    p.add_argument("--fresh-cache", action="store_true")
    p.add_argument("--allow-nearest-python", action="store_true")
    p.add_argument("--generated", action="store_true")
    args = p.parse_args(argv)
    if args.fresh_cache:
        os.environ["SWE_GYM_CACHE"] = tempfile.mkdtemp(prefix="bench_real_rows_cache_")
    if args.generated:
        from tests.swe_gym.taskenv.genrepos import oldpy_repo, shadow_repo

        args.repos_dir = tempfile.mkdtemp(prefix="bench_real_rows_repos_")
        repos = Path(args.repos_dir)
        rows = [oldpy_repo(repos), shadow_repo(repos), _mini(repos)]
    else:
        if not (args.rows and args.repos_dir):
            p.error("ROWS and --repos-dir (or --generated)")
        rows = load_rows(args.rows)
    if args.ids:
        rows = [r for r in rows if r["instance_id"] in set(args.ids)]
    out = Path(__file__).parent / "results" / "bench_real_rows.json"
    out.parent.mkdir(exist_ok=True)
    results = []
    for row in rows:
        try:
            res = bench_row(row, args.repos_dir, args.resets, args.allow_nearest_python)
        except Exception as e:  # the row's failure, recorded; the next row still runs
            res = {"id": row.get("instance_id", "?"), "built": False,
                   "env": f"failed: {type(e).__name__}: {e}"[:400]}  # fmt: skip
        results.append(res)
        print(f"[bench_real_rows] {res['id']}: {res['env'][:100]}", file=sys.stderr, flush=True)
        out.write_text(json.dumps(results, indent=1))
    print(
        f"\n{'row':<28} {'env':<24} {'build s':>8} {'cached s':>8} {'reset s':>7} "
        f"{'grade s e/g':>11}  before (host) ours/swebench  after (env) ours/swebench"
    )
    for r in results:
        a = r.get("after") or {}
        grade = "/".join(f"{a[k]['s']:.1f}" for k in ("empty", "gold")) if a else "-"
        print(
            f"{r['id']:<28} {r['env'][:24]:<24} {r.get('first_s', '-')!s:>8} "
            f"{r.get('cached_s', '-')!s:>8} {r.get('reset_s', '-')!s:>7} {grade:>11}  "
            f"{_fmt(r.get('before')):<28}  {_fmt(a)}"
        )
    built = [r for r in results if r["built"] and "after" in r]
    agree = [r for r in built if all(x["ours"] == x["swebench"] for x in r["after"].values())]
    print(
        f"\nbuilt {len(built)}/{len(results)}; after: ours == swebench on {len(agree)}/"
        f"{len(built)} built rows (empty and gold)"
    )
    gold = [r for r in built if r["after"]["gold"]["ours"]]
    print(f"gold resolves on {len(gold)}/{len(results)} rows")
    for r in results:
        if not r["built"]:
            print(f"  {r['id']}: {r['env']}")
        elif net := r.get("after", {}).get("gold", {}).get("needs_network"):
            print(f"  {r['id']}: gold's failures need the network: {net[:5]}")
    return 0 if results and any(r["built"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
