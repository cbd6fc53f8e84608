"""Config machinery shared by the entry points: flat dataclasses -> ``--help``, YAML, CLI.

Each algorithm has ONE flat dataclass (``RFTConfig``, ``GRPOConfig``, ``DAPOConfig``; the run-level
fields they share come from :class:`algos.config.run.RunConfig`). The docstring string under a
field is its ``--help`` text (read from the class source, so the code is the documentation).
Values are resolved in this order, later wins::

    dataclass defaults < --preset / --stage YAML < --config FILE.yaml < --resume RUN_DIR's
    saved config < command-line flags (--lr 1e-6)

Validation lives in each class's ``__post_init__`` and runs before any work, with messages that
say what to set.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import json
import textwrap
import types
import typing
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from swe_gym.errors import unknown_choice

C = TypeVar("C")

PRESET_DIR = Path(__file__).parents[1] / "presets"
CONFIG_FILE = "config.yaml"  # the resolved config, written into every run directory


class ConfigError(ValueError):
    """A config value is wrong or contradicts another; raised before any work is done."""


# ------------------------------------------------------------------------------------------
# Field docstrings
# ------------------------------------------------------------------------------------------


def field_docs(cls: type) -> dict[str, str]:
    """``{field: docstring}`` from the string literal right under each field in the class body
    (base classes first, so a subclass's redefinition wins)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        body = ast.parse(source).body[0].body  # type: ignore[attr-defined]
        for node, nxt in zip(body, body[1:] + [None], strict=True):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


# ------------------------------------------------------------------------------------------
# Types: parse CLI strings and YAML values into the field's type
# ------------------------------------------------------------------------------------------


def _resolved_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def coerce(name: str, tp: Any, value: Any) -> Any:
    """``value`` (a CLI string or a YAML value) as type ``tp``; a clear error otherwise."""
    inner, optional = _strip_optional(tp)
    if value is None or (optional and isinstance(value, str) and value.lower() in ("none", "null")):
        if optional or value is None:
            return None
    origin = typing.get_origin(inner)
    try:
        if inner is bool:
            if isinstance(value, bool):
                return value
            text = str(value).lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError("expected true/false")
        if inner is int:
            if isinstance(value, bool):
                raise ValueError("expected an integer")
            if isinstance(value, float) and not value.is_integer():
                raise ValueError("expected an integer")
            return (
                int(float(value)) if isinstance(value, str) and "e" in value.lower() else int(value)
            )
        if inner is float:
            return float(value)
        if inner is str:
            return str(value)
        if origin in (list, tuple) or inner in (list, tuple):
            if isinstance(value, str):
                text = value.strip()
                value = (
                    json.loads(text)
                    if text.startswith("[")
                    else [v.strip() for v in text.split(",") if v.strip()]
                )
            args = typing.get_args(inner)
            item = args[0] if args else Any
            items = [v if item is Any else coerce(name, item, v) for v in value]
            return tuple(items) if origin is tuple or inner is tuple else items
        if origin is dict or inner is dict:
            if isinstance(value, str):
                value = json.loads(value)
            if not isinstance(value, dict):
                raise ValueError("expected a mapping (JSON object on the command line)")
            return dict(value)
    except (ValueError, TypeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{name}: cannot read {value!r} as {_type_name(tp)} ({e})") from None
    return value


def _type_name(tp: Any) -> str:
    inner, optional = _strip_optional(tp)
    name = getattr(inner, "__name__", str(inner)).replace("typing.", "")
    if typing.get_origin(inner) is list:
        name = "list (comma-separated or JSON)"
    elif typing.get_origin(inner) is dict or inner is dict:
        name = "JSON object"
    return f"{name} or none" if optional else name


# ------------------------------------------------------------------------------------------
# Building a config from layers
# ------------------------------------------------------------------------------------------


def load_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of field: value, got {type(data).__name__}")
    return data


def _check_keys(cls: type, values: dict[str, Any], where: str) -> None:
    names = {f.name for f in dataclasses.fields(cls)}
    for key in values:
        if key not in names:
            raise unknown_choice(f"{cls.__name__} field (in {where})", key, sorted(names))


def build_config(cls: type[C], *layers: tuple[str, dict[str, Any]]) -> C:
    """``cls(**merged layers)``; each layer is ``(where it came from, {field: value})``."""
    hints = _resolved_types(cls)
    merged: dict[str, Any] = {}
    for where, values in layers:
        _check_keys(cls, values, where)
        for key, value in values.items():
            merged[key] = coerce(key, hints[key], value)
    return cls(**merged)


def to_dict(config: Any) -> dict[str, Any]:
    """Plain values (tuples as lists), ready for YAML/JSON."""
    out = dataclasses.asdict(config)
    return json.loads(json.dumps(out, default=str))


def save_config(config: Any, run_dir: str | Path) -> Path:
    path = Path(run_dir) / CONFIG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(to_dict(config), sort_keys=False), encoding="utf-8")
    return path


def available_presets(prefix: str) -> dict[str, Path]:
    """``{name: file}`` of ``presets/<prefix>_<name>.yaml``."""
    return {p.stem[len(prefix) + 1 :]: p for p in sorted(PRESET_DIR.glob(f"{prefix}_*.yaml"))}


def build_parser(
    cls: type, prog: str, description: str, prefix: str, stages: bool = False
) -> argparse.ArgumentParser:
    """One ``--flag`` per field (help = the field docstring), plus --config/--preset/--resume."""
    p = argparse.ArgumentParser(
        prog=prog,
        description=description,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    presets = available_presets(prefix)
    p.add_argument("--config", metavar="FILE.yaml", help="YAML file of field: value")
    p.add_argument(
        "--preset",
        choices=sorted(presets) or None,
        help=f"a bundled preset (algos/presets/{prefix}_<name>.yaml)",
    )
    if stages:
        p.add_argument(
            "--stage",
            type=int,
            choices=[1, 2],
            help="Nebius stage preset (same as --preset stage1/stage2)",
        )
    p.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue the run in RUN_DIR (its saved config; flags still override)",
    )
    docs = field_docs(cls)
    hints = _resolved_types(cls)
    for f in dataclasses.fields(cls):
        if not f.init or f.name == "resume":  # set by --resume RUN_DIR
            continue
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else (f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        )
        flag: dict[str, Any] = {}
        if _strip_optional(hints[f.name])[0] is bool:  # a bare --verbose means --verbose true
            flag = {"nargs": "?", "const": "true"}
        p.add_argument(
            "--" + f.name.replace("_", "-"),
            dest=f.name,
            default=argparse.SUPPRESS,
            metavar=_type_name(hints[f.name]).split(" ")[0].upper(),
            help=f"{docs.get(f.name, '')} (default: {default!r})".replace("%", "%%"),
            **flag,
        )
    return p


def parse_config(
    cls: type[C],
    argv: Sequence[str] | None,
    *,
    prog: str,
    description: str,
    prefix: str,
    stages: bool = False,
) -> C:
    """Parse the command line into ``cls`` (see the module docstring for the layer order)."""
    parser = build_parser(cls, prog, description, prefix, stages)
    args = vars(parser.parse_args(argv))
    layers: list[tuple[str, dict[str, Any]]] = []
    presets = available_presets(prefix)
    preset = args.pop("preset", None)
    stage = args.pop("stage", None)
    if stage is not None:
        if preset is not None:
            raise ConfigError(
                f"give --stage or --preset, not both (got --stage {stage} --preset {preset})"
            )
        preset = f"stage{stage}"
    if preset is not None:
        if preset not in presets:
            raise unknown_choice("preset", preset, presets)
        layers.append((f"preset {preset}", load_yaml(presets[preset])))
    config_file = args.pop("config", None)
    if config_file:
        layers.append((str(config_file), load_yaml(config_file)))
    resume = args.pop("resume", None)
    if resume:
        saved = Path(resume) / CONFIG_FILE
        if not saved.is_file():
            raise ConfigError(
                f"--resume {resume}: no {CONFIG_FILE} there; is it a run directory "
                f"written by {prog}?"
            )
        layers.append((str(saved), load_yaml(saved)))
    layers.append(("command line", args))
    if resume:
        layers.append(("--resume", {"run_dir": str(resume), "resume": True}))
    return build_config(cls, *layers)


def warn(message: str) -> None:
    """A config warning (shown once, before any work)."""
    warnings.warn(message, UserWarning, stacklevel=3)


def require_at_least(config: Any, low: int, *names: str) -> None:
    """Each named field of ``config`` must be >= ``low``; the first that is not is named with
    its value (every config's counts and sizes are checked this one way)."""
    for name in names:
        if getattr(config, name) < low:
            raise ConfigError(f"{name} must be >= {low}; got {getattr(config, name)}")
