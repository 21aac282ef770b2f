"""One public name per job: a public top-level function or class is defined in one module of the library, and the
modules under ``skillgate_lib/runs/`` do not import each other in a circle (lazy imports inside functions count)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from skillgate_lib import paths

import repo_scripts

LIB = paths.REPO_ROOT / "skillgate_lib"

#: Names every command module defines for the same job: ``python -m skillgate_lib COMMAND`` calls the module's
#: ``main`` (or ``<command>_main``), whose arguments its ``build_parser`` reads.
COMMAND_NAMES = {"main", "build_parser"}

#: Names still defined in two modules for different jobs, each with the modules that define it: left for a later
#: rename (their callers are the integrations' documented API and the registries' many callers). A name may not
#: spread to another module, and an entry goes once its name is defined once.
OUTSTANDING = {
    "annotate": {"skillgate_lib/integrations/verl.py", "skillgate_lib/policy/rollout.py"},
    "find_reads": {"skillgate_lib/integrations/__init__.py", "skillgate_lib/readers/rows.py"},
    "get": {"skillgate_lib/env/regimes.py", "skillgate_lib/methods.py"},
    "register": {"skillgate_lib/integrations/verl.py", "skillgate_lib/methods.py"},
}


def _import_graph():
    """``scripts/import_graph.py``, the one reader of the library's modules and import edges."""
    return repo_scripts.load("scripts/import_graph.py")


def _modules(root: Path) -> dict[str, Path]:
    return _import_graph().modules(root)


def public_definitions(root: Path = LIB) -> dict[str, list[str]]:
    """Public top-level function and class names -> the modules (paths from the repository root) defining them."""
    defined = defaultdict(list)
    for path in _modules(root).values():
        for node in ast.parse(path.read_text(), filename=str(path)).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                defined[node.name].append(path.relative_to(root.parent).as_posix())
    return dict(defined)


def duplicated_names(root: Path = LIB) -> dict[str, list[str]]:
    """The public names defined in more than one module, apart from :data:`COMMAND_NAMES` and :data:`OUTSTANDING`
    (an outstanding name found in a module its entry does not list counts)."""
    return {name: where for name, where in public_definitions(root).items()
            if len(where) > 1 and name not in COMMAND_NAMES and not set(where) <= OUTSTANDING.get(name, set())}


def import_edges(root: Path = LIB) -> dict[str, set[str]]:
    """Module -> the library's modules it imports anywhere in its file (inside functions too)."""
    return _import_graph().graph(root)


def import_cycles(prefix: str, root: Path = LIB) -> list[list[str]]:
    """Each circle of imports among the modules whose names start with ``prefix``, as the path round it
    (``[a, b, a]``: ``a`` and ``b`` import each other); one circle per set of modules that import each other."""
    edges = {m: {t for t in ts if t.startswith(prefix)} for m, ts in import_edges(root).items() if m.startswith(prefix)}
    cycles, seen = [], set()
    for start in sorted(edges):
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in sorted(edges[node]):
                if nxt == start and frozenset(path) not in seen:
                    seen.add(frozenset(path))
                    cycles.append([*path, start])
                elif nxt not in path and nxt > start:  # each circle once, from its smallest module
                    stack.append((nxt, [*path, nxt]))
    return cycles


def test_every_public_function_and_class_name_is_defined_in_one_module():
    twice = duplicated_names()
    assert not twice, "public names defined in more than one module (one public name per job): " + "; ".join(
        f"{name} in {' and '.join(where)}" for name, where in sorted(twice.items()))


def test_the_outstanding_names_are_still_duplicated():
    defined = public_definitions()
    gone = sorted(n for n, where in OUTSTANDING.items() if len(defined.get(n, [])) < 2)
    assert not gone, f"defined once now, so remove from OUTSTANDING: {gone}"


def test_modules_under_runs_do_not_import_each_other():
    cycles = import_cycles("skillgate_lib.runs.")
    assert not cycles, "modules of skillgate_lib/runs/ that import each other: " + "; ".join(
        " -> ".join(c) for c in cycles)


def test_the_checks_see_a_duplicate_name_and_a_lazy_import_cycle(tmp_path):
    lib = tmp_path / "skillgate_lib"
    (lib / "runs").mkdir(parents=True)
    (lib / "__init__.py").write_text("")
    (lib / "runs" / "__init__.py").write_text("")
    (lib / "runs" / "a.py").write_text("from skillgate_lib.runs import b\n\ndef run_name():\n    pass\n")
    (lib / "runs" / "b.py").write_text("def run_name():\n    from skillgate_lib.runs.a import run_name as f\n")
    (lib / "runs" / "c.py").write_text("from . import a\n\nclass _Private:\n    pass\n")
    assert duplicated_names(lib) == {"run_name": ["skillgate_lib/runs/a.py", "skillgate_lib/runs/b.py"]}
    assert import_cycles("skillgate_lib.runs.", lib) == [["skillgate_lib.runs.a", "skillgate_lib.runs.b",
                                                            "skillgate_lib.runs.a"]]
