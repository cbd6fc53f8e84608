"""The learning benchmark's tasks: synthesised per repository, split by function, capped per
stage (split from ``bench_swe_learning.py``).

RFT's tasks, DAPO's (``synth.max_rl``) and the held-out ones; with ``synth.rft_repos`` RFT's
come from those repositories and DAPO's and the held-out ones from the others.
"""

from __future__ import annotations

import json
import time
from itertools import zip_longest
from pathlib import Path
from typing import Any

from swe_learning_runner import Runner


def make_tasks(cfg: dict, work: Path, run: Runner) -> dict[str, Any]:
    """Synthesise per repository (resumable), concatenate, split by function."""
    syn = cfg["synth"]
    t0 = time.perf_counter()
    files = []
    for repo in syn["repos"]:
        out = work / "tasks" / f"{repo.split('/')[-1]}.jsonl"
        run(
            f"synth-{repo.split('/')[-1]}",
            "-m",
            "swe_gym.synth",
            repo,
            "--out",
            str(out),
            "--repos-dir",
            str(work / "repos"),
            "--tier",
            syn.get("tier", "easy"),
            "--max-candidates",
            str(syn["max_candidates"]),
            "--seed",
            str(syn.get("seed", 0)),
            "--no-progress",
            # the figures in benchmarks/README.md were measured on tasks made without the
            # audit and hidden tests; a preset turns them on with audit: true
            *([] if syn.get("audit", False) else ["--no-audit", "--no-hidden-tests"]),
        )
        files.append(out)
    rows = [line for f in files for line in f.read_text(encoding="utf-8").splitlines() if line]
    all_path = work / "tasks.jsonl"
    _write(all_path, rows)
    # the split's whole sides, kept as written (a re-run reads them again); the stages read
    # the capped copies
    split_train, split_held = work / "split-train.jsonl", work / "split-heldout.jsonl"
    run(
        "split",
        "-m",
        "swe_gym.synth.split",
        str(all_path),
        "--held-out",
        str(syn["held_out"]),
        "--seed",
        str(syn.get("seed", 0)),
        "--train",
        str(split_train),
        "--test",
        str(split_held),
    )
    train, held, rl = work / "train.jsonl", work / "heldout.jsonl", work / "rl.jsonl"
    side = split_train.read_text(encoding="utf-8").splitlines()
    held_side = split_held.read_text(encoding="utf-8").splitlines()
    rft_side, rl_pool = side, None
    if syn.get("rft_repos"):  # RFT on these repositories; DAPO and the held-out on the others
        rft_side, rl_pool, held_side = by_repos(syn["rft_repos"], syn["repos"], side, held_side)
    n_train = min(syn.get("max_train") or len(rft_side), len(rft_side))
    if rl_pool is None:  # one training side: DAPO's rows come after RFT's
        rl_pool = side[n_train:]
    # whole rows dropped: the split's function property still holds
    train_rows, held_rows = rft_side[:n_train], held_side[: syn.get("max_held_out")]
    if not held_rows or not n_train:
        raise SystemExit(
            f"{n_train} training and {len(held_rows)} held-out tasks after the split "
            f"(synth.rft_repos={syn.get('rft_repos')}): raise synth.max_candidates"
        )
    _write(train, train_rows)
    _write(held, held_rows)
    rl_rows = None
    if syn.get("max_rl"):  # DAPO's own tasks: training-side rows RFT never saw
        rl_rows = rl_pool[: syn["max_rl"]]
        if not rl_rows:
            raise SystemExit(
                f"synth.max_rl={syn['max_rl']}: no training-side task is left for DAPO "
                f"(RFT takes {n_train} of {len(side)}; synth.rft_repos="
                f"{syn.get('rft_repos')}); raise max_candidates"
            )
        _write(rl, rl_rows)
    fn = [{json.loads(r)["meta"]["function"] for r in rows} for rows in (train_rows, held_rows)]
    if fn[0] & fn[1]:
        raise SystemExit(f"split leaks functions into both sides: {sorted(fn[0] & fn[1])[:5]}")
    summaries = [json.loads(f.with_name(f.name + ".summary.json").read_text()) for f in files]
    return {
        "train": str(train),
        "held_out": str(held),
        # DAPO's tasks: RFT never saw them (synth.max_rl), else RFT's own
        "rl": str(rl) if rl_rows else str(train),
        "n_rl": len(rl_rows) if rl_rows else None,
        "n_train": len(train_rows),
        "n_held_out": len(held_rows),
        "functions_train": len(fn[0]),
        "functions_held_out": len(fn[1]),
        "candidates": sum(s["candidates"] for s in summaries),
        "accepted": sum(s["accepted"] for s in summaries),
        "wall_s": time.perf_counter() - t0,
    }


def _write(path: Path, rows: list[str]) -> None:
    path.write_text("".join(r + "\n" for r in rows), encoding="utf-8")


def by_repos(
    rft_repos: list[str], repos: list[str], train_side: list[str], held_side: list[str]
) -> tuple[list[str], list[str], list[str]]:
    """``(rft, rl, held_out)`` rows: RFT's from ``rft_repos``; DAPO's and the held-out ones from
    the other repositories (a transfer: DAPO trains where the RFT policy has not been)."""
    names = {r.split("/")[-1] for r in rft_repos}
    known = {r.split("/")[-1] for r in repos}
    if not names <= known or names == known:
        raise SystemExit(
            f"synth.rft_repos={rft_repos}: must name some, not all, of synth.repos={repos}"
        )

    def repo(row: str) -> str:
        return str(json.loads(row)["repo"]).split("/")[-1]

    def round_robin(rows: list[str]) -> list[str]:
        """One row of each repository in turn, so a cap takes them alike."""
        per: dict[str, list[str]] = {}
        for r in rows:
            per.setdefault(repo(r), []).append(r)
        return [r for tier in zip_longest(*per.values()) for r in tier if r is not None]

    return (
        [r for r in train_side if repo(r) in names],
        round_robin([r for r in train_side if repo(r) not in names]),
        round_robin([r for r in held_side if repo(r) not in names]),
    )


__all__ = ["by_repos", "make_tasks"]
