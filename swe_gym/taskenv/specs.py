"""swebench's own tables: the install spec and test command per (repo, version), the log
parser per repository. Never our copies.

The parser map is read from the installed ``swebench`` (every ``MAP_REPO_TO_PARSER*`` of
``swebench.harness.log_parsers``, and of ``swebench.harness.constants`` in releases that kept
it there). The per-version spec table (``MAP_REPO_VERSION_TO_SPECS``: python, packages,
pip_packages, pre_install, install, test_cmd, eval env) is read from the installed
``swebench`` when it has one (releases up to 4.x); swebench 5 dropped it (its rows carry an
``eval_script`` and a Dockerfile instead). Point ``$SWE_GYM_SWEBENCH_SPECS`` at a JSON/YAML
file in that table's shape, or at a swebench 4.x wheel or unpacked source tree (read in a
child process, cached in the toolkit cache by the file's hash), to use a release's table.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import os
import pkgutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from swe_gym.errors import SWEGymError
from swe_gym.paths import cache_root

SPECS_ENV = "SWE_GYM_SWEBENCH_SPECS"
_DUMP = (
    "import json, sys; sys.path.insert(0, sys.argv[1]); "
    "from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS as m; "
    "print(json.dumps(m, default=str))"
)


class SpecsError(SWEGymError):
    """``$SWE_GYM_SWEBENCH_SPECS`` names something that holds no spec table."""


def _from_path(path: str) -> dict[str, Any]:
    p = Path(path).expanduser()
    if p.suffix in (".json", ".yaml", ".yml"):
        text = p.read_text(encoding="utf-8")
        if p.suffix == ".json":
            return json.loads(text)
        import yaml

        return yaml.safe_load(text)
    # A swebench release (wheel or source tree): its table, dumped by a child process (its
    # package would clash with the installed swebench in this one), kept by content hash.
    h = hashlib.sha256()
    if p.is_file():
        h.update(p.read_bytes())
    else:
        h.update(Path(p, "swebench/harness/constants/__init__.py").read_bytes())
        h.update(str(p.resolve()).encode())
    out = cache_root() / "swebench_specs" / f"{h.hexdigest()[:16]}.json"
    if out.is_file():
        return json.loads(out.read_text())
    r = subprocess.run(
        [sys.executable, "-c", _DUMP, str(p)], capture_output=True, text=True, timeout=120
    )
    if r.returncode != 0:
        raise SpecsError(
            f"${SPECS_ENV}={path}: no MAP_REPO_VERSION_TO_SPECS there: {r.stderr[-500:]}"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(r.stdout)
    tmp.replace(out)
    return json.loads(r.stdout)


@functools.cache
def _table(source: str) -> tuple[dict[str, Any], str]:
    if source:
        return _from_path(source), f"${SPECS_ENV} ({source})"
    try:
        from swebench.harness import constants
    except ImportError:
        return {}, "none (swebench is not installed)"
    table = getattr(constants, "MAP_REPO_VERSION_TO_SPECS", None)
    if table is None:
        from importlib.metadata import version

        return {}, f"none (swebench {version('swebench')} has no MAP_REPO_VERSION_TO_SPECS)"
    return table, "swebench.harness.constants.MAP_REPO_VERSION_TO_SPECS"


def spec_table() -> tuple[dict[str, Any], str]:
    """(the table, where it came from); an empty table when there is none."""
    return _table(os.environ.get(SPECS_ENV, ""))


def version_spec(repo: str, version: str) -> dict[str, Any] | None:
    """swebench's spec for (repo, version), or None."""
    table, _ = spec_table()
    spec = (table.get(repo) or {}).get(str(version))
    return dict(spec) if spec else None


@functools.cache
def repo_parsers() -> dict[str, str]:
    """repo -> parser name in ``PARSER_REGISTRY``, merged from every ``MAP_REPO_TO_PARSER*``
    table of the installed swebench."""
    from swebench.harness import log_parsers
    from swebench.harness.log_parsers import PARSER_REGISTRY

    by_fn: dict[Callable[..., Any], str] = {}
    for name, fn in PARSER_REGISTRY.items():
        by_fn.setdefault(fn, name)
    by_fn.update(
        {fn: fn.__name__ for fn in PARSER_REGISTRY.values() if fn.__name__ in PARSER_REGISTRY}
    )
    modules = [log_parsers, importlib.import_module("swebench.harness.constants")]
    for info in pkgutil.iter_modules(log_parsers.__path__):
        modules.append(importlib.import_module(f"{log_parsers.__name__}.{info.name}"))
    out: dict[str, str] = {}
    for mod in modules:
        for attr, table in vars(mod).items():
            if attr.startswith("MAP_REPO_TO_PARSER") and isinstance(table, dict):
                for repo, fn in table.items():
                    name = fn if isinstance(fn, str) else by_fn.get(fn)
                    if name is not None and name in PARSER_REGISTRY:
                        out.setdefault(repo, name)
    return out


def clear_caches() -> None:
    """Forget the tables read (tests change ``$SWE_GYM_SWEBENCH_SPECS``)."""
    _table.cache_clear()
    repo_parsers.cache_clear()


__all__ = ["SPECS_ENV", "SpecsError", "clear_caches", "repo_parsers", "spec_table", "version_spec"]
