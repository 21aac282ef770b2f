"""Typed access to one record's fields (a JSON object or a table row), with messages that say what was expected.

Each function raises :class:`BadValue` naming the field, a short form of the value
found and the type expected; readers prefix the file and line/row and count or raise
it through :class:`~skillgate_lib.readers.problems.Problems`.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Mapping

import numpy as np

_INT64 = 2**63


class BadValue(ValueError):
    """A field holds a value of the wrong type or range."""


def short(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters: a corrupt log can hold megabyte-long values."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def number(rec: Mapping[str, Any], name: str) -> float:
    """A finite real number (bools are not numbers here)."""
    value = rec.get(name)
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        try:
            x = float(value)
        except OverflowError:
            x = math.inf
        if math.isfinite(x):
            return x
    raise BadValue(f"field {name!r}: {short(value)}; expected a finite number")


def optional_number(rec: Mapping[str, Any], name: str) -> float | None:
    return None if _missing(rec.get(name)) else number(rec, name)


def integer(rec: Mapping[str, Any], name: str, minimum: int = -_INT64) -> int:
    """An integer in ``[minimum, 2**63)`` (an integral float such as ``3.0`` is accepted)."""
    value = rec.get(name)
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        if isinstance(value, numbers.Integral) or (math.isfinite(value) and float(value).is_integer()):
            i = int(value)
            if minimum <= i < _INT64:
                return i
    bound = "an integer" if minimum == -_INT64 else f"an integer >= {minimum}"
    raise BadValue(f"field {name!r}: {short(value)}; expected {bound}")


def optional_integer(rec: Mapping[str, Any], name: str) -> int | None:
    return None if _missing(rec.get(name)) else integer(rec, name)


def optional_flag(rec: Mapping[str, Any], name: str) -> bool | None:
    """``true``/``false`` (or 0/1); ``None`` when absent."""
    value = rec.get(name)
    if _missing(value):
        return None
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, numbers.Real) and value in (0, 1)):
        return bool(value)
    raise BadValue(f"field {name!r}: {short(value)}; expected true or false")


def optional_text(rec: Mapping[str, Any], name: str) -> str | None:
    """A string, or a scalar id (an integer task id reads as its decimal text); ``None`` when absent."""
    value = rec.get(name)
    if _missing(value):
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
        return str(int(value))
    raise BadValue(f"field {name!r}: {short(value)}; expected a string")


def number_list(rec: Mapping[str, Any], name: str, dtype: type = float) -> np.ndarray:
    """A list of finite numbers (integers when ``dtype`` is ``int``) as a 1-D array."""
    value = rec.get(name)
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, list):
        want = numbers.Integral if dtype is int else numbers.Real
        if all(isinstance(v, want) and not isinstance(v, bool) for v in value):
            try:
                arr = np.asarray(value, dtype=np.int64 if dtype is int else float)
            except OverflowError:
                arr = None
            if arr is not None and arr.ndim == 1 and np.isfinite(arr).all():
                return arr
    kind = "integers" if dtype is int else "finite numbers"
    raise BadValue(f"field {name!r}: {short(value)}; expected a list of {kind}")
