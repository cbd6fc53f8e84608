"""Remove sandbox containers left behind (crashed runs, killed trainers).

Every ``DockerSandbox`` container carries the labels ``owner`` (``swe-gym``),
``swe-gym.run``, ``swe-gym.episode``, ``swe-gym.task`` and ``swe-gym.started`` (unix seconds);
a fork's children also ``swe-gym.parent``. A fork's temporary images (``swe-gym.fork-image``)
go with the containers: those no container uses any more are removed after them.

    python -m swe_gym.reap                      # every container owned by swe-gym
    python -m swe_gym.reap --older-than 1h      # only those started more than an hour ago
    python -m swe_gym.reap --run-id RUN --dry-run
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

from swe_gym.errors import SWEGymError

LABEL_OWNER = "owner"
LABEL_RUN = "swe-gym.run"
LABEL_EPISODE = "swe-gym.episode"
LABEL_TASK = "swe-gym.task"
LABEL_STARTED = "swe-gym.started"
LABEL_PARENT = "swe-gym.parent"  # a fork's child: its parent's episode id
LABEL_FORK_IMAGE = "swe-gym.fork-image"  # a fork's temporary image (``docker commit``)
OWNER = "swe-gym"

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``1h``, ``2d``, ``1h30m`` -> seconds."""
    s = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", s):
        return float(s)
    parts = re.findall(r"(\d+(?:\.\d+)?)([smhd])", s)
    if not parts or "".join(n + u for n, u in parts) != s:
        raise ValueError(
            f"bad duration {text!r}; accepted: seconds or e.g. 90s, 15m, 1h, 2d, 1h30m"
        )
    return sum(float(n) * _UNITS[u] for n, u in parts)


def find(
    client: Any = None,
    *,
    owner: str = OWNER,
    older_than_s: float | None = None,
    run_id: str | None = None,
) -> list[Any]:
    """Containers (running or not) with these labels, optionally started before now - older_than_s."""
    from swe_gym.docker_daemon import get_client

    client = client or get_client()
    labels = [f"{LABEL_OWNER}={owner}"]
    if run_id is not None:
        labels.append(f"{LABEL_RUN}={run_id}")
    found = client.containers.list(all=True, filters={"label": labels}, sparse=True)
    if older_than_s is None:
        return found
    cutoff = time.time() - older_than_s
    out = []
    for c in found:
        try:
            # A sparse list entry has its labels in attrs["Labels"] (c.labels needs a reload).
            started = float((c.attrs.get("Labels") or {}).get(LABEL_STARTED, "nan"))
        except ValueError:
            started = float("nan")
        # A container without a start label is reaped only when no age filter is asked for.
        if started == started and started <= cutoff:
            out.append(c)
    return out


def reap(
    owner: str = OWNER,
    older_than_s: float | None = None,
    run_id: str | None = None,
    *,
    client: Any = None,
    dry_run: bool = False,
) -> int:
    """Force-remove the matching containers; returns how many were removed (or would be)."""
    import docker.errors

    removed = 0
    for c in find(client, owner=owner, older_than_s=older_than_s, run_id=run_id):
        if dry_run:
            removed += 1
            continue
        try:
            c.remove(force=True)
            removed += 1
        except docker.errors.NotFound:
            pass  # someone else removed it first (a concurrent close or reap)
        except docker.errors.APIError as e:
            if "already in progress" not in str(e):
                raise
    if not dry_run:
        reap_fork_images(owner, run_id, client=client)
    return removed


def reap_fork_images(owner: str = OWNER, run_id: str | None = None, *, client: Any = None) -> int:
    """Remove fork images (``swe-gym.fork-image``) no container uses; returns how many."""
    import docker.errors

    from swe_gym.docker_daemon import get_client

    client = client or get_client()
    labels = [f"{LABEL_OWNER}={owner}", LABEL_FORK_IMAGE]
    if run_id is not None:
        labels.append(f"{LABEL_RUN}={run_id}")
    removed = 0
    for img in client.images.list(filters={"label": labels}):
        try:
            client.api.remove_image(img.id)
            removed += 1
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError:
            pass  # still in use (a live fork's children): theirs to remove
    return removed


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m swe_gym.reap", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--older-than", default=None, help="only containers older than this (90s, 15m, 1h, 2d)"
    )
    p.add_argument("--run-id", default=None, help="only this run's containers (label swe-gym.run)")
    p.add_argument("--owner", default=OWNER, help="owner label (default: %(default)s)")
    p.add_argument("--dry-run", action="store_true", help="count, do not remove")
    args = p.parse_args(argv)
    try:
        older = parse_duration(args.older_than) if args.older_than else None
    except ValueError as e:
        p.error(str(e))
    try:
        n = reap(args.owner, older, args.run_id, dry_run=args.dry_run)
    except SWEGymError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{'would remove' if args.dry_run else 'removed'} {n} container(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
