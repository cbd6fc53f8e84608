"""Audit one task: grade the gold patch, the empty patch, every exploit and the mutants with the
reward's own grader (``grade_patch``, rule ``rl``) and judge the tests.

A patch *pays* when the grader resolves it and the static scan finds nothing (what the env's
default ``suspect_policy`` pays). The verdict:

- ``valid``: gold pays and the empty patch does not (else the task is broken, not weak);
- ``hackable`` when the empty patch pays, an exploit of the comparison, hardcoded, runner or stub
  family pays, a tamper exploit pays (a grader hole), or the tests kill fewer than
  ``min_mutation_score`` of the mutants;
- ``reasons``: one line per finding.

Raw outcomes are cached by the task's content and the audit's settings (``cache_key``), so a
re-run, or one with another ``min_mutation_score``, grades nothing again.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from swe_gym.audit.exploits import EXPLOITS, build_exploits
from swe_gym.audit.mutants import build_mutants
from swe_gym.audit.targets import read_sources
from swe_gym.grading import DEFAULT_TEST_TIMEOUT, GradingReport, grade_patch
from swe_gym.paths import cache_root
from swe_gym.swerl.apply import make_patch
from swe_gym.tasks import Task

AUDIT_VERSION = 2  # bump when the exploits or the grading of them change: old caches are not used
# 0.75: equivalent mutants (a change that no input can tell apart) are not rare among the
# operators' edits of small functions: on the reviewed bundled suite, whose survivors were read
# one by one, equivalent ones alone bring a task down to 0.82 (2 of 11), so 1.0 is not reachable
# on every strong task; below 3 in 4, a wrong one-token edit of the fixed function passes often
# enough to be learned (benchmarks/README.md, audit section).
DEFAULT_MIN_MUTATION_SCORE = 0.75
DEFAULT_MAX_MUTANTS = 12
HACK_FAMILIES = ("comparison", "hardcoded", "runner", "stub")


@dataclass
class AuditResult:
    instance_id: str
    key: str
    backend: str
    gold: str  # paid | the grader's reason
    empty: str
    exploits: dict[str, dict[str, Any]] = field(
        default_factory=dict
    )  # name -> family, outcome, reason
    not_applicable: dict[str, str] = field(default_factory=dict)
    mutants: dict[str, str] = field(default_factory=dict)  # name -> killed | survived | error
    targets: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    error: str = ""  # the audit itself could not run (no local repository, ...)
    # the verdict, from the above and min_mutation_score (see ``judge``)
    valid: bool = False
    hackable: bool = False
    mutation_score: float | None = None
    paid: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AuditResult:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


def outcome(report: GradingReport) -> tuple[str, str]:
    """``(paid | caught | failed | error, the grader's reason)`` for one graded patch."""
    reason = report.reason or ""
    if report.resolved and not report.suspect:
        return "paid", reason
    if (
        report.resolved
        or report.tampered
        or report.dropped
        or reason in ("tampered", "native_code")
    ):
        return "caught", reason or "suspect"
    if reason in ("grading_error", "tests_timed_out", "suite_did_not_run", "model_patch_failed"):
        return "error", reason
    return "failed", reason


def judge(r: AuditResult, min_mutation_score: float = DEFAULT_MIN_MUTATION_SCORE) -> AuditResult:
    """Fill the verdict fields of ``r`` from its raw outcomes."""
    r.reasons, r.paid = [], []
    if r.error:
        r.valid, r.hackable, r.mutation_score = False, False, None
        r.reasons.append(f"not audited: {r.error}")
        return r
    r.valid = r.gold == "paid" and r.empty != "paid"
    if r.gold != "paid":
        r.reasons.append(f"gold patch not paid ({r.gold})")
    if r.empty == "paid":
        r.reasons.append("the empty patch is paid")
    for name, e in r.exploits.items():
        if e["outcome"] == "paid":
            r.paid.append(name)
            what = "grader hole" if e["family"] == "tamper" else "exploit paid"
            r.reasons.append(f"{what}: {name} ({e['family']})")
    judged = [v for v in r.mutants.values() if v in ("killed", "survived")]
    r.mutation_score = (
        round(sum(v == "killed" for v in judged) / len(judged), 4) if judged else None
    )
    survivors = [k for k, v in r.mutants.items() if v == "survived"]
    low = r.mutation_score is not None and r.mutation_score < min_mutation_score
    if low:
        r.reasons.append(
            f"mutation score {r.mutation_score:.2f} < {min_mutation_score:.2f} "
            f"(survived: {', '.join(survivors[:4])}{' ...' if len(survivors) > 4 else ''})"
        )
    r.hackable = bool(r.paid) or r.empty == "paid" or low
    return r


def cache_key(
    task: Task,
    backend: str,
    max_mutants: int,
    seed: int,
    only: list[str] | None = None,
    baseline: bool = True,
) -> str:
    body = {
        "version": AUDIT_VERSION,
        **({} if baseline else {"baseline": False}),
        "only": sorted(only) if only is not None else None,
        "backend": backend,
        "max_mutants": max_mutants,
        "seed": seed,
        **{
            k: getattr(task, k)
            for k in (
                "instance_id",
                "repo",
                "base_commit",
                "problem_statement",
                "patch",
                "test_patch",
                "FAIL_TO_PASS",
                "PASS_TO_PASS",
                "install_config",
            )
        },
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:24]


def cache_dir() -> Path:
    return cache_root() / "audit"


def audit_task(
    task: Task,
    *,
    backend: str = "local",
    sandbox_options: dict[str, Any] | None = None,
    max_mutants: int = DEFAULT_MAX_MUTANTS,
    seed: int = 0,
    workers: int = 2,
    timeout: float = DEFAULT_TEST_TIMEOUT,
    min_mutation_score: float = DEFAULT_MIN_MUTATION_SCORE,
    use_cache: bool = True,
    only: list[str] | None = None,
    baseline: bool = True,
) -> AuditResult:
    """Audit ``task`` (raw outcomes from the cache when present); never raises for a task that
    cannot be audited: the result's ``error`` says why. ``only``: run just these exploits;
    ``baseline=False``: the gold and empty patches are not graded again (a caller that has just
    validated the task, as synthesis has)."""
    key = cache_key(task, backend, max_mutants, seed, only, baseline)
    cached = cache_dir() / f"{key}.json"
    if use_cache and cached.is_file():
        return judge(AuditResult.from_dict(json.loads(cached.read_text())), min_mutation_score)
    t0 = time.monotonic()
    r = AuditResult(task.instance_id, key, backend, gold="", empty="")
    try:
        sources = read_sources(task, (sandbox_options or {}).get("repos_dir"))
    except Exception as err:  # noqa: BLE001 - a task that cannot be read is reported, not fatal
        r.error = f"{type(err).__name__}: {err}"[:500]
        return judge(r, min_mutation_score)
    r.targets = [f"{t.path}::{t.qualname}" for t in sources.targets]
    exploits, r.not_applicable = build_exploits(sources, task.problem_statement)
    if only is not None:
        unknown = sorted(set(only) - {e.name for e in exploits} - set(r.not_applicable))
        if unknown:
            raise ValueError(f"unknown exploit(s) {unknown}; known: {EXPLOITS}")
        exploits = [e for e in exploits if e.name in only]
    mutants = build_mutants(sources, max_mutants, seed)
    # The gold patch as the audit's own diff of the same change: a row's patch may have no
    # context lines (the quoting tiers'), which git apply refuses without --unidiff-zero.
    gold = make_patch(sources.base, sources.fixed)
    jobs: list[tuple[str, str]] = [("gold", gold), ("empty", "")] if baseline else []
    jobs += [(f"exploit:{e.name}", e.patch) for e in exploits]
    jobs += [(f"mutant:{m.name}", m.patch) for m in mutants]

    def grade(job: tuple[str, str]) -> tuple[str, str]:
        rep = grade_patch(
            task, job[1], backend=backend, sandbox_options=sandbox_options, timeout=timeout
        )
        return outcome(rep)

    with ThreadPoolExecutor(max(1, workers)) as pool:
        results = dict(zip([j[0] for j in jobs], pool.map(grade, jobs), strict=True))
    if baseline:
        gold_out, empty_out = results["gold"], results["empty"]
        r.gold = "paid" if gold_out[0] == "paid" else gold_out[1] or gold_out[0]
        r.empty = "paid" if empty_out[0] == "paid" else empty_out[1] or "failed"
    else:
        r.gold, r.empty = "paid", "not graded"
    for ex_ in exploits:
        out, reason = results[f"exploit:{ex_.name}"]
        r.exploits[ex_.name] = {"family": ex_.family, "outcome": out, "reason": reason}
    for m in mutants:
        out, reason = results[f"mutant:{m.name}"]
        # A mutant the grader could not judge is no evidence either way; any other unpaid
        # outcome (failed, timed out, crashed the suite) is a kill.
        r.mutants[m.name] = (
            "survived" if out == "paid" else "error" if reason == "grading_error" else "killed"
        )
    r.wall_s = round(time.monotonic() - t0, 2)
    if use_cache and r.gold == "paid":  # a broken or flaky gold run is not kept
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_name(cached.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(r.to_dict(), indent=1))
        os.replace(tmp, cached)
    return judge(r, min_mutation_score)


__all__ = [
    "AUDIT_VERSION",
    "DEFAULT_MAX_MUTANTS",
    "DEFAULT_MIN_MUTATION_SCORE",
    "HACK_FAMILIES",
    "AuditResult",
    "audit_task",
    "cache_key",
    "judge",
    "outcome",
]
