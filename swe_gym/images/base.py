"""The base image ``swe-gym/base:<suite>``: debootstrap from this machine's apt mirror, then
``docker import`` of the cached root tarball."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from swe_gym.images.common import (
    DEFAULT_SUITE,
    LABEL_OWNER,
    BuildError,
    ImageError,
    base_tag,
    image_exists,
    short_hash,
    tag_lock,
    tail_lines,
)
from swe_gym.paths import cache_root

log = logging.getLogger(__name__)

# What every task image needs: the test runner, the patch tools, pip (for recipes), procps (ps,
# kill for timeouts), setuptools/wheel so `pip install -e .` works offline without build isolation.
BASE_PACKAGES: tuple[str, ...] = (
    "python3",
    "python3-pytest",
    "python3-pip",
    "python3-setuptools",
    "python3-wheel",
    "git",
    "patch",
    "procps",
    "ca-certificates",
)


def cache_dir() -> Path:
    """The toolkit cache (``swe_gym.paths.cache_root``): ``$SWE_GYM_CACHE`` or ``~/.cache/swe_gym``."""
    return cache_root()


# --------------------------------------------------------------------------------- apt sources


def apt_mirror(suite: str = DEFAULT_SUITE, sources_dir: str | os.PathLike = "/etc/apt") -> str:
    """The Debian mirror URI this machine's apt sources use for ``suite`` (or any Debian one)."""
    root = Path(sources_dir)
    entries: list[tuple[list[str], list[str]]] = []  # (uris, suites)
    files = [root / "sources.list"] + sorted((root / "sources.list.d").glob("*"))
    for f in files:
        if not f.is_file():
            continue
        text = f.read_text(errors="replace")
        if f.suffix == ".sources":
            for para in re.split(r"\n\s*\n", text):
                fields: dict[str, str] = {}
                for line in para.splitlines():
                    if line.startswith("#") or ":" not in line:
                        continue
                    k, _, v = line.partition(":")
                    fields[k.strip().lower()] = v.strip()
                if (
                    "deb" in fields.get("types", "").split()
                    and fields.get("enabled", "yes") != "no"
                ):
                    entries.append(
                        (fields.get("uris", "").split(), fields.get("suites", "").split())
                    )
        elif f.suffix == ".list":
            for line in text.splitlines():
                parts = line.split("#", 1)[0].split()
                if len(parts) >= 3 and parts[0] == "deb":
                    parts = [p for p in parts if not p.startswith("[")] if "[" in line else parts
                    entries.append(([parts[1]], [parts[2]]))
    for uris, suites in entries:
        if suite in suites and uris:
            return uris[0]
    for uris, _ in entries:  # another suite, but a Debian archive: debootstrap only needs the pool
        for uri in uris:
            if uri.rstrip("/").endswith("/debian"):
                return uri
    raise ImageError(
        f"no Debian mirror for suite {suite!r} in {root}/sources.list(.d); add one, or import a "
        f"root filesystem yourself: tar -C DIR -c . | docker import - {base_tag(suite)}"
    )


# ---------------------------------------------------------------------------------- base image


def build_base(
    client: Any = None,
    *,
    suite: str = DEFAULT_SUITE,
    tag: str | None = None,
    packages: Sequence[str] = BASE_PACKAGES,
    rebuild: bool = False,
    mirror: str | None = None,
) -> str:
    """Make the base image (debootstrap -> cached tarball -> ``docker import``); returns its tag."""
    from swe_gym.docker_daemon import get_client

    client = client or get_client()
    tag = tag or base_tag(suite)
    with tag_lock(tag):
        if not rebuild and image_exists(client, tag):
            return tag
        cache = cache_dir() / "images"
        cache.mkdir(parents=True, exist_ok=True)
        tarball = cache / f"base-{suite}-{short_hash(sorted(packages), 10)}.tar"
        if rebuild or not tarball.exists():
            _debootstrap(suite, packages, mirror or apt_mirror(suite), tarball)
        log.info("importing %s as %s", tarball, tag)
        repo, _, ver = tag.rpartition(":") if ":" in tag.split("/")[-1] else (tag, "", "latest")
        client.api.import_image_from_file(
            str(tarball),
            repository=repo,
            tag=ver,
            changes=[
                "ENV LANG=C.UTF-8",
                "ENV PIP_BREAK_SYSTEM_PACKAGES=1",  # Debian marks its python externally managed
                "ENV PIP_DISABLE_PIP_VERSION_CHECK=1",
                "ENV PYTHONDONTWRITEBYTECODE=1",
                f"LABEL owner={LABEL_OWNER} swe-gym.layer=base swe-gym.suite={suite}",
                'CMD ["/bin/bash"]',
            ],
        )
        if not image_exists(client, tag):
            raise ImageError(f"docker import of {tarball} did not produce {tag!r}")
        return tag


def _debootstrap(suite: str, packages: Sequence[str], mirror: str, tarball: Path) -> None:
    if shutil.which("debootstrap") is None:
        raise ImageError("debootstrap not found; install it (Debian: apt-get install debootstrap)")
    work = Path(tempfile.mkdtemp(prefix="base-", dir=tarball.parent))
    rootfs = work / "rootfs"
    log_path = work / "debootstrap.log"
    cmd = [
        "debootstrap",
        "--variant=minbase",
        f"--include={','.join(packages)}",
        suite,
        str(rootfs),
        mirror,
    ]
    log.info("running %s (about a minute)", " ".join(cmd))
    try:
        with log_path.open("wb") as out:
            rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=1800).returncode
        if rc != 0:
            raise BuildError(
                base_tag(suite),
                tail_lines(log_path.read_text(errors="replace")),
                f"debootstrap exit {rc}",
            )
        # Package caches are dead weight in every image built from this one.
        for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for p in (rootfs / sub).glob("*"):
                if p.is_file():
                    p.unlink()
        part = tarball.with_suffix(".part")
        subprocess.run(
            ["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(part), "."],
            check=True,
            timeout=600,
        )
        part.replace(tarball)
    finally:
        shutil.rmtree(work, ignore_errors=True)
