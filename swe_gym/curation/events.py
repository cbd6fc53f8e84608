"""Read GH Archive event records and aggregate them per pull request and per issue.

GH Archive stores one JSON object per line (``.json.gz`` per hour): ``{"id", "type", "actor":
{"login"}, "repo": {"name": "owner/name"}, "payload": {...}, "created_at"}``. The event types
used here and their payload fields:

- ``PullRequestEvent``: ``payload.action`` (opened/closed/reopened/edited/...), ``payload.number``,
  ``payload.pull_request.{number, title, body, user.login, user.type, merged, merged_at,
  created_at, base.sha, base.ref, head.sha, merge_commit_sha}``.
- ``IssuesEvent``: ``payload.action``, ``payload.issue.{number, title, body, user.login,
  created_at, pull_request?}`` (``pull_request`` present when the "issue" is a PR).
- ``IssueCommentEvent``: ``payload.issue`` as above, ``payload.comment.{body, user.login,
  created_at}``.
- ``PullRequestReviewEvent``: ``payload.pull_request``, ``payload.review.{body, user.login,
  submitted_at, state}``.
- ``PullRequestReviewCommentEvent``: ``payload.pull_request``, ``payload.comment.{body, path,
  user.login, created_at}``.

Bad lines (truncated files, malformed JSON, records missing the fields above) are counted with
their file and line number and skipped; reading never raises on content.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

PR_EVENTS = ("PullRequestEvent", "PullRequestReviewEvent", "PullRequestReviewCommentEvent")
ISSUE_EVENTS = ("IssuesEvent", "IssueCommentEvent")
USED_EVENTS = PR_EVENTS + ISSUE_EVENTS


@dataclass
class Source:
    file: str
    line: int
    type: str

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "type": self.type}


@dataclass
class Comment:
    created_at: str
    user: str
    body: str


@dataclass
class IssueRecord:
    repo: str
    number: int
    title: str = ""
    body: str = ""
    user: str = ""
    created_at: str = ""
    is_pr: bool = False
    comments: list[Comment] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)


@dataclass
class PRRecord:
    repo: str
    number: int
    title: str = ""
    body: str = ""
    user: str = ""
    user_type: str = ""
    created_at: str = ""
    merged: bool = False
    merged_at: str = ""
    base_sha: str = ""
    base_ref: str = ""
    head_sha: str = ""
    merge_commit_sha: str = ""
    review_comments: list[Comment] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.repo}#{self.number}"


@dataclass
class BadLine:
    file: str
    line: int
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "why": self.why}


@dataclass
class EventIndex:
    prs: dict[tuple[str, int], PRRecord] = field(default_factory=dict)
    issues: dict[tuple[str, int], IssueRecord] = field(default_factory=dict)
    bad_lines: list[BadLine] = field(default_factory=list)
    lines_read: int = 0
    events_used: int = 0
    events_ignored: int = 0  # other event types (PushEvent, WatchEvent, ...)


def _lines(path: Path, bad: list[BadLine]) -> Iterator[tuple[int, str]]:
    """(line number, text) of a .jsonl or .jsonl.gz file; a truncated gzip stream ends the file
    with a recorded bad line instead of an exception; undecodable bytes are replaced."""
    raw: io.BufferedIOBase
    if path.suffix == ".gz":
        raw = gzip.open(path, "rb")
    else:
        raw = path.open("rb")
    lineno = 0
    with raw:
        try:
            for lineno, data in enumerate(raw, 1):  # noqa: B007
                yield lineno, data.decode("utf-8", "replace")
        except (EOFError, OSError, zlib.error) as e:
            bad.append(
                BadLine(str(path), lineno + 1, f"unreadable from here on ({type(e).__name__}: {e})")
            )


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _s(v: Any) -> str:
    return v if isinstance(v, str) else ""


def _sha(v: Any) -> str:
    return (
        v
        if isinstance(v, str) and 7 <= len(v) <= 64 and all(c in "0123456789abcdef" for c in v)
        else ""
    )


def _update_pr(rec: PRRecord, pr: dict[str, Any]) -> None:
    """Later events win for fields they carry (edits, the merge), empty values never overwrite."""
    for attr, value in (
        ("title", _s(pr.get("title"))),
        ("body", _s(pr.get("body"))),
        ("user", _s(_get(pr, "user", "login"))),
        ("user_type", _s(_get(pr, "user", "type"))),
        ("created_at", _s(pr.get("created_at"))),
        ("merged_at", _s(pr.get("merged_at"))),
        ("base_sha", _sha(_get(pr, "base", "sha"))),
        ("base_ref", _s(_get(pr, "base", "ref"))),
        ("head_sha", _sha(_get(pr, "head", "sha"))),
        ("merge_commit_sha", _sha(pr.get("merge_commit_sha"))),
    ):
        if value:
            setattr(rec, attr, value)
    if pr.get("merged") is True or (pr.get("merged") is None and rec.merged_at):
        rec.merged = True


def _update_issue(rec: IssueRecord, issue: dict[str, Any]) -> None:
    for attr, value in (
        ("title", _s(issue.get("title"))),
        ("body", _s(issue.get("body"))),
        ("user", _s(_get(issue, "user", "login"))),
        ("created_at", _s(issue.get("created_at"))),
    ):
        if value:
            setattr(rec, attr, value)
    if issue.get("pull_request"):
        rec.is_pr = True


def read_events(paths: Iterable[str | Path], progress: bool | None = None) -> EventIndex:
    """Aggregate every event in ``paths`` into PR and issue records (one pass, in memory)."""
    idx = EventIndex()
    for path in map(Path, paths):
        if not path.is_file():
            raise FileNotFoundError(f"events file {str(path)!r} does not exist")
        bar = tqdm(
            _lines(path, idx.bad_lines),
            desc=f"events {path.name}",
            unit=" lines",
            disable=not progress if progress is not None else None,
        )
        for lineno, text in bar:
            idx.lines_read += 1
            if not text.strip():
                continue
            try:
                ev = json.loads(text)
            except json.JSONDecodeError as e:
                idx.bad_lines.append(BadLine(str(path), lineno, f"malformed JSON ({e.msg})"))
                continue
            why = _ingest(idx, ev, Source(path.name, lineno, _s(_get(ev, "type"))))
            if why:
                idx.bad_lines.append(BadLine(str(path), lineno, why))
    return idx


def _ingest(idx: EventIndex, ev: Any, src: Source) -> str | None:
    """Add one event; return why it is unusable (or None)."""
    if not isinstance(ev, dict):
        return f"not a JSON object ({type(ev).__name__})"
    etype = ev.get("type")
    if etype not in USED_EVENTS:
        if not isinstance(etype, str):
            return "no event type"
        idx.events_ignored += 1
        return None
    repo = _get(ev, "repo", "name")
    payload = ev.get("payload")
    if not isinstance(repo, str) or repo.count("/") != 1 or not isinstance(payload, dict):
        return f"{etype} without repo.name or payload"
    if etype in PR_EVENTS:
        pr = payload.get("pull_request")
        number = _get(pr, "number") or payload.get("number")
        if not isinstance(pr, dict) or not isinstance(number, int):
            return f"{etype} without payload.pull_request.number"
        rec = idx.prs.setdefault((repo, number), PRRecord(repo, number))
        _update_pr(rec, pr)
        rec.sources.append(src)
        comment = (
            payload.get("review") if etype == "PullRequestReviewEvent" else payload.get("comment")
        )
        if isinstance(comment, dict) and _s(comment.get("body")):
            when = _s(comment.get("submitted_at")) or _s(comment.get("created_at"))
            rec.review_comments.append(
                Comment(when, _s(_get(comment, "user", "login")), comment["body"])
            )
    else:
        issue = payload.get("issue")
        if not isinstance(issue, dict) or not isinstance(issue.get("number"), int):
            return f"{etype} without payload.issue.number"
        rec_i = idx.issues.setdefault((repo, issue["number"]), IssueRecord(repo, issue["number"]))
        _update_issue(rec_i, issue)
        rec_i.sources.append(src)
        comment = payload.get("comment")
        if etype == "IssueCommentEvent" and isinstance(comment, dict) and _s(comment.get("body")):
            rec_i.comments.append(
                Comment(
                    _s(comment.get("created_at")),
                    _s(_get(comment, "user", "login")),
                    comment["body"],
                )
            )
    idx.events_used += 1
    return None
