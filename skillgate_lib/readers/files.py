"""Opening one log file: JSONL line by line, Parquet whole; a file that cannot be read is named, never a traceback.

A run killed mid-write leaves a truncated file (a Parquet file without its footer, a
JSONL file whose last line stops mid-object); a crash can leave a file of NUL bytes or
none at all. Each is a file-level problem (``corrupt file`` / ``empty file``) or a
line-level one (``corrupt line`` / ``line too long``), raised or counted by
:class:`~skillgate_lib.readers.problems.Problems`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from skillgate_lib.readers.problems import Problems

#: A JSONL line longer than this is skipped unparsed (a binary file or a NUL-filled crash region
#: has no newlines; reading it as one line would hold it all in memory).
MAX_LINE_BYTES = 64 << 20
_JSON_NAMES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def jsonl_records(file: Path, problems: Problems,
                  expected: str = "one JSON object per line") -> tuple[list[dict], list[str]]:
    """The JSON objects of ``file`` and each one's ``"FILE: line N"``; bad lines are reported, blank ones skipped."""
    records, where_of = [], []
    try:
        fh = file.open("rb")
    except OSError as err:
        problems.bad_file("corrupt file", f"{file}: cannot be opened ({err.strerror or first_line(err)}); "
                                          f"expected {expected}")
        return records, where_of
    content = False
    with fh:
        lineno = 0
        while raw := fh.readline(MAX_LINE_BYTES + 1):
            lineno += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                size = len(raw) + _skip_line(fh)
                content = True
                problems.bad("line too long", f"{file}: line {lineno}: {size:,} bytes without a newline, over the "
                                              f"{MAX_LINE_BYTES:,}-byte limit; expected {expected}")
                continue
            if not raw.strip():
                continue
            content = True
            try:
                rec = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as err:
                problems.bad("corrupt line", f"{file}: line {lineno}: field '<line>': not UTF-8 text (byte "
                                             f"0x{err.object[err.start]:02x} at byte {err.start + 1}); expected {expected}")
                continue
            except json.JSONDecodeError as err:
                problems.bad("corrupt line", f"{file}: line {lineno}: field '<line>': corrupt or truncated JSON "
                                             f"({err.msg} at character {err.pos + 1}); expected {expected}")
                continue
            except RecursionError:
                problems.bad("corrupt line", f"{file}: line {lineno}: field '<line>': JSON nested too deep to parse; "
                                             f"expected {expected}")
                continue
            if not isinstance(rec, dict):
                problems.bad("corrupt line", f"{file}: line {lineno}: field '<line>': a JSON {_JSON_NAMES[type(rec)]}, "
                                             f"not an object; expected {expected}")
                continue
            records.append(rec)
            where_of.append(f"{file}: line {lineno}")
    if not content:
        problems.bad_file("empty file", f"{file}: empty file (no lines); expected {expected}")
    return records, where_of


def _skip_line(fh) -> int:
    """Read past the rest of the current line; the bytes skipped."""
    n = 0
    while chunk := fh.readline(MAX_LINE_BYTES):
        n += len(chunk)
        if chunk.endswith(b"\n"):
            break
    return n


def read_parquet(file: Path, problems: Problems, expected: str) -> pa.Table | None:
    """The whole Parquet ``file`` (page checksums verified when the writer stored them), or ``None`` if reported."""
    try:
        # The schema's key-value metadata (pandas' index description) is not needed and may itself be corrupt.
        table = pq.read_table(file, page_checksum_verification=True).replace_schema_metadata(None)
        table.validate(full=True)  # e.g. strings that are not UTF-8: Parquet readers do not check
    except (pa.ArrowException, OSError, ValueError) as err:  # ValueError: e.g. a column name not UTF-8
        problems.bad_file("corrupt file", f"{file}: not a readable Parquet file ({first_line(err)}); expected {expected} "
                                          "(a run killed mid-write leaves a truncated file)")
        return None
    if table.num_rows == 0:
        problems.bad_file("empty file", f"{file}: no rows; expected {expected}")
        return None
    return table
