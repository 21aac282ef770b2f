"""Modules, import edges and import layers of the library (the closing-note numbers of a restructure).

A module is a ``.py`` file of ``skillgate_lib`` (a package's ``__init__`` counts as the package);
an edge is one module importing another of the library, at any depth of the file (lazy imports
inside functions count); a module's layer is 1 + the longest chain of edges below it (cycles,
which lazy imports allow, are counted once). Usage: ``python scripts/import_graph.py [--edges]``.
"""

from __future__ import annotations

import ast
import sys
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "skillgate_lib"


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file of every module under the package ``root``."""
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the package's modules it imports anywhere in its file (lazy imports inside functions count)."""
    mods = modules(root)
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        pkg = m if path.name == "__init__.py" else m.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                hits = {f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names}
            elif isinstance(node, ast.Import):
                hits = {a.name for a in node.names}
            else:
                continue
            edges[m] |= {h for h in hits if h in mods and h != m}
    return edges


def layers(edges: dict[str, set[str]]) -> dict[str, int]:
    @lru_cache(None)
    def depth(m: str, seen: frozenset = frozenset()) -> int:
        below = [depth(d, seen | {m}) for d in edges[m] if d not in seen and d != m]
        return 1 + max(below, default=0)

    return {m: depth(m) for m in edges}


def main() -> None:
    edges = graph()
    lay = layers(edges)
    print(f"modules {len(edges)}, import edges {sum(map(len, edges.values()))}, import layers {max(lay.values())}")
    if "--edges" in sys.argv:
        for m in sorted(edges, key=lambda m: (lay[m], m)):
            print(f"{lay[m]:>2} {m}: {', '.join(sorted(edges[m]))}")


if __name__ == "__main__":
    main()
