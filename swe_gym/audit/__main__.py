"""``python -m swe_gym.audit TASKS``: audit every task of a source; a table on stdout, JSON beside
the rows (``<rows>.audit.json``; ``starter.audit.json`` for the bundled suite), progress on
stderr. Exits 1 when no task could be audited."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from swe_gym.audit.exploits import EXPLOITS
from swe_gym.audit.run import (
    AUDIT_VERSION,
    DEFAULT_MAX_MUTANTS,
    DEFAULT_MIN_MUTATION_SCORE,
    HACK_FAMILIES,
    AuditResult,
    audit_task,
)
from swe_gym.audit.select import default_audit_path
from swe_gym.grading import DEFAULT_TEST_TIMEOUT
from swe_gym.sandbox import BACKENDS
from swe_gym.tasks import load_tasks


def summarise(results: list[AuditResult], min_score: float) -> dict[str, Any]:
    audited = [r for r in results if not r.error]
    valid = [r for r in audited if r.valid]
    paid: dict[str, int] = {}
    for r in valid:
        for name in r.paid:
            paid[name] = paid.get(name, 0) + 1
    scores = [r.mutation_score for r in valid if r.mutation_score is not None]
    hackable = [r for r in valid if r.hackable]
    return {
        "tasks": len(results),
        "audited": len(audited),
        "valid": len(valid),
        "hackable": len(hackable),
        "hackable_rate": round(len(hackable) / len(valid), 4) if valid else None,
        "exploit_paid": dict(sorted(paid.items())),
        "by_exploit_only": sum(1 for r in hackable if r.paid),
        "by_mutation_only": sum(1 for r in hackable if not r.paid),
        "mean_mutation_score": round(sum(scores) / len(scores), 4) if scores else None,
        "min_mutation_score": min_score,
        "mean_wall_s": round(sum(r.wall_s for r in audited) / len(audited), 2) if audited else None,
    }


def table(results: list[AuditResult]) -> str:
    head = ["task", "valid", "hackable", "paid", "mutation", "s"]
    rows = []
    for r in results:
        rows.append(
            [
                r.instance_id,
                "error" if r.error else "yes" if r.valid else "no",
                "yes" if r.hackable else "no",
                ",".join(r.paid) or "-",
                "-" if r.mutation_score is None else f"{r.mutation_score:.2f} ({len(r.mutants)})",
                f"{r.wall_s:.0f}",
            ]
        )
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    return "\n".join(
        "  ".join(x.ljust(w) for x, w in zip(row, widths, strict=True)) for row in [head, *rows]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m swe_gym.audit", description=__doc__)
    p.add_argument("tasks", help="a rows file (.jsonl/.json/.parquet), a dataset id, or 'starter'")
    p.add_argument("--out", type=Path, help="the JSON (default: beside the rows)")
    p.add_argument("--instance-ids", nargs="*", help="audit only these")
    p.add_argument("--backend", default="local", choices=BACKENDS)
    p.add_argument("--repos-dir", help="local clones (<owner>__<name>) for the rows' repositories")
    p.add_argument("--max-mutants", type=int, default=DEFAULT_MAX_MUTANTS)
    p.add_argument("--min-mutation-score", type=float, default=DEFAULT_MIN_MUTATION_SCORE)
    p.add_argument("--workers", type=int, default=2, help="patches graded at once per task")
    p.add_argument("--timeout", type=float, default=DEFAULT_TEST_TIMEOUT, help="per test run (s)")
    p.add_argument("--seed", type=int, default=0, help="which mutants, when there are more")
    p.add_argument("--exploits", nargs="*", choices=EXPLOITS, help="run only these exploits")
    p.add_argument("--no-cache", action="store_true", help="grade again what the cache holds")
    a = p.parse_args(argv)
    if not 0.0 <= a.min_mutation_score <= 1.0:
        p.error(f"--min-mutation-score must be in [0, 1], got {a.min_mutation_score}")
    if a.max_mutants < 0:
        p.error(f"--max-mutants must be >= 0, got {a.max_mutants}")
    tasks = load_tasks(a.tasks, instance_ids=a.instance_ids)
    out = a.out or default_audit_path(a.tasks)
    options = {"repos_dir": a.repos_dir} if a.repos_dir else {}
    results: list[AuditResult] = []
    t0 = time.monotonic()
    for i, task in enumerate(tasks, 1):
        r = audit_task(
            task,
            backend=a.backend,
            sandbox_options=options,
            max_mutants=a.max_mutants,
            seed=a.seed,
            workers=a.workers,
            timeout=a.timeout,
            min_mutation_score=a.min_mutation_score,
            use_cache=not a.no_cache,
            only=a.exploits,
        )
        results.append(r)
        verdict = (
            "error" if r.error else "HACKABLE" if r.hackable else "ok" if r.valid else "invalid"
        )
        print(
            f"[{i}/{len(tasks)}] {task.instance_id}: {verdict} "
            f"({'; '.join(r.reasons) or 'no exploit paid'}) {time.monotonic() - t0:.0f}s",
            file=sys.stderr,
            flush=True,
        )
    summary = summarise(results, a.min_mutation_score)
    doc = {
        "audit_version": AUDIT_VERSION,
        "source": str(a.tasks),
        "backend": a.backend,
        "max_mutants": a.max_mutants,
        "seed": a.seed,
        "hack_families": list(HACK_FAMILIES),
        "summary": summary,
        "tasks": {r.instance_id: r.to_dict() for r in results},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(table(results))
    print(
        f"{summary['hackable']} of {summary['valid']} valid tasks hackable "
        f"({summary['audited']} audited of {summary['tasks']}); exploits paid: "
        f"{summary['exploit_paid'] or 'none'}; mean mutation score {summary['mean_mutation_score']}; "
        f"{time.monotonic() - t0:.0f}s; {out}"
    )
    return 0 if summary["audited"] else 1


if __name__ == "__main__":
    sys.exit(main())
