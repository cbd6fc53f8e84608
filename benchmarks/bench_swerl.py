"""SWE-RL throughput: curation rows/s on a synthetic history, reward computations/s.

    python benchmarks/bench_swerl.py [--pr-events 10000] [--reward-iters 300]

The history is made here: one repository written with ``git fast-import`` (one squash-merged
commit per PR, half of them with a test change), and GH Archive-style events for it (an
``opened`` and a ``closed`` PullRequestEvent per PR, an IssuesEvent per linked issue; a tenth
of the PRs by a bot, a tenth without a linked issue). Prints a table; writes
``benchmarks/results/bench_swerl.json``. No assertions on time.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from swe_gym.curation import CurationConfig, curate
from swe_gym.swerl import edits_from_patch, make_patch, render_response, swerl_reward

N_FILES = 40


def source_file(k: int, version: int, lines: int = 120) -> str:
    body = [f'"""Module {k}."""', ""]
    for i in range(lines // 4):
        body += [
            f"def func_{k}_{i}(x):",
            f"    return x + {i if i != version % (lines // 4) else -version}",
            "",
            "",
        ]
    return "\n".join(body) + "\n"


def make_history(root: Path, n_prs: int, seed: int = 0) -> tuple[Path, Path]:
    rng = random.Random(seed)
    repos = root / "repos"
    repo = repos / "bench__proj"
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    versions = [0] * N_FILES
    stream: list[bytes] = []

    def blob(path: str, text: str) -> None:
        data = text.encode()
        stream.append(f"M 100644 inline {path}\ndata {len(data)}\n".encode() + data + b"\n")

    def commit(mark: int, msg: str) -> None:
        m = msg.encode()
        stream.append(
            f"commit refs/heads/main\nmark :{mark}\ncommitter b <b@e> {1700000000 + mark} +0000\n"
            f"data {len(m)}\n".encode()
            + m
            + b"\n"
        )

    commit(1, "init")
    blob("LICENSE", "MIT License\n\nPermission is hereby granted, free of charge, to any person\n")
    for k in range(N_FILES):
        blob(f"proj/mod_{k}.py", source_file(k, 0))
        blob(f"tests/test_mod_{k}.py", f"def test_{k}():\n    assert True\n")
    prs = []
    for n in range(n_prs):
        k = rng.randrange(N_FILES)
        versions[k] += 1
        commit(n + 2, f"change mod_{k} (#{2 * n + 2})")
        blob(f"proj/mod_{k}.py", source_file(k, versions[k]))
        with_test = rng.random() < 0.5
        if with_test:
            blob(f"tests/test_mod_{k}.py", f"def test_{k}():\n    assert {versions[k]}\n")
        prs.append((n, k, with_test))
    proc = subprocess.run(
        ["git", "-C", str(repo), "fast-import", "--quiet", f"--export-marks={root / 'marks'}"],
        input=b"".join(stream),
        check=True,
    )
    assert proc.returncode == 0
    marks = dict(line.split() for line in (root / "marks").read_text().splitlines())
    events = []
    for n, k, _ in prs:
        number, issue = 2 * n + 3, 2 * n + 2
        base, merge = marks[f":{n + 1}"], marks[f":{n + 2}"]
        r = rng.random()
        user = "dependabot[bot]" if r < 0.1 else f"dev{n % 50}"
        body = "" if 0.1 <= r < 0.2 else f"Fixes #{issue}"
        events.append(
            {
                "type": "IssuesEvent",
                "repo": {"name": "bench/proj"},
                "payload": {
                    "action": "opened",
                    "issue": {
                        "number": issue,
                        "title": f"func_{k} in mod_{k} is wrong",
                        "body": f"func_{k}_3 returns the wrong value for mod_{k}",
                        "created_at": "2024-01-01",
                    },
                },
            }
        )
        for action in ("opened", "closed"):
            pr = {
                "number": number,
                "title": f"Fix mod_{k}",
                "body": body,
                "user": {"login": user},
                "merged": action == "closed",
                "created_at": "2024-01-02T00:00:00Z",
                "base": {"sha": base},
                "head": {"sha": f"{n:040x}"},
                "merge_commit_sha": merge if action == "closed" else None,
            }
            events.append(
                {
                    "type": "PullRequestEvent",
                    "repo": {"name": "bench/proj"},
                    "payload": {"action": action, "number": number, "pull_request": pr},
                }
            )
    ev = root / "events.jsonl"
    ev.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    return ev, repos


def bench_curation(pr_events: int) -> dict:
    n_prs = pr_events // 2
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        ev, repos = make_history(root, n_prs)
        t_gen = time.perf_counter() - t0
        rows = {}
        for selector in ("none", "bm25"):
            out = root / f"out_{selector}.jsonl"
            t0 = time.perf_counter()
            summary = curate(
                CurationConfig(
                    events=[ev], repos_dir=repos, out=out, selector=selector, progress=False
                )
            )
            dt = time.perf_counter() - t0
            t1 = time.perf_counter()
            curate(
                CurationConfig(
                    events=[ev], repos_dir=repos, out=out, selector=selector, progress=False
                )
            )
            dt_resume = time.perf_counter() - t1
            rows[selector] = {
                "seconds": dt,
                "merged_prs": summary.merged_prs,
                "kept": summary.kept,
                "removed": dict(summary.removed),
                "prs_per_s": summary.merged_prs / dt,
                "rows_per_s": summary.kept / dt,
                "resume_noop_seconds": dt_resume,
            }
    return {"pr_events": 2 * n_prs, "history_seconds": t_gen, "by_selector": rows}


def bench_reward(iters: int) -> dict:
    out = {}
    for name, lines, hunks in (
        ("small (120 lines, 2 hunks)", 120, 2),
        ("medium (600 lines, 4 hunks)", 600, 4),
        ("large (3000 lines, 10 hunks)", 3000, 10),
    ):
        files = {"pkg/a.py": source_file(1, 0, lines), "pkg/b.py": source_file(2, 0, lines)}
        new = files["pkg/a.py"].splitlines(keepends=True)
        step = len(new) // (hunks + 1)
        for h in range(1, hunks + 1):
            new[h * step] = new[h * step].replace("return", "return -1 *") + "    # fixed\n"
        oracle = make_patch(files, {"pkg/a.py": "".join(new)})
        edits = edits_from_patch(files, oracle)
        perfect = render_response("think", edits)
        # "partial": the first half of the hunks (every size has at least 2, so it is a strict subset).
        partial = render_response("think", edits[: hunks // 2])
        bad = "<think>x</think><solution>nothing</solution>"
        res = {}
        for kind, resp in (("perfect", perfect), ("partial", partial), ("format_error", bad)):
            r = swerl_reward(resp, files, oracle)
            t0 = time.perf_counter()
            for _ in range(iters):
                swerl_reward(resp, files, oracle)
            dt = time.perf_counter() - t0
            res[kind] = {"reward": r.reward, "per_s": iters / dt, "ms": 1000 * dt / iters}
        out[name] = res
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pr-events", type=int, default=10_000)
    p.add_argument("--reward-iters", type=int, default=300)
    args = p.parse_args(argv)
    result = {"reward": bench_reward(args.reward_iters), "curation": bench_curation(args.pr_events)}
    print(f"{'reward: patch size':<32}{'response':<14}{'reward':>8}{'per s':>10}{'ms':>9}")
    for size, res in result["reward"].items():
        for kind, r in res.items():
            print(f"{size:<32}{kind:<14}{r['reward']:>8.3f}{r['per_s']:>10.1f}{r['ms']:>9.2f}")
    c = result["curation"]
    print(f"\ncuration: {c['pr_events']} PR events (history built in {c['history_seconds']:.1f} s)")
    print(
        f"{'selector':<10}{'merged PRs':>11}{'kept':>7}{'seconds':>9}{'PRs/s':>8}{'rows/s':>8}{'resume s':>10}"
    )
    for sel, r in c["by_selector"].items():
        print(
            f"{sel:<10}{r['merged_prs']:>11}{r['kept']:>7}{r['seconds']:>9.1f}{r['prs_per_s']:>8.1f}"
            f"{r['rows_per_s']:>8.1f}{r['resume_noop_seconds']:>10.2f}"
        )
    print("removed:", c["by_selector"]["none"]["removed"])
    out = Path(__file__).parent / "results" / "bench_swerl.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
