"""Imports a script of the repository (``scripts/x.py``, ``benchmarks/x.py``: files, not modules of the library) by
its path, for the tests of that script."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from skillgate_lib import paths


def load(rel: str) -> ModuleType:
    """The script at ``rel`` (relative to the repository root) as a module ``repo_script_<file stem>``, registered
    in ``sys.modules`` (a dataclass in it looks its module up there) under that prefixed name, so it shadows no
    installed module."""
    path = paths.REPO_ROOT / rel
    spec = importlib.util.spec_from_file_location(f"repo_script_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
