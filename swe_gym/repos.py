"""Find a local git repository for a task's ``repo`` (``owner/name``).

Order: the bundled SWEStarter repositories (``swe_gym.starter.repo_path``), then
``repos_dir`` (argument, else the ``SWE_GYM_REPOS`` environment variable) holding clones named
``<owner>__<name>`` (bare or not; ``<owner>__<name>.git`` also accepted), then the toolkit
cache's ``synth_repos`` folder (where ``swe_gym.synth`` writes derived repositories by
default). A row's own ``repos_dir`` field serves when the sandbox is given none. Nothing is
fetched.
"""

from __future__ import annotations

import os
from pathlib import Path

from swe_gym.errors import SandboxUnavailable

REPOS_ENV = "SWE_GYM_REPOS"
SYNTH_REPOS = "synth_repos"  # under the toolkit cache: swe_gym.synth's default output


def repo_dir_name(repo: str) -> str:
    """``"astropy/astropy"`` -> ``"astropy__astropy"`` (the SWE-bench instance-id convention)."""
    return repo.strip("/").replace("/", "__")


def _is_git_repo(path: Path) -> bool:
    if (path / ".git").exists():
        return True
    return (path / "HEAD").is_file() and (path / "objects").is_dir()  # bare


def local_repo(repo: str, repos_dir: str | os.PathLike | None = None) -> Path:
    """Path of a local git repository holding ``repo``'s history.

    Raises:
        SandboxUnavailable: no bundled repository and no clone under ``repos_dir``; the message
            names the repository, where it looked and what to pass.
    """
    try:
        from swe_gym.starter import STARTER_REPOS, repo_path  # lazy: builds on first use
    except ImportError:
        pass
    else:
        if repo in STARTER_REPOS:
            return Path(repo_path(repo))

    base = repos_dir if repos_dir is not None else os.environ.get(REPOS_ENV)
    looked: list[str] = []
    # Then the folder `python -m swe_gym.synth` writes derived repositories to by default.
    for root in [Path(base).expanduser()] if base else []:
        for name in (repo_dir_name(repo), repo_dir_name(repo) + ".git"):
            candidate = root / name
            looked.append(str(candidate))
            if candidate.is_dir() and _is_git_repo(candidate):
                return candidate.resolve()
    from swe_gym.paths import cache_root

    synth = cache_root() / SYNTH_REPOS / repo_dir_name(repo)
    if synth.is_dir() and _is_git_repo(synth):
        return synth.resolve()
    looked.append(str(synth))
    where = (
        f"looked in {', '.join(looked)}" if looked else f"no repos_dir given and ${REPOS_ENV} unset"
    )
    raise SandboxUnavailable(
        f"no local git repository for {repo!r} ({where}). Clone it as "
        f"<repos_dir>/{repo_dir_name(repo)} and pass repos_dir=... (or set ${REPOS_ENV}), "
        "or use backend='docker' with the task's image."
    )


__all__ = ["REPOS_ENV", "local_repo", "repo_dir_name"]
