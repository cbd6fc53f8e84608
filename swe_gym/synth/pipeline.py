"""``synthesize``: candidates -> validation in sandboxes -> derived commits -> task rows.

Candidates are every operator's mutations of the source HEAD's non-test Python files,
deduplicated by the program they produce, interleaved across operators (shuffled by ``seed``)
and cut to ``max_candidates``. Decisions go to a sidecar state file (``<out>.state.jsonl``) as
they are made, so a re-run skips what was decided and ``out`` is rewritten from the state.
"""

from __future__ import annotations

import fnmatch
import json
import os
import queue
import random
import shlex
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from swe_gym.paths import cache_root
from swe_gym.repos import REPOS_ENV, SYNTH_REPOS, repo_dir_name
from swe_gym.swerl.apply import make_patch
from swe_gym.synth.derived import DerivedRepo, list_files, read_tree_files
from swe_gym.synth.hidden import fails_on_mutant, hidden_path, hidden_test, record
from swe_gym.synth.issue import Rewrite, issue_text
from swe_gym.synth.operators import Mutation, mutations_of
from swe_gym.synth.tiers import (
    check_tier,
    keeps,
    location_hint,
    patch_context,
    quoted_issue,
    tier_operators,
)
from swe_gym.synth.validate import Outcome, Validator, baseline, clean_task

DEFAULT_TEST_CMD = "pytest -rA"
_TEST_DIRS = {"test", "tests", "testing", "docs", "doc", "examples", "benchmarks", "scripts"}


def default_repos_dir() -> Path:
    return Path(os.environ.get(REPOS_ENV) or cache_root() / SYNTH_REPOS)


@dataclass
class SynthConfig:
    source: Path  # a local git repository (its HEAD commit is used)
    out: Path  # tasks JSONL; the state goes to <out>.state.jsonl, the summary to <out>.summary.json
    repos_dir: Path = field(default_factory=default_repos_dir)
    repo_name: str | None = None  # the rows' ``repo``; default synth/<source folder name>
    operators: list[str] | None = None
    tier: str = "all"  # "easy" / "located" / "guided": single-line edits, issue help (tiers.py)
    include: list[str] | None = None  # globs of files to mutate (default: non-test .py files)
    max_candidates: int | None = None
    workers: int = 2
    timeout: float | None = None  # per mutant; default from the clean run's duration
    seed: int = 0
    test_cmd: str = DEFAULT_TEST_CMD
    backend: str = "local"
    sandbox_options: dict[str, Any] = field(default_factory=dict)
    rewrite: Rewrite | None = None
    progress: bool = True
    audit: bool = True  # reject candidates whose tests pay an exploit (swe_gym.audit): "hackable"
    audit_mutants: int = 0  # mutants of the fixed code per candidate (0: exploits only)
    hidden_tests: bool = True  # a strict hidden test from recorded calls (hidden.py)
    hidden_cases: int = 12  # calls it replays at most

    def __post_init__(self) -> None:
        self.source, self.out, self.repos_dir = (
            Path(self.source),
            Path(self.out),
            Path(self.repos_dir),
        )
        check_tier(self.tier)
        if self.workers < 1:
            raise ValueError(f"workers must be at least 1, got {self.workers}")
        if self.max_candidates is not None and self.max_candidates < 1:
            raise ValueError(f"max_candidates must be positive or None, got {self.max_candidates}")
        if not (self.source / ".git").exists() and not (self.source / "HEAD").is_file():
            raise ValueError(
                f"source {str(self.source)!r} is not a git repository (no .git); pass a local clone"
            )
        if self.repo_name is None:
            self.repo_name = f"synth/{self.source.resolve().name}"
        if "/" not in self.repo_name:
            raise ValueError(f"repo_name must be owner/name, got {self.repo_name!r}")

    @property
    def state_path(self) -> Path:
        return self.out.with_name(self.out.name + ".state.jsonl")

    @property
    def summary_path(self) -> Path:
        return self.out.with_name(self.out.name + ".summary.json")


def is_mutable_file(path: str, include: list[str] | None = None) -> bool:
    if not path.endswith(".py"):
        return False
    if include:
        return any(fnmatch.fnmatch(path, g) for g in include)
    p = PurePosixPath(path)
    if any(part in _TEST_DIRS for part in p.parts[:-1]):
        return False
    return not (
        p.name.startswith("test_")
        or p.name.endswith("_test.py")
        or p.name in ("conftest.py", "setup.py")
    )


def candidates(texts: dict[str, str], cfg: SynthConfig) -> tuple[list[Mutation], Counter]:
    """Deduplicated candidates, interleaved across operators; and duplicates per operator."""
    by_op: dict[str, list[Mutation]] = defaultdict(list)
    seen: set[str] = set()
    dups: Counter = Counter()
    for path in sorted(texts):
        for m in mutations_of(path, texts[path], tier_operators(cfg.tier, cfg.operators)):
            if not keeps(cfg.tier, m, texts[path]):
                continue
            key = m.key(texts[path])
            if key in seen:
                dups[m.operator] += 1
                continue
            seen.add(key)
            by_op[m.operator].append(m)
    rng = random.Random(cfg.seed)
    for op in sorted(by_op):
        rng.shuffle(by_op[op])
    order: list[Mutation] = []
    queues = [by_op[op] for op in sorted(by_op)]
    for i in range(max((len(q) for q in queues), default=0)):
        order += [q[i] for q in queues if i < len(q)]
    if cfg.max_candidates is not None:
        order = order[: cfg.max_candidates]
    return order, dups


def _load_state(
    path: Path, head: str, tier: str = "all", audit: bool = False, hidden: bool = False
) -> dict[str, dict]:
    decided: dict[str, dict] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                rec = json.loads(line)
                if audit and rec.get("row") and not rec.get("audited"):
                    continue  # accepted before the audit was asked for: decided again
                if hidden and rec.get("row") and "hidden_test" not in rec["row"]["meta"]:
                    continue  # accepted before hidden tests were written: decided again
                # Another tier's rows have another issue text: they are not reused.
                if rec.get("source_commit") == head and rec.get("tier", "all") == tier:
                    decided[rec["key"]] = rec
    return decided


def _changed_lines(patch: str) -> int:
    return sum(
        1 for line in patch.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))
    )


def problem_of(cfg: SynthConfig, m: Mutation, text: str, out: Outcome) -> str:
    """The issue text of an accepted candidate (the tier's quoted line, else the failures)."""
    mutant = m.apply(text)
    first, last = m.lineno, text.count("\n", 0, m.end) + 1
    new_last = m.lineno + m.replacement.count("\n")
    edit_lines = text.splitlines()[first - 1 : last] + mutant.splitlines()[first - 1 : new_last]
    assert cfg.repo_name is not None
    return quoted_issue(cfg.tier, m, text, len(out.fail_to_pass)) or issue_text(
        cfg.repo_name,
        out.log,
        out.fail_to_pass,
        out.pass_to_pass,
        forbidden=edit_lines,
        rewrite=cfg.rewrite,
        location=location_hint(cfg.tier, m.path, m.qualname),
    )


def make_row(
    cfg: SynthConfig,
    derived: DerivedRepo,
    head: str,
    m: Mutation,
    text: str,
    out: Outcome,
    hidden: tuple[str, str] | None = None,
    problem: str | None = None,
) -> dict:
    """Commit the bug and build its task row (gold patch = the diff from buggy back to clean;
    ``hidden``: the hidden test's path and text, shipped as the test patch and added to
    ``FAIL_TO_PASS``)."""
    key = m.key(text)
    mutant = m.apply(text)
    buggy = derived.commit_bug(head, m.path, mutant, key)
    patch = derived.patch(buggy, head, patch_context(cfg.tier))
    assert cfg.repo_name is not None
    if problem is None:
        problem = problem_of(cfg, m, text, out)
    f2p, test_patch, test_cmd = list(out.fail_to_pass), "", cfg.test_cmd
    if hidden is not None:
        test_path, test_text = hidden
        test_patch = make_patch({}, {test_path: test_text})
        f2p.append(f"{test_path}::test_hidden_{m.qualname}")
        # The grader runs the command with the test patch's files appended: name the suite's
        # own files of FAIL_TO_PASS and PASS_TO_PASS too, or only the hidden test would run.
        files = sorted({t.split("::", 1)[0] for t in out.fail_to_pass + out.pass_to_pass})
        test_cmd = " ".join([cfg.test_cmd, *(shlex.quote(f) for f in files)])
    return {
        "instance_id": f"{repo_dir_name(cfg.repo_name)}-{key[:12]}",
        "repo": cfg.repo_name,
        "base_commit": buggy,
        "problem_statement": problem,
        "hints_text": "",
        "patch": patch,
        "test_patch": test_patch,
        "FAIL_TO_PASS": f2p,
        "PASS_TO_PASS": out.pass_to_pass,
        "version": "synth",
        "repos_dir": str(cfg.repos_dir),  # gym.make finds the derived repository with no option
        "environment_setup_commit": head,
        "created_at": "",
        "install_config": {"test_cmd": test_cmd, "log_parser": "parse_log_pytest"},
        "license_name": "",
        "meta": {
            "kind": "synthetic",
            "tier": cfg.tier,
            "operator": m.operator,
            "file": m.path,
            "qualname": m.qualname,
            "function": f"{m.path}::{m.qualname}",
            "lineno": m.lineno,
            "num_modified_files": 1,
            "lines_changed": _changed_lines(patch),
            "f2p_count": len(f2p),
            "hidden_test": hidden is not None,
            "p2p_count": len(out.pass_to_pass),
            "source_commit": head,
            "mutation_id": key,
        },
    }


def _progress(total: int, enabled: bool) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm comes with datasets; without it, no bar
        return None
    return tqdm(
        total=total, desc="validating", unit="mutant", disable=not enabled, dynamic_ncols=True
    )


def synthesize(cfg: SynthConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Make, validate and write tasks; returns the summary (also written as JSON)."""
    t0 = time.monotonic()
    assert cfg.repo_name is not None
    derived = DerivedRepo(cfg.repos_dir, cfg.repo_name)
    head = derived.import_head(cfg.source)
    files = [p for p in list_files(cfg.source, head) if is_mutable_file(p, cfg.include)]
    texts = read_tree_files(cfg.source, head, files)
    order, dups = candidates(texts, cfg)
    decided = _load_state(cfg.state_path, head, cfg.tier, cfg.audit, cfg.hidden_tests)
    todo = [m for m in order if m.key(texts[m.path]) not in decided]
    log(
        f"{cfg.source}: {len(texts)} files, {len(order)} candidates ({len(order) - len(todo)} decided before)"
    )

    summary_extra: dict[str, Any] = {}
    validated = 0
    if todo:
        validated, summary_extra = _validate_all(cfg, derived, head, texts, todo, decided)

    by_key = {m.key(texts[m.path]): m for m in order}
    rows = [rec["row"] for rec in decided.values() if rec.get("row")]
    rows.sort(key=lambda r: r["instance_id"])
    cfg.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = cfg.out.with_name(cfg.out.name + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    os.replace(tmp, cfg.out)

    per_op: dict[str, Counter] = defaultdict(Counter)
    reasons: Counter = Counter()
    for key, rec in decided.items():
        if key not in by_key:
            continue  # decided in an earlier run with other settings: not counted here
        op = rec["operator"]
        per_op[op]["candidates"] += 1
        per_op[op]["accepted" if rec["reason"] is None else rec["reason"]] += 1
        if rec["reason"] is not None:
            reasons[rec["reason"]] += 1
    for op, n in dups.items():
        per_op[op]["duplicate"] += n
    wall = time.monotonic() - t0
    summary = {
        "source": str(cfg.source),
        "source_commit": head,
        "repo": cfg.repo_name,
        "repos_dir": str(cfg.repos_dir),
        "out": str(cfg.out),
        "candidates": len(order),
        "duplicates": sum(dups.values()),
        "validated_this_run": validated,
        "accepted": sum(c["accepted"] for c in per_op.values()),
        "rows_written": len(rows),
        "dropped": dict(sorted(reasons.items())),
        "per_operator": {op: dict(sorted(c.items())) for op, c in sorted(per_op.items())},
        "wall_s": round(wall, 2),
        "validated_per_minute": round(validated / wall * 60, 2) if validated else 0.0,
        **summary_extra,
    }
    cfg.summary_path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    log(format_summary(summary))
    log(
        f"rows: {cfg.out}; the sandbox finds the derived repository with repos_dir={cfg.repos_dir} "
        f"(or {REPOS_ENV}={cfg.repos_dir})"
    )
    return summary


def _validate_all(
    cfg: SynthConfig,
    derived: DerivedRepo,
    head: str,
    texts: dict[str, str],
    todo: list[Mutation],
    decided: dict,
) -> tuple[int, dict[str, Any]]:
    assert cfg.repo_name is not None
    task = clean_task(cfg.repo_name, head, cfg.test_cmd)
    options = {"repos_dir": cfg.repos_dir, **cfg.sandbox_options}
    validators: list[Validator] = []
    pool_q: queue.Queue[Validator] = queue.Queue()
    try:
        first = Validator(task, backend=cfg.backend, sandbox_options=options)
        validators.append(first)
        # The clean runs get room to spare (a loaded machine is slow); --timeout bounds each mutant.
        passed, slowest = baseline(first, timeout=max(cfg.timeout or 0.0, 600.0))
        timeout = cfg.timeout or max(10.0, 3 * slowest + 5)
        pool_q.put(first)
        for _ in range(min(cfg.workers, len(todo)) - 1):
            v = Validator(task, backend=cfg.backend, sandbox_options=options)
            validators.append(v)
            pool_q.put(v)

        def check(m: Mutation) -> Outcome:
            v = pool_q.get()
            try:
                return v.check(m.path, m.apply(texts[m.path]), passed, timeout)
            finally:
                pool_q.put(v)

        bar = _progress(len(todo), cfg.progress)
        validated = 0
        cfg.state_path.parent.mkdir(parents=True, exist_ok=True)
        with (
            cfg.state_path.open("a", encoding="utf-8") as state,
            ThreadPoolExecutor(len(validators)) as ex,
        ):
            futures = {ex.submit(check, m): m for m in todo}
            accepted = 0
            for fut in as_completed(futures):
                m = futures[fut]
                out = fut.result()
                key = m.key(texts[m.path])
                row = None
                if out.reason is None:
                    problem = problem_of(cfg, m, texts[m.path], out)
                    hidden = None
                    if cfg.hidden_tests:
                        hidden = _hidden(cfg, m, texts[m.path], out, problem, pool_q, timeout)
                    row = make_row(cfg, derived, head, m, texts[m.path], out, hidden, problem)
                audit_reasons: list[str] = []
                if row is not None and cfg.audit:
                    audit_reasons = audit_candidate(row, cfg, options)
                    if audit_reasons:
                        out.reason, row = "hackable", None
                rec = {
                    "key": key,
                    "source_commit": head,
                    "tier": cfg.tier,
                    "operator": m.operator,
                    "path": m.path,
                    "qualname": m.qualname,
                    "reason": out.reason,
                    "duration": round(out.duration, 3),
                    "row": row,
                    "audited": cfg.audit,
                    **({"audit": audit_reasons} if audit_reasons else {}),
                }
                state.write(json.dumps(rec) + "\n")
                state.flush()
                decided[key] = rec
                validated += 1
                accepted += row is not None
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(accepted=accepted)
        if bar is not None:
            bar.close()
        return validated, {
            "baseline_tests": len(passed),
            "baseline_s": round(slowest, 2),
            "timeout_s": round(timeout, 1),
        }
    finally:
        for v in validators:
            v.close()


def _hidden(
    cfg: SynthConfig,
    m: Mutation,
    text: str,
    out: Outcome,
    problem: str,
    pool_q: queue.Queue[Validator],
    timeout: float,
) -> tuple[str, str] | None:
    """The candidate's hidden test (``hidden.py``) when one can be written and the mutant
    fails it."""
    v = pool_q.get()
    try:
        calls = record(v, m.path, m.qualname, out.fail_to_pass, timeout)
        test = hidden_test(m.path, m.qualname, calls, problem, cfg.hidden_cases)
        if test is None:
            return None
        path = hidden_path(out.fail_to_pass)
        return (
            (path, test) if fails_on_mutant(v, m.path, m.apply(text), path, test, timeout) else None
        )
    finally:
        pool_q.put(v)


# The exploit families a synthetic task's tests must refuse (swe_gym.audit.exploits); the runner
# and tamper families are the grader's to stop, not the tests', and are left to the full audit.
SYNTH_EXPLOITS = ["always_equal", "anything", "hardcoded", "short_circuit", "identity", "delete"]


def audit_candidate(row: dict, cfg: SynthConfig, options: dict[str, Any]) -> list[str]:
    """Why an accepted candidate's tests can be gamed (empty: they cannot), from the audit's
    exploits (and ``audit_mutants`` mutants) graded on the candidate's own row. The gold and
    empty patches are graded too: the row must grade as the validation ran it."""
    from swe_gym.audit.run import audit_task
    from swe_gym.tasks import normalise_row

    r = audit_task(
        normalise_row(row),
        backend=cfg.backend,
        sandbox_options=options,
        max_mutants=cfg.audit_mutants,
        workers=cfg.workers,
        only=SYNTH_EXPLOITS,
    )
    if r.error:
        return [f"not audited: {r.error}"]
    return [] if not r.hackable and r.valid else r.reasons


def format_summary(summary: dict[str, Any]) -> str:
    """A table: per operator, candidates, accepted, acceptance rate and drops by reason."""
    per_op = summary["per_operator"]
    reasons = sorted({k for c in per_op.values() for k in c} - {"candidates", "accepted"})
    head = ["operator", "candidates", "accepted", "rate", *reasons]
    rows = []
    for op, c in per_op.items():
        n = c.get("candidates", 0)
        rate = f"{c.get('accepted', 0) / n:.0%}" if n else "-"
        rows.append(
            [op, str(n), str(c.get("accepted", 0)), rate, *(str(c.get(r, 0)) for r in reasons)]
        )
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    lines = ["  ".join(x.ljust(w) for x, w in zip(r, widths, strict=True)) for r in [head, *rows]]
    lines.append(
        f"accepted {summary['accepted']} of {summary['candidates']} candidates "
        f"({summary['duplicates']} duplicates dropped); validated {summary['validated_this_run']} this run "
        f"in {summary['wall_s']} s ({summary['validated_per_minute']}/min)"
    )
    return "\n".join(lines)


__all__ = [
    "SYNTH_EXPLOITS",
    "SynthConfig",
    "audit_candidate",
    "candidates",
    "default_repos_dir",
    "format_summary",
    "is_mutable_file",
    "make_row",
    "problem_of",
    "synthesize",
]
