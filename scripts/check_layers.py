"""Check that no module imports a layer above its own (run by scripts/lint.sh).

The layers are read from ARCHITECTURE.md, from the fenced ``layers`` block under "## Layers"
(written down once, there): one line per layer, lowest first, each holding one or more dotted
package names. A module belongs to the layer of the longest package name its own name starts
with; it may import its own layer and those below. Every import counts, also the lazy ones
inside functions and those under ``if TYPE_CHECKING:`` (they name a dependency all the same).
Only the packages of the layers are checked: tests/, benchmarks/, examples/ and scripts/ may
import anything.

    python scripts/check_layers.py          # exit 1 and one line per upward import
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "ARCHITECTURE.md"
BLOCK = re.compile(r"^## Layers\n.*?^```layers\n(.*?)^```", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Violation:
    path: Path
    line: int
    module: str
    imported: str
    own: str  # the importing module's layer (its package name in the spec)
    above: str  # the imported module's layer

    def __str__(self) -> str:
        where = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return (
            f"{where}:{self.line}: {self.module} (layer {self.own}) imports {self.imported} "
            f"(layer {self.above}, above it)"
        )


def read_layers(text: str) -> dict[str, int]:
    """``{package: rank}`` (0 lowest) from the ``layers`` block of ARCHITECTURE.md's text."""
    match = BLOCK.search(text)
    if match is None:
        raise SystemExit(f"{SPEC.name}: no '## Layers' section with a ```layers block")
    ranks: dict[str, int] = {}
    rows = [row.split("#")[0].split() for row in match.group(1).splitlines()]
    for rank, names in enumerate(row for row in rows if row):
        for name in names:
            ranks[name] = rank
    return ranks


def layer_of(module: str, ranks: dict[str, int]) -> str | None:
    """The longest package name in ``ranks`` that ``module`` is or lies inside; None if none."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        name = ".".join(parts[:end])
        if name in ranks:
            return name
    return None


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """``(line, absolute module name)`` of every import in ``tree``, at any depth; a
    ``from X import name`` counts as ``X.name`` (``name`` may be a submodule)."""
    found: list[tuple[int, str]] = []
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against this module's package
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
    return found


def check(root: Path = ROOT, spec: Path = SPEC) -> list[Violation]:
    ranks = read_layers(spec.read_text(encoding="utf-8"))
    tops = sorted({name.split(".")[0] for name in ranks})
    out: list[Violation] = []
    for top in tops:
        for path in sorted((root / top).rglob("*.py")):
            module = module_name(path, root)
            own = layer_of(module, ranks)
            if own is None:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for line, name in imports(tree, module, path.name == "__init__.py"):
                other = layer_of(name, ranks)
                if other is not None and ranks[other] > ranks[own]:
                    out.append(Violation(path, line, module, name, own, other))
    return out


def main() -> int:
    found = check()
    for violation in found:
        print(violation)
    if found:
        print(
            f"{len(found)} upward import(s): a module may import its own layer and those below "
            f"({SPEC.name}, '## Layers')",
            file=sys.stderr,
        )
    else:
        print(f"no upward imports ({SPEC.name}, '## Layers')")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
