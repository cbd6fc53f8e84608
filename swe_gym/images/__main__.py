"""``python -m swe_gym.images base|build|resolve``: the base image, every task's image, or the
name each task would use."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterable, Sequence

from swe_gym.errors import SWEGymError
from swe_gym.images.base import build_base
from swe_gym.images.build import build_instance
from swe_gym.images.common import DEFAULT_SUITE, ImageError
from swe_gym.images.resolve import PULL_POLICIES, ensure_image
from swe_gym.tasks import Task


def _load(source: str, ids: Iterable[str] | None) -> list[Task]:
    from swe_gym.tasks import load_tasks

    return load_tasks(source, instance_ids=list(ids) if ids else None)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m swe_gym.images",
        description=(
            'Docker images for swe_gym tasks. Start the daemon first: eval "$(.ci/docker-up.sh)". '
            "'base' makes the Debian base image (debootstrap from this machine's apt mirror, about "
            "a minute the first time, seconds from the cached tarball); 'build' resolves or builds "
            "every task's image; 'resolve' prints the image each task would use."
        ),
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("base", help="build the base image swe-gym/base:<suite>")
    b.add_argument("--suite", default=DEFAULT_SUITE, help="Debian suite (default: %(default)s)")
    b.add_argument("--tag", default=None, help="image tag (default: swe-gym/base:<suite>)")
    b.add_argument("--rebuild", action="store_true", help="re-run debootstrap even if cached")
    b.add_argument("--mirror", default=None, help="Debian mirror URI (default: from apt sources)")
    for name in ("build", "resolve"):
        p = sub.add_parser(name, help=f"{name} the image of each task")
        p.add_argument(
            "--tasks", default="starter", help="task source for load_tasks (default: starter)"
        )
        p.add_argument("--ids", nargs="*", default=None, help="only these instance ids")
        p.add_argument("--pull-policy", default="if-missing", choices=PULL_POLICIES)
        if name == "build":
            p.add_argument("--network", default=None, help="build network: none (default) or host")
            p.add_argument("--rebuild", action="store_true", help="rebuild env and instance images")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        if args.cmd == "base":
            print(
                build_base(suite=args.suite, tag=args.tag, rebuild=args.rebuild, mirror=args.mirror)
            )
            return 0
        tasks = _load(args.tasks, args.ids)
        failed = 0
        for t in tasks:
            try:
                if args.cmd == "resolve":
                    name = ensure_image(t, pull_policy=args.pull_policy, build=False)
                elif args.rebuild:
                    name = build_instance(t, build_network=args.network, rebuild=True)
                else:
                    name = ensure_image(t, pull_policy=args.pull_policy, build_network=args.network)
                print(f"{t.instance_id}\t{name}")
            except ImageError as e:
                failed += 1
                print(f"{t.instance_id}\tERROR {e}", file=sys.stderr)
        return 1 if failed else 0
    except SWEGymError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
