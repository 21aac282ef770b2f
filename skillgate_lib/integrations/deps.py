"""Import an engine's package, or fail with the exact ``pip install`` command that provides it.

The integrations import their engine where it is used; a missing package is then an
``ImportError`` that says what needs it and the command to run (``pip install datasets``),
instead of a bare ``No module named 'datasets'``. Imports no engine itself.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType
from typing import Any

PIP = {
    "accelerate": "pip install accelerate",
    "datasets": "pip install datasets",
    "peft": "pip install peft",
    "ray": "pip install ray",
    "transformers": "pip install transformers",
    "trl": 'pip install "trl>=1.16,<1.17"',
    "verl": "pip install verl==0.9.1",
}
"""Top-level module -> the command that installs the version the kit is tested with."""


def install_hint(module: str) -> str:
    """The ``pip install`` command for ``module`` (its top-level package), or a generic one naming it."""
    top = module.split(".")[0]
    return PIP.get(top, f"pip install {top}")


def missing(err: ModuleNotFoundError, what: str) -> ImportError:
    """An ``ImportError`` for ``err`` (raised while importing for ``what``) that names the package and its install command."""
    full = err.name or str(err)
    name = full.split(".")[0]
    try:
        installed = full != name and importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        installed = False
    if installed:  # the package is there but lacks a submodule: another version
        return ImportError(f"{what} needs {full!r}, which the installed {name!r} lacks: {install_hint(name)}")
    return ImportError(f"{what} needs the {name!r} package, which is not installed: {install_hint(name)}")


def import_engine(module: str, what: str, attr: str | None = None) -> Any:
    """``importlib.import_module(module)`` (or its attribute ``attr``, which a lazy package may import only then);
    a missing package (the module's own or one it imports) is :func:`missing`'s error."""
    try:
        found: ModuleType = importlib.import_module(module)
        return found if attr is None else getattr(found, attr)
    except ModuleNotFoundError as err:
        raise missing(err, what) from err
