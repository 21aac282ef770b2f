"""Markdown cells and tables, as every generated block of the documents writes them."""

from __future__ import annotations

import re

_LEADING_NUMBER = re.compile(r"^\s*([+-]?\d+(?:\.\d+)?)")
_INTERVAL = re.compile(r"^\s*([+-]?\d+(?:\.\d+)?)\s*\[\s*([+-]?\d+(?:\.\d+)?),\s*([+-]?\d+(?:\.\d+)?)\]")


def leading_number(cell) -> float:
    """The estimate of a table cell written as ``"98.0 [96.9, 98.7]"`` (or a bare number)."""
    if isinstance(cell, (int, float)):
        return float(cell)
    match = _LEADING_NUMBER.match(str(cell))
    if match is None:
        raise ValueError(f"no number at the start of table cell {cell!r}")
    return float(match.group(1))


def interval_cell(cell) -> tuple[float, float, float]:
    """The estimate and 95 % bounds of a table cell written as ``"-0.6 [-0.9, -0.3]"`` (:func:`interval_pp`'s form)."""
    match = _INTERVAL.match(str(cell))
    if match is None:
        raise ValueError(f"table cell {cell!r} is not 'estimate [low, high]'")
    return tuple(float(v) for v in match.groups())


def markdown_table(header: list[str], rows: list[list[str]], align: str) -> str:
    """A Markdown table; ``align`` has one letter per column, ``r`` right-aligned, anything else left."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def interval_pp(mean: float, lo: float, hi: float, f: str = "{:+.1f}") -> str:
    """A difference (percentage points, unless ``f`` says otherwise) with its interval: ``+1.2 [-0.3, +2.7]``."""
    return f"{f.format(mean)} [{f.format(lo)}, {f.format(hi)}]"
