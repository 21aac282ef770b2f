"""Trajectory tables: the kit's own Parquet parts and plain Parquet or JSONL tables, checked file by file.

Parquet parts are scanned in place by the audit's DuckDB engine, which would stop at the
first unreadable file with a raw error; :func:`check_parquet_tables` therefore opens
each file first (footer, column types, every data page, page checksums when the writer
stored them, as the kit's :class:`~skillgate_lib.logs.RunWriter` does) and reports the
ones that cannot be audited. JSONL tables are converted to Parquet parts in a scratch
directory by :func:`stage_jsonl_tables`, row by row, keeping each row's file and line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from skillgate_lib.logs import COLUMNS, TRAJECTORY_SCHEMA
from skillgate_lib.readers.fields import short
from skillgate_lib.readers.files import first_line, jsonl_records
from skillgate_lib.readers.problems import Problems

#: Columns a row cannot do without; the others are recomputed (advantages, Share) or optional.
REQUIRED = ("step", "group_id", "response_tokens", "reward", "success",
            "read_skills", "read_categories", "read_tok_start", "read_tok_end")
#: Needed for Sign and Value only: without them the audit reports Share and read counts.
CATEGORY_COLUMNS = ("read_categories",)
_EXPECTED = "a trajectory table part (skillgate_lib.logs.TRAJECTORY_SCHEMA)"


def compatible(found: pa.DataType, want: pa.DataType) -> bool:
    """Whether a column of type ``found`` can be read losslessly as ``want`` (a TRAJECTORY_SCHEMA type)."""
    if pa.types.is_null(found):
        return True
    if pa.types.is_dictionary(found):
        found = found.value_type
    if pa.types.is_list(want):
        return (pa.types.is_list(found) or pa.types.is_large_list(found)) and compatible(found.value_type, want.value_type)
    if pa.types.is_int64(want):
        return pa.types.is_integer(found)
    if pa.types.is_float64(want):
        return pa.types.is_floating(found) or pa.types.is_integer(found)
    if pa.types.is_string(want):
        return pa.types.is_string(found) or pa.types.is_large_string(found)
    return found == want


def _column_problem(schema: pa.Schema, required: Sequence[str]) -> tuple[str, str] | None:
    """``(reason, what)`` for the first column that is missing or of the wrong type, else ``None``."""
    for name in required:
        if name not in schema.names:
            return "missing column", f"field {name!r}: missing column; expected {', '.join(required)}"
    for f in TRAJECTORY_SCHEMA:
        if f.name in schema.names and not compatible(t := schema.field(f.name).type, f.type):
            return "wrong column type", f"field {f.name!r}: column type {t}; expected {f.type}"
    return None


def check_parquet_tables(files: Sequence[Path], problems: Problems, every_column: bool = False) -> list[Path]:
    """The Parquet ``files`` that can be audited whole; each other one is reported (raised, or skipped and counted).

    A file is bad when its footer cannot be read (truncated, not Parquet), it has no rows, a
    required column is missing (``read_categories`` may be: Share only), a column has a type
    the schema cannot take, or a data page fails to decode, to match its checksum or to hold
    valid values (UTF-8 strings, list offsets). ``every_column`` requires every schema column,
    as the kit's own parts always hold them all: a flipped byte in a column's name must not
    pass for an optional column left out. Reading every page costs one decoding pass; it is
    what lets a corrupt part be skipped instead of stopping the audit halfway.
    """
    required = list(COLUMNS) if every_column else [c for c in REQUIRED if c not in CATEGORY_COLUMNS]
    good = []
    for file in files:
        try:
            pf = pq.ParquetFile(file, page_checksum_verification=True)
        except (pa.ArrowException, OSError, ValueError) as err:  # ValueError: e.g. a column name not UTF-8
            problems.bad_file("corrupt file", f"{file}: not a readable Parquet file ({first_line(err)}); expected "
                                              f"{_EXPECTED} (a run killed mid-write leaves a truncated file)")
            continue
        with pf:
            if pf.metadata.num_rows == 0:
                problems.bad_file("empty file", f"{file}: no rows; expected {_EXPECTED}")
                continue
            bad = _column_problem(pf.schema_arrow, required)
            if bad is not None:
                problems.bad_file(bad[0], f"{file}: {bad[1]}")
                continue
            columns = [n for n in TRAJECTORY_SCHEMA.names if n in pf.schema_arrow.names]
            try:
                for batch in pf.iter_batches(batch_size=65_536, columns=columns):
                    batch.validate(full=True)  # e.g. strings that are not UTF-8: Parquet readers do not check
            except (pa.ArrowException, OSError, ValueError, MemoryError) as err:
                problems.bad_file("corrupt file", f"{file}: data pages cannot be decoded ({first_line(err)}); "
                                                  f"expected {_EXPECTED}")
                continue
        good.append(file)
    return good


def describe(typ: pa.DataType) -> str:
    """A schema type in words, for messages about JSON values."""
    if pa.types.is_list(typ):
        return {"a string": "a list of strings", "an integer": "a list of integers",
                "a number": "a list of numbers"}[describe(typ.value_type)]
    return {pa.int64(): "an integer", pa.float64(): "a number", pa.string(): "a string", pa.bool_(): "true or false"}[typ]


def json_fits(value, typ: pa.DataType) -> bool:
    """Whether one JSON value can be stored as ``typ`` without loss (Arrow itself would truncate 4.5 to 4,
    read ``true`` as 1.0 and split a string into a list of characters)."""
    if value is None:
        return True
    if pa.types.is_list(typ):
        return isinstance(value, list) and all(json_fits(v, typ.value_type) for v in value)
    if pa.types.is_boolean(typ):
        return isinstance(value, bool)
    if pa.types.is_string(typ):
        return isinstance(value, str)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if pa.types.is_int64(typ):
        return (isinstance(value, int) or value.is_integer()) and -2**63 <= value < 2**63
    return pa.types.is_float64(typ)


def stage_jsonl_tables(files: Sequence[Path], staging: Path, problems: Problems) -> list[Path]:
    """Plain JSONL tables -> Parquet parts under ``staging`` with each row's origin (``_file``, ``_row``, ``_rownum``).

    A row that lacks a required field or holds a value of the wrong type is reported (file, line, field,
    expected type) and left out; a file in which no line has any required field is a stray file.
    """
    out = []
    for j, file in enumerate(files):
        expected = "one trajectory-table row (a JSON object) per line"
        records, where_of = jsonl_records(file, problems, expected)
        if not records:
            continue
        if not any(name in r for r in records for name in REQUIRED):
            problems.bad_file("missing column", f"{file}: no line has any of the required fields {', '.join(REQUIRED)}; "
                                                f"expected {expected}")
            continue
        bad: dict[int, tuple[str, str]] = {}  # row -> (reason, message): the first problem of each bad row
        for i, r in enumerate(records):
            if missing := [name for name in REQUIRED if r.get(name) is None and name not in CATEGORY_COLUMNS]:
                bad[i] = ("missing column", f"{where_of[i]}: field {missing[0]!r}: missing; every row needs "
                                            f"{', '.join(REQUIRED)}")
        for f in TRAJECTORY_SCHEMA:
            for i, r in enumerate(records):
                if i not in bad and not json_fits(v := r.get(f.name), f.type):
                    bad[i] = ("bad value", f"{where_of[i]}: field {f.name!r}: {short(v)}; expected {describe(f.type)}")
        for i in sorted(bad):
            problems.bad(*bad[i])
        keep = [i for i in range(len(records)) if i not in bad]
        if not keep:
            continue
        cols = {f.name: pa.array([records[i].get(f.name) for i in keep], type=f.type) for f in TRAJECTORY_SCHEMA
                if any(f.name in records[i] for i in keep)}
        cols["_file"] = pa.array([str(file)] * len(keep))
        cols["_row"] = pa.array([where_of[i].rsplit(": ", 1)[1] for i in keep])
        cols["_rownum"] = pa.array(np.asarray(keep, dtype=np.int64))
        part = staging / f"table-{j:06d}.parquet"
        pq.write_table(pa.table(cols), part)
        out.append(part)
    return out
