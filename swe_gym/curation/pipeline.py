"""SWE-RL data curation (docs/methods.md#swe-rl): GH Archive events + local clones ->
task rows in the SWE-rebench schema.

For each merged PR: link issues (closing keywords and plain references), find its change in
the clone (``git diff base...head``), split it into code and test parts, filter, add
relevant-but-unmodified files, optionally validate by running the tests, and append the row.

Filters (each counted in the summary under its reason code, first failing filter wins):
``excluded_repo`` (decontamination list), ``created_before_cutoff``, ``bot``,
``no_linked_issue``, ``repo_not_cloned``, ``missing_commits``, ``licence``, ``non_utf8_patch``,
``empty_change`` (no non-test file changed), ``no_code_file``, ``huge_change``
(``max_changed_lines``), ``no_test_change`` (with ``require_tests``), ``validation:<why>``.

Resumable: rows are appended to ``out`` and flushed one by one; every PR's outcome is appended
to ``<out>.progress.jsonl``. A rerun skips PRs already there (or already in ``out``) and
repairs a line cut by a kill.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from swe_gym.curation import gitops
from swe_gym.curation.events import EventIndex, IssueRecord, PRRecord, read_events
from swe_gym.curation.rules import (
    LICENCE_FILES,
    classify_licence,
    is_bot_pr,
    is_code_path,
    is_test_path,
    linked_issue_numbers,
)
from swe_gym.errors import unknown_choice
from swe_gym.swerl.context import build_code_context, resolve_selector

VALIDATE_BACKENDS = ("local", "docker")


@dataclass
class CurationConfig:
    events: Sequence[str | Path]
    repos_dir: str | Path
    out: str | Path
    licence_allow: Sequence[str] | None = None  # SPDX ids; None: every licence
    exclude_repos: Sequence[str] = ()  # owner/name, case-insensitive (decontamination)
    created_after: str | None = None  # ISO date; PRs created on or before it are dropped
    require_tests: bool = False
    max_changed_lines: int = 2000  # added + deleted lines over the non-test files
    validate: str | None = None  # None | local | docker
    selector: str = "bm25"
    max_relevant_files: int = 3
    install_configs: dict[str, dict[str, Any]] = field(
        default_factory=dict
    )  # repo -> install_config
    validate_timeout: float = 900.0
    progress: bool | None = None  # tqdm: None = only on a terminal

    def __post_init__(self) -> None:
        if self.validate is not None and self.validate not in VALIDATE_BACKENDS:
            raise unknown_choice("validation backend", self.validate, VALIDATE_BACKENDS)
        if self.max_changed_lines < 1:
            raise ValueError(f"max_changed_lines must be >= 1, got {self.max_changed_lines}")
        if self.created_after is not None and not _is_iso_date(self.created_after):
            raise ValueError(
                f"created_after must be an ISO date like 2024-01-31, got {self.created_after!r}"
            )
        self.exclude_repos = [r.lower() for r in self.exclude_repos]
        if self.licence_allow is not None:
            self.licence_allow = [x.lower() for x in self.licence_allow]


def _is_iso_date(s: str) -> bool:
    from datetime import datetime

    try:
        datetime.fromisoformat(s.replace("Z", "+00:00"))
        return True
    except ValueError:
        return False


def clone_dir(repos_dir: Path, repo: str) -> Path:
    """``DIR/<owner>__<name>`` (the SWE-bench instance-id convention)."""
    return repos_dir / repo.replace("/", "__")


def instance_id(repo: str, number: int) -> str:
    return f"{repo.replace('/', '__')}-{number}"


class Skip(Exception):
    def __init__(self, reason: str, detail: str = ""):
        self.reason, self.detail = reason, detail
        super().__init__(f"{reason}: {detail}")


@dataclass
class Summary:
    merged_prs: int = 0
    kept: int = 0
    removed: Counter[str] = field(default_factory=Counter)
    resumed: int = 0  # PRs whose outcome came from an earlier run
    bad_event_lines: int = 0
    bad_event_examples: list[dict[str, Any]] = field(default_factory=list)
    events_used: int = 0
    lines_read: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "lines_read": self.lines_read,
            "events_used": self.events_used,
            "bad_event_lines": self.bad_event_lines,
            "bad_event_examples": self.bad_event_examples,
            "merged_prs": self.merged_prs,
            "kept": self.kept,
            "removed": dict(sorted(self.removed.items())),
            "resumed": self.resumed,
        }

    def table(self) -> str:
        rows = [("merged PRs", self.merged_prs)] + [
            (f"removed: {k}", v) for k, v in sorted(self.removed.items())
        ]
        rows += [("kept", self.kept), ("bad event lines (skipped)", self.bad_event_lines)]
        width = max(len(r[0]) for r in rows)
        return "\n".join(f"{name:<{width}}  {n:>8}" for name, n in rows)


# --------------------------------------------------------------------------- resumability


def _repair_tail(path: Path) -> None:
    """Cut a last line that a kill left without its newline (it is redone on resume)."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open("rb+") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        pos = size
        while pos > 0:
            step = min(65536, pos)
            f.seek(pos - step)
            chunk = f.read(step)
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                keep = pos - step + nl + 1
                if keep != size:
                    f.truncate(keep)
                return
            pos -= step
        f.truncate(0)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    return out


# ------------------------------------------------------------------------------ curation


def _problem_statement(issues: list[IssueRecord]) -> str:
    return "\n\n".join(f"{i.title}\n{i.body}".strip() for i in issues)


def _hints(issues: list[IssueRecord], before: str) -> str:
    """Issue comments written before the PR was opened (SWE-bench's hints_text rule)."""
    comments = [
        c
        for i in issues
        for c in i.comments
        if not before or (c.created_at and c.created_at < before)
    ]
    comments.sort(key=lambda c: c.created_at)
    return "\n".join(c.body for c in comments)


def _licence(clone: Path, commit: str) -> str:
    for name in LICENCE_FILES:
        data = gitops.show(clone, commit, name)
        if data is not None:
            return classify_licence(data.decode("utf-8", "replace"))
    return "unknown"


def curate_pr(
    pr: PRRecord,
    idx: EventIndex,
    cfg: CurationConfig,
    validator: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The task row for one merged PR, or ``Skip`` with the filter's reason code."""
    if pr.repo.lower() in cfg.exclude_repos:
        raise Skip("excluded_repo", pr.repo)
    if cfg.created_after and (
        not pr.created_at or pr.created_at[: len(cfg.created_after)] <= cfg.created_after
    ):
        raise Skip("created_before_cutoff", pr.created_at or "no created_at")
    bot = is_bot_pr(pr.title, pr.user, pr.user_type)
    if bot:
        raise Skip("bot", bot)
    closing, plain = linked_issue_numbers(f"{pr.title}\n{pr.body}", pr.repo, pr.number)
    issues = [
        idx.issues[(pr.repo, n)]
        for n in closing + plain
        if (pr.repo, n) in idx.issues
        and not idx.issues[(pr.repo, n)].is_pr
        and (pr.repo, n) not in idx.prs
    ]
    issues = [i for i in issues if i.title or i.body]
    if not issues:
        raise Skip(
            "no_linked_issue",
            f"references {closing + plain}" if closing + plain else "no references",
        )
    clone = clone_dir(Path(cfg.repos_dir), pr.repo)
    if not (clone / ".git").exists() and not (clone / "HEAD").exists():
        raise Skip("repo_not_cloned", str(clone))
    change = gitops.locate_change(clone, pr.base_sha, pr.head_sha, pr.merge_commit_sha)
    if isinstance(change, str):
        raise Skip("missing_commits", change)
    licence = _licence(clone, change.base)
    if cfg.licence_allow is not None and licence.lower() not in cfg.licence_allow:
        raise Skip("licence", licence)
    stats = gitops.numstat(clone, change.base, change.tip)
    test_paths = [s.path for s in stats if is_test_path(s.path)]
    code_paths = [s.path for s in stats if not is_test_path(s.path)]
    try:
        patch = gitops.diff(clone, change.base, change.tip, code_paths).decode("utf-8")
        test_patch = gitops.diff(clone, change.base, change.tip, test_paths).decode("utf-8")
    except UnicodeDecodeError as e:
        # A non-UTF-8 text file: the row would not survive JSON and a text prompt unchanged.
        raise Skip("non_utf8_patch", str(e)[:120]) from None
    if not code_paths:
        raise Skip("empty_change", "no non-test file changed")
    if not any(is_code_path(p) for p in code_paths):
        raise Skip("no_code_file", ", ".join(code_paths[:5]))
    changed = sum((s.added or 0) + (s.deleted or 0) for s in stats if s.path in set(code_paths))
    if changed > cfg.max_changed_lines:
        raise Skip("huge_change", f"{changed} changed lines > {cfg.max_changed_lines}")
    if cfg.require_tests and not test_paths:
        raise Skip("no_test_change")
    problem = _problem_statement(issues)
    ctx = build_code_context(
        clone,
        change.base,
        problem,
        code_paths,
        resolve_selector(cfg.selector),
        cfg.max_relevant_files,
    )
    binary = [s.path for s in stats if s.binary]
    row: dict[str, Any] = {
        "instance_id": instance_id(pr.repo, pr.number),
        "repo": pr.repo,
        "base_commit": change.base,
        "patch": patch,
        "test_patch": test_patch,
        "problem_statement": problem,
        "hints_text": _hints(issues, pr.created_at),
        "created_at": pr.created_at,
        "version": "",
        "environment_setup_commit": change.base,
        "FAIL_TO_PASS": [],
        "PASS_TO_PASS": [],
        "install_config": cfg.install_configs.get(pr.repo),
        "license_name": licence,
        "meta": {
            "num_modified_files": len(code_paths),
            "num_changed_lines": changed,
            "relevant_files": ctx.relevant,
            "binary_files": binary,  # carried as git binary patches; not shown in prompts
            "linked_issues": [i.number for i in issues],
            "closing_issues": [n for n in closing if any(i.number == n for i in issues)],
            "provenance": {
                "pr": pr.key,
                "issues": [f"{i.repo}#{i.number}" for i in issues],
                "pr_title": pr.title,
                "pr_user": pr.user,
                "merged_at": pr.merged_at,
                "base_sha": pr.base_sha,
                "head_sha": pr.head_sha,
                "merge_commit_sha": pr.merge_commit_sha,
                "change_located_by": change.how,
                "events": [s.to_dict() for s in pr.sources]
                + [s.to_dict() for i in issues for s in i.sources],
            },
        },
    }
    if validator is not None:
        result = validator(row)
        if not result.get("ok"):
            raise Skip(f"validation:{result.get('reason')}", result.get("detail", ""))
        row["FAIL_TO_PASS"], row["PASS_TO_PASS"] = result["FAIL_TO_PASS"], result["PASS_TO_PASS"]
        row["meta"]["validation"] = {
            k: v for k, v in result.items() if k not in ("FAIL_TO_PASS", "PASS_TO_PASS")
        }
    return row


def curate(cfg: CurationConfig) -> Summary:
    """Run the pipeline; rows go to ``cfg.out``, the summary to ``<out>.summary.json``."""
    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    progress_path = out.with_name(out.name + ".progress.jsonl")
    _repair_tail(out)
    _repair_tail(progress_path)
    done: dict[str, dict[str, Any]] = {r["pr"]: r for r in _read_jsonl(progress_path) if "pr" in r}
    for row in _read_jsonl(out):  # a kill between the row and its progress record
        key = (row.get("meta") or {}).get("provenance", {}).get("pr")
        if key and key not in done:
            done[key] = {"pr": key, "status": "kept"}
            with progress_path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(done[key]) + "\n")

    idx = read_events(cfg.events, progress=cfg.progress)
    summary = Summary(
        bad_event_lines=len(idx.bad_lines),
        bad_event_examples=[b.to_dict() for b in idx.bad_lines[:100]],
        events_used=idx.events_used,
        lines_read=idx.lines_read,
    )
    validator = None
    if cfg.validate:
        from swe_gym.curation.validate import make_validator

        # The local sandbox makes its worktree from the same DIR/<owner>__<name> clones.
        opts = {"repos_dir": str(cfg.repos_dir)} if cfg.validate == "local" else {}
        validator = make_validator(cfg.validate, cfg.validate_timeout, opts)
    merged = sorted((pr for pr in idx.prs.values() if pr.merged), key=lambda p: (p.repo, p.number))
    summary.merged_prs = len(merged)
    with (
        out.open("a", encoding="utf-8") as fout,
        progress_path.open("a", encoding="utf-8") as fprog,
    ):
        for pr in tqdm(
            merged,
            desc="curate",
            unit=" PR",
            disable=not cfg.progress if cfg.progress is not None else None,
        ):
            prev = done.get(pr.key)
            if prev is not None:
                summary.resumed += 1
                record = prev
            else:
                try:
                    row = curate_pr(pr, idx, cfg, validator)
                except Skip as s:
                    record = {
                        "pr": pr.key,
                        "status": "removed",
                        "reason": s.reason,
                        "detail": s.detail,
                    }
                except gitops.GitError as e:
                    record = {
                        "pr": pr.key,
                        "status": "removed",
                        "reason": "git_error",
                        "detail": str(e),
                    }
                else:
                    fout.write(json.dumps(row, ensure_ascii=False) + "\n")
                    fout.flush()
                    record = {"pr": pr.key, "status": "kept", "instance_id": row["instance_id"]}
                fprog.write(json.dumps(record) + "\n")
                fprog.flush()
            if record["status"] == "kept":
                summary.kept += 1
            else:
                summary.removed[record["reason"]] += 1
    out.with_name(out.name + ".summary.json").write_text(
        json.dumps(summary.to_dict(), indent=2) + "\n"
    )
    return summary
