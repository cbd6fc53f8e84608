"""Overrides of a recipe for what the row's date cannot decide, per repository or per row.

``$SWE_GYM_ENV_OVERRIDES`` names a JSON or YAML file mapping a repository (``owner/name``), a
repository at a version (``owner/name@1.2``) or an instance id to the fields below; the more
specific entry wins field by field (instance over ``repo@version`` over ``repo``). A row's own
``install_config`` may carry ``seed``, ``install_at`` and ``build_constraints`` (they win over
the file; its ``pip_packages`` and ``exclude_newer`` are the recipe's own):

- ``seed``: requirement strings for the seed packages (``pip``, ``setuptools``, ``wheel``) that
  replace the date's pick of that package (``["setuptools<60"]``);
- ``pip_packages``: extra packages, installed after the recipe's and without the date (what
  the sandbox's lack of network makes necessary: ``pydicom-data`` holds the test files
  pydicom's tests would download);
- ``exclude_newer``: the resolution date (``YYYY-MM-DD``) instead of the setup commit's;
- ``install_at``: ``"base"`` (default: the row's ``base_commit``, where SWE-bench's harness
  runs the install step) or ``"setup"`` (``environment_setup_commit``);
- ``build_constraints``: ``false`` lets the install step's build dependencies float (today's).

Anything else is an error naming the accepted fields.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

from swe_gym.errors import SWEGymError

OVERRIDES_ENV = "SWE_GYM_ENV_OVERRIDES"
FIELDS = ("seed", "pip_packages", "exclude_newer", "install_at", "build_constraints")
OWN_FIELDS = ("seed", "install_at", "build_constraints")  # read from a row's install_config
INSTALL_AT = ("base", "setup")


class OverridesError(SWEGymError):
    """The overrides file (or a row's override field) is malformed; the message names it."""


def check(entry: Any, where: str) -> dict[str, Any]:
    """``entry`` as an overrides dict, or OverridesError naming ``where`` and the field."""
    if not isinstance(entry, dict):
        raise OverridesError(f"{where}: expected a mapping of {', '.join(FIELDS)}, got {entry!r}")
    out = {k: v for k, v in entry.items() if k in FIELDS}
    for key in ("seed", "pip_packages"):
        if key in out and not (
            isinstance(out[key], list) and all(isinstance(x, str) for x in out[key])
        ):
            raise OverridesError(f"{where}: {key} must be a list of requirement strings")
    if out.get("install_at", "base") not in INSTALL_AT:
        raise OverridesError(
            f"{where}: install_at={out['install_at']!r}; accepted: {', '.join(INSTALL_AT)}"
        )
    return out


@functools.cache
def _table(path: str) -> dict[str, dict[str, Any]]:
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise OverridesError(f"${OVERRIDES_ENV}={path}: cannot read it: {e}") from None
    if p.suffix in (".yaml", ".yml"):
        import yaml

        data = yaml.safe_load(text)
    else:
        data = json.loads(text)
    if not isinstance(data, dict):
        raise OverridesError(f"${OVERRIDES_ENV}={path}: expected a mapping of entries")
    out = {}
    for name, entry in data.items():
        unknown = sorted(set(entry) - set(FIELDS)) if isinstance(entry, dict) else []
        if unknown:
            raise OverridesError(
                f"${OVERRIDES_ENV}={path}: entry {name!r} has {unknown}; "
                f"accepted: {', '.join(FIELDS)}"
            )
        out[str(name)] = check(entry, f"${OVERRIDES_ENV}={path}: entry {name!r}")
    return out


def overrides_for(
    repo: str, version: str, instance_id: str, own: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The merged overrides of one row (file entries, then the row's ``install_config``)."""
    path = os.environ.get(OVERRIDES_ENV, "")
    table = _table(path) if path else {}
    merged: dict[str, Any] = {}
    for name in (repo, f"{repo}@{version}", instance_id):
        merged.update(table.get(name, {}))
    if own:
        mine = {k: v for k, v in own.items() if k in OWN_FIELDS}
        merged.update(check(mine, f"{instance_id}: install_config"))
    return merged


def clear_cache() -> None:
    _table.cache_clear()


__all__ = ["FIELDS", "OVERRIDES_ENV", "OverridesError", "check", "clear_cache", "overrides_for"]
