"""Curation on a real git history built in the test, with matching GH Archive event records."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
from pathlib import Path

import pytest

from swe_gym.curation import CurationConfig, curate, is_bot_pr, is_test_path, linked_issue_numbers
from swe_gym.curation.validate import derive_f2p_p2p
from swe_gym.tasks import load_tasks

MIT = "MIT License\n\nPermission is hereby granted, free of charge, to any person obtaining a copy...\n"
CALC = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
TESTS = "from pkg.calc import mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"


def git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@e",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@e",
        "GIT_AUTHOR_DATE": "2024-03-01T00:00:00Z",
        "GIT_COMMITTER_DATE": "2024-03-01T00:00:00Z",
    }
    return subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def write(repo: Path, path: str, text: str | bytes) -> None:
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        (repo / path).write_bytes(text)
    else:
        (repo / path).write_text(text)


def commit(repo: Path, msg: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", msg)
    return git(repo, "rev-parse", "HEAD")


REPO = "acme/calc"


def pr_event(
    number: int,
    title: str,
    body: str,
    user: str,
    base: str,
    head: str,
    merge: str,
    merged: bool = True,
    created: str = "2024-03-02T00:00:00Z",
) -> dict:
    pr = {
        "number": number,
        "title": title,
        "body": body,
        "user": {"login": user, "type": "User"},
        "merged": merged,
        "merged_at": "2024-03-03T00:00:00Z" if merged else None,
        "created_at": created,
        "base": {"sha": base, "ref": "main"},
        "head": {"sha": head, "ref": "x"},
        "merge_commit_sha": merge,
    }
    return {
        "id": str(number),
        "type": "PullRequestEvent",
        "actor": {"login": user},
        "repo": {"name": REPO},
        "payload": {"action": "closed", "number": number, "pull_request": pr},
        "created_at": created,
    }


def issue_event(number: int, title: str, body: str) -> dict:
    return {
        "type": "IssuesEvent",
        "repo": {"name": REPO},
        "created_at": "2024-03-01T00:00:00Z",
        "payload": {
            "action": "opened",
            "issue": {
                "number": number,
                "title": title,
                "body": body,
                "user": {"login": "alice"},
                "created_at": "2024-03-01T00:00:00Z",
            },
        },
    }


def comment_event(number: int, body: str, when: str) -> dict:
    return {
        "type": "IssueCommentEvent",
        "repo": {"name": REPO},
        "payload": {
            "action": "created",
            "issue": {"number": number, "title": "", "body": ""},
            "comment": {"body": body, "user": {"login": "bob"}, "created_at": when},
        },
    }


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> dict:
    """acme/calc with: an issue-fixing PR with tests (merge commit), a bot PR, a huge PR, a PR
    without tests (squash-merged: its head is not in the clone), a PR whose commits are missing,
    a closed-unmerged PR; and the event file describing them (plus broken lines)."""
    root = tmp_path_factory.mktemp("curation")
    repos = root / "repos"
    repo = repos / "acme__calc"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    write(repo, "LICENSE", MIT)
    write(repo, "pkg/__init__.py", "")
    write(repo, "pkg/calc.py", CALC)
    write(repo, "pkg/strings.py", "def shout(s):\n    return s.upper()\n")
    write(
        repo, "pkg/adder_docs.py", "# notes about add and adding numbers: add(a, b) returns a + b\n"
    )
    write(repo, "tests/test_calc.py", TESTS)
    write(repo, "requirements.txt", "requests==2.0\n")
    base = commit(repo, "init")
    # PR 2 (fixes #1): a branch with two commits, fix + tests, merged with a merge commit
    git(repo, "checkout", "-qb", "fix-add")
    write(repo, "pkg/calc.py", CALC.replace("a - b", "a + b"))
    commit(repo, "fix add")
    write(
        repo,
        "tests/test_calc.py",
        TESTS.replace("import mul", "import add, mul")
        + "\n\ndef test_add():\n    assert add(2, 2) == 4\n",
    )
    write(repo, "tests/data/blob.bin", b"\x00\x01\x02binary")
    head2 = commit(repo, "test add")
    git(repo, "checkout", "-q", "main")
    # main moves on meanwhile (must not leak into PR 2's patch)
    write(repo, "README.md", "calc\n")
    main_moved = commit(repo, "readme")
    git(repo, "merge", "-q", "--no-ff", "fix-add", "-m", "Merge pull request #2")
    merge2 = git(repo, "rev-parse", "HEAD")
    # PR 3: dependabot bump
    write(repo, "requirements.txt", "requests==2.1\n")
    merge3 = commit(repo, "Bump requests from 2.0 to 2.1")
    # PR 4: huge change (closes #5)
    write(repo, "pkg/big.py", "".join(f"X{i} = {i}\n" for i in range(3000)))
    merge4 = commit(repo, "add table")
    # PR 6: no tests (squash) fixes #7
    before6 = merge4
    write(repo, "pkg/calc.py", CALC.replace("a - b", "a + b").replace("a * b", "a * b  # product"))
    merge6 = commit(repo, "mul comment (#6)")
    expected2 = {
        "base": base,
        "patch": git(repo, "diff", "--binary", "--full-index", base, head2, "--", "pkg/calc.py")
        + "\n",
        "test_patch": git(
            repo,
            "diff",
            "--binary",
            "--full-index",
            base,
            head2,
            "--",
            "tests/data/blob.bin",
            "tests/test_calc.py",
        )
        + "\n",
    }
    expected6 = {
        "base": before6,
        "patch": git(repo, "diff", "--binary", "--full-index", before6, merge6) + "\n",
    }
    events = [
        issue_event(1, "add() subtracts", "add(2, 2) returns 0; the add function should add."),
        comment_event(1, "confirmed, add is broken", "2024-03-01T12:00:00Z"),
        comment_event(1, "written after the PR: not a hint", "2024-03-05T00:00:00Z"),
        pr_event(2, "Fix add", "Fixes #1. Also see #77.", "carol", base, head2, merge2),
        pr_event(
            3,
            "Bump requests from 2.0 to 2.1",
            "Closes #1",
            "dependabot[bot]",
            merge2,
            merge3,
            merge3,
        ),
        issue_event(5, "need a table", "please add a lookup table"),
        pr_event(4, "Add table", "closes #5", "dave", merge3, "f" * 40, merge4),
        issue_event(7, "mul is unclear", "document mul"),
        pr_event(6, "Document mul", "resolves acme/calc#7", "erin", before6, "e" * 40, merge6),
        issue_event(9, "another", "bug"),
        pr_event(8, "Lost PR", "fixes #9", "frank", "a" * 40, "b" * 40, "c" * 40),
        pr_event(10, "Abandoned", "fixes #1", "gina", base, head2, "", merged=False),
        {"type": "WatchEvent", "repo": {"name": REPO}, "payload": {"action": "started"}},
    ]
    lines = [json.dumps(e) for e in events]
    lines.insert(
        3, '{"type": "PullRequestEvent", "repo": {"name": "acme/calc"}, "payl'
    )  # truncated
    lines.insert(5, "[1, 2, 3]")
    lines.insert(7, json.dumps({"type": "IssuesEvent", "repo": {"name": REPO}, "payload": {}}))
    ev = root / "events.jsonl"
    ev.write_text("\n".join(lines) + "\n")
    return {
        "root": root,
        "repos": repos,
        "events": ev,
        "pr2": expected2,
        "pr6": expected6,
        "main_moved": main_moved,
    }


def run(history: dict, tmp_path: Path, **kw) -> tuple[list[dict], dict]:
    out = tmp_path / "out.jsonl"
    cfg = CurationConfig(
        events=[history["events"]], repos_dir=history["repos"], out=out, progress=False, **kw
    )
    summary = curate(cfg)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    return rows, summary.to_dict()


def test_curation_keeps_the_right_rows_with_the_right_patches(history, tmp_path) -> None:
    rows, summary = run(history, tmp_path, max_changed_lines=1000)
    assert [r["instance_id"] for r in rows] == ["acme__calc-2", "acme__calc-6"]
    r2, r6 = rows
    assert r2["base_commit"] == history["pr2"]["base"]
    assert r2["patch"] == history["pr2"]["patch"]
    assert r2["test_patch"] == history["pr2"]["test_patch"]
    assert "README.md" not in r2["patch"] + r2["test_patch"]  # main's own progress stays out
    assert (
        r2["problem_statement"]
        == "add() subtracts\nadd(2, 2) returns 0; the add function should add."
    )
    assert r2["hints_text"] == "confirmed, add is broken"
    assert r2["license_name"] == "MIT"
    assert r2["meta"]["binary_files"] == ["tests/data/blob.bin"]
    assert "GIT binary patch" in r2["test_patch"]
    assert r2["meta"]["linked_issues"] == [1]
    assert r2["meta"]["provenance"]["pr"] == "acme/calc#2"
    assert {"file": "events.jsonl", "line": 5, "type": "PullRequestEvent"} in r2["meta"][
        "provenance"
    ]["events"]
    # relevant-but-unmodified files come from the selector, never the modified file itself
    assert r2["meta"]["relevant_files"] and "pkg/calc.py" not in r2["meta"]["relevant_files"]
    assert r2["meta"]["relevant_files"][0] == "pkg/adder_docs.py"
    assert r6["base_commit"] == history["pr6"]["base"]
    assert r6["patch"] == history["pr6"]["patch"]
    assert r6["test_patch"] == "" and r6["meta"]["provenance"]["change_located_by"] == "squash"
    assert summary["merged_prs"] == 5
    assert summary["removed"] == {"bot": 1, "huge_change": 1, "missing_commits": 1}
    assert summary["kept"] == 2
    assert summary["bad_event_lines"] == 3
    assert {b["line"] for b in summary["bad_event_examples"]} == {4, 6, 8}


def test_require_tests_and_other_filters(history, tmp_path) -> None:
    rows, summary = run(history, tmp_path, require_tests=True, max_changed_lines=1000)
    assert [r["instance_id"] for r in rows] == ["acme__calc-2"]
    assert summary["removed"]["no_test_change"] == 1
    rows, summary = run(history, tmp_path / "b", licence_allow=["Apache-2.0"])
    assert rows == [] and summary["removed"]["licence"] == 3  # PRs 2, 4, 6 (checked before size)
    rows, summary = run(history, tmp_path / "c", exclude_repos=["ACME/calc"])
    assert rows == [] and summary["removed"] == {"excluded_repo": 5}
    rows, summary = run(history, tmp_path / "d", created_after="2024-03-02")
    assert rows == [] and summary["removed"] == {"created_before_cutoff": 5}
    rows, summary = run(history, tmp_path / "e", max_changed_lines=10_000)
    assert [r["instance_id"] for r in rows] == ["acme__calc-2", "acme__calc-4", "acme__calc-6"]


def test_resume_after_a_kill_mid_row(history, tmp_path) -> None:
    rows, _ = run(history, tmp_path, max_changed_lines=1000)
    out = tmp_path / "out.jsonl"
    progress = tmp_path / "out.jsonl.progress.jsonl"
    # Simulate a kill while writing the second row: half a line, and no progress records after
    # the first row.
    text = out.read_text().splitlines(keepends=True)
    out.write_text(text[0] + text[1][: len(text[1]) // 2])
    prog = progress.read_text().splitlines(keepends=True)
    first_kept = next(i for i, line in enumerate(prog) if '"kept"' in line)
    progress.write_text("".join(prog[:first_kept]))  # even the first row's record was lost
    rows2, summary = run(history, tmp_path, max_changed_lines=1000)
    assert rows2 == rows
    assert summary["kept"] == 2 and summary["resumed"] >= 1
    rows3, summary3 = run(history, tmp_path, max_changed_lines=1000)  # nothing left to do
    assert rows3 == rows and summary3["resumed"] == 5


def test_gzip_events_and_a_truncated_gzip(history, tmp_path) -> None:
    data = history["events"].read_bytes()
    good = tmp_path / "ev.json.gz"
    good.write_bytes(gzip.compress(data))
    rows, _ = run({**history, "events": good}, tmp_path / "a", max_changed_lines=1000)
    assert len(rows) == 2
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(data)[: len(gzip.compress(data)) // 2])
    rows, summary = run({**history, "events": cut}, tmp_path / "b", max_changed_lines=1000)
    assert any("unreadable" in b["why"] for b in summary["bad_event_examples"])


def test_non_utf8_file_is_skipped_with_reason(tmp_path) -> None:
    repos = tmp_path / "repos"
    repo = repos / "acme__calc"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    write(repo, "pkg/latin.py", "x = 1\n")
    base = commit(repo, "init")
    write(repo, "pkg/latin.py", b"x = '\xe9t\xe9'\n")
    tip = commit(repo, "latin-1")
    ev = tmp_path / "ev.jsonl"
    ev.write_text(
        "\n".join(
            json.dumps(e)
            for e in [
                issue_event(1, "accents", "use the accented word"),
                pr_event(2, "accents", "fixes #1", "z", base, tip, tip),
            ]
        )
        + "\n"
    )
    rows, summary = run({"events": ev, "repos": repos}, tmp_path)
    assert rows == [] and summary["removed"] == {"non_utf8_patch": 1}


def test_rules() -> None:
    assert linked_issue_numbers(
        "Fixes #12, closes acme/calc#13; see #14 and other/repo#15", "acme/calc", 99
    ) == ([12, 13], [14])
    assert linked_issue_numbers("resolves https://github.com/acme/calc/issues/3", "acme/calc") == (
        [3],
        [],
    )
    assert linked_issue_numbers("PR #5 is me", "acme/calc", 5) == ([], [])
    assert is_bot_pr("Bump x", "someone")
    assert is_bot_pr("fix", "renovate-bot")
    assert is_bot_pr("fix", "github-actions[bot]")
    assert not is_bot_pr("Fix parser", "alice")
    for p in [
        "tests/test_a.py",
        "pkg/tests/x.py",
        "test_a.py",
        "a_test.go",
        "conftest.py",
        "src/a.spec.ts",
        "FooTest.java",
    ]:
        assert is_test_path(p), p
    for p in ["pkg/a.py", "src/testing_utils_x.py", "contest.py", "pkg/latest.py"]:
        assert not is_test_path(p), p


def test_derive_f2p_p2p_rule() -> None:
    before = {"a": "FAILED", "b": "PASSED", "c": "PASSED", "e": "XFAIL"}
    after = {"a": "PASSED", "b": "PASSED", "c": "FAILED", "d": "PASSED", "e": "XFAIL"}
    assert derive_f2p_p2p(before, after) == (["a", "d"], ["b", "e"])


def test_validated_rows_load_with_load_tasks(history, tmp_path) -> None:
    """--validate local: runs the tests before/after in the local sandbox, derives F2P/P2P."""
    install = {
        REPO: {
            "test_cmd": "python -m pytest -rA -p no:cacheprovider",
            "log_parser": "parse_log_pytest",
        }
    }
    rows, summary = run(
        history, tmp_path, max_changed_lines=1000, validate="local", install_configs=install
    )
    assert [r["instance_id"] for r in rows] == ["acme__calc-2"]
    assert rows[0]["FAIL_TO_PASS"] == ["tests/test_calc.py::test_add"]
    assert rows[0]["PASS_TO_PASS"] == ["tests/test_calc.py::test_mul"]
    assert summary["removed"]["validation:no_test_patch"] == 1
    tasks = load_tasks(tmp_path / "out.jsonl")
    assert tasks[0].FAIL_TO_PASS == ["tests/test_calc.py::test_add"]
