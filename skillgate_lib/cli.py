"""Dataclass configs as command lines: every field a ``--flag`` whose help is the field's docstring."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import re


def field_docs(cls) -> dict[str, str]:
    """Attribute docstrings of a dataclass (the string literal under each field)."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body
    docs = {}
    for node, nxt in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
            docs[node.target.id] = " ".join(str(nxt.value.value).split())
    return docs


def add_fields(parser: argparse.ArgumentParser, cls) -> None:
    """One ``--kebab-case`` option per field of ``cls``, typed and defaulted like the field."""
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        helptext = f"{docs.get(f.name, '')} (default: {default})".replace("%", "%%")  # argparse formats help with %
        if isinstance(default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=helptext)
        elif isinstance(default, tuple):  # the element type of ``tuple[X, ...]``, else the default's
            named = re.match(r"tuple\[(int|float|str)\b", str(f.type))
            kind = {"int": int, "float": float, "str": str}[named.group(1)] if named else type(default[0]) if default else str
            parser.add_argument(flag, nargs="+", type=kind, default=default, help=helptext)
        elif default is None and str(f.type).startswith("bool"):  # ``bool | None``: --flag / --no-flag / unset
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=helptext)
        elif default is None:  # ``X | None``: the type named first in the annotation
            kind = {"int": int, "float": float, "str": str}[str(f.type).split("|")[0].strip()]
            parser.add_argument(flag, type=kind, default=None, help=helptext)
        else:
            parser.add_argument(flag, type=type(default), default=default, help=helptext)


def from_args(cls, args: argparse.Namespace):
    """An instance of ``cls`` from parsed arguments (lists become tuples)."""
    return cls(**{f.name: (tuple(v) if isinstance(v := getattr(args, f.name), list) else v) for f in dataclasses.fields(cls)})
