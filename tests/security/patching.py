"""Hostile patches for the red-team tests: a diff from a task's base commit, made by git."""

from __future__ import annotations

import os
import subprocess

from swe_gym.repos import local_repo


def patch_maker(task, workdir):
    """``make({path: edit})`` -> the git diff from ``task``'s base commit that makes the edits.
    An edit is the new text, None (delete), ``("link", target)`` (a symlink),
    ``("append", text)``, ``("bytes", data)``, or a function of the base text. The work tree is reset after each."""
    wt = workdir / "wt"
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(workdir)}

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=wt, env=env, check=True, capture_output=True, text=True
        ).stdout

    subprocess.run(
        ["git", "clone", "-q", "--no-checkout", str(local_repo(task.repo)), str(wt)], check=True
    )
    git("checkout", "-q", task.base_commit)

    def make(edits: dict) -> str:
        for path, value in edits.items():
            p = wt / path
            p.parent.mkdir(parents=True, exist_ok=True)
            if callable(value):
                p.write_text(value(p.read_text()))
            elif isinstance(value, tuple) and value[0] == "append":
                p.write_text(p.read_text() + value[1])
            elif isinstance(value, tuple) and value[0] == "bytes":
                p.write_bytes(value[1])
            elif value is None or isinstance(value, tuple):  # delete, or replace by a link
                subprocess.run(["rm", "-rf", str(p)], check=True)
                if value is not None:
                    os.symlink(value[1], p)
            else:
                p.write_text(value)
        git("add", "-A", "-f")
        out = git("diff", "--cached", "--binary", task.base_commit)
        git("reset", "-q", "--hard", task.base_commit)
        git("clean", "-qfdx")
        return out

    return make
