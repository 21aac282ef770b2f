"""verl ``trainer.rollout_data_dir``: one JSONL per step, lines with ``input, output, score, step`` + extras."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator, Sequence

import pyarrow as pa

from skillgate_lib.readers.files import jsonl_records
from skillgate_lib.readers.problems import Problems
from skillgate_lib.readers.rows import ReaderOptions, finish, rows_of, text_row
from skillgate_lib.readers.tokenizers import make_tokenizer

FIELDS = ("input", "output", "score", "step")


def step_of_name(file: Path) -> int | None:
    """The last number in a file's stem (``train_data_step12`` -> 12), or ``None``."""
    digits = re.findall(r"\d+", file.stem)
    return int(digits[-1]) if digits else None


def require(rec: dict, where: str, names: Sequence[str], problems: Problems, kind: str) -> bool:
    """Whether ``rec`` has every field in ``names``; the first missing one is reported."""
    for name in names:
        if name not in rec:
            problems.bad("missing column", f"{where}: field {name!r}: missing; {kind} lines need {', '.join(names)}")
            return False
    return True


def verl_files(path: Path) -> list[Path]:
    return sorted(path.glob("*.jsonl"), key=lambda p: (step_of_name(p) or 0, p.name)) if path.is_dir() else [path]


def read_verl(path: str | Path, opts: ReaderOptions, problems: Problems) -> Iterator[pa.Table]:
    """verl rollout JSONL (a directory of them or one file); ``advantage`` is used when a line logs one."""
    tok = make_tokenizer(opts.tokenizer)
    expected = f"one JSON object per line with {', '.join(FIELDS)} (verl rollout data)"
    for file in verl_files(Path(path)):
        recs, where_of = jsonl_records(file, problems, expected)
        good = [(r, w) for r, w in zip(recs, where_of) if require(r, w, FIELDS, problems, "verl")]
        rows, wheres = rows_of([r for r, _ in good], [w for _, w in good], problems,
                               lambda rec: text_row(rec, opts, tok, prompt="input", completion="output", reward="score"))
        table = finish(rows, wheres, problems, opts, credit="outcome")
        if table is not None:
            yield table
