"""TRL 1.x ``<output_dir>/completions/completions_<step>.parquet``: one scalar advantage per completion.

A file that :class:`~skillgate_lib.integrations.trl.SkillGateGRPOTrainer` wrote also holds each
completion's reads as the trainer found and categorised them (``read_skills``,
``read_categories``, ``read_tok_start``, ``read_tok_end``, ``response_tokens``, in the trainer's
own tokens). Those are used as logged, so the audit needs neither ``--tasks`` nor a read pattern
for such a run (JSON tool-call reads included); a plain TRL log is read from its text.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa

from skillgate_lib.readers import fields
from skillgate_lib.readers.fields import BadValue
from skillgate_lib.readers.files import read_parquet
from skillgate_lib.readers.problems import Problems
from skillgate_lib.readers.rows import ReaderOptions, finish, rows_of, text_row
from skillgate_lib.readers.tokenizers import make_tokenizer

# Columns that are never rewards: TRL's own, and those SkillGateGRPOTrainer adds (the kit schema).
_TRL_META = {"step", "prompt", "completion", "advantage", "task_id", "horizon", "domain", "success", "split", "image",
             "response_tokens", "adv_exec", "sel_weight", "rollout"}
_EXPECTED = "TRL completions_<step>.parquet with step, prompt, completion and numeric reward-function columns"
LOGGED_READS = ("read_skills", "read_categories", "read_tok_start", "read_tok_end", "response_tokens")
"""Columns of a SkillGateGRPOTrainer log that carry each completion's reads; all present: used as logged."""


def trl_files(path: Path) -> list[Path]:
    base = path / "completions" if (path / "completions").is_dir() else path
    return sorted(base.glob("completions_*.parquet")) if base.is_dir() else [path]


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_list(t) or pa.types.is_large_list(t)


def _is_number(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


def _column_problem(schema: pa.Schema, rewards: list[str]) -> tuple[str, str] | None:
    """``(reason, what)`` for the first column that is missing or of the wrong type, else ``None``."""
    for name in ("step", "prompt", "completion", *rewards):
        if name not in schema.names:
            return "missing column", f"field {name!r}: missing column"
    if not rewards:
        return "missing column", ("no reward column: no numeric column besides TRL's own "
                                  f"({', '.join(sorted(_TRL_META))}); pass --reward-columns")
    checks = [("step", pa.types.is_integer, "an integer"), ("prompt", _is_text, "a string or message list"),
              ("completion", _is_text, "a string or message list"), ("advantage", _is_number, "a number")]
    checks += [(name, _is_number, "a number") for name in rewards]
    for name, ok, want in checks:
        if name in schema.names and not (ok(t := schema.field(name).type) or pa.types.is_null(t)):
            return "wrong column type", f"field {name!r}: column type {t}; expected {want}"
    return None


def _as_list(rec: dict, name: str) -> list:
    value = rec.get(name)
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if not isinstance(value, list):
        raise BadValue(f"field {name!r}: {fields.short(value)}; expected a list (one entry per read)")
    return value


def logged_reads_row(rec: dict, opts: ReaderOptions, tok, reward: str) -> dict:
    """:func:`text_row` with the reads the trainer logged (its categories and token positions) instead of a regex's."""
    row = text_row(rec, replace(opts, read_patterns=(), tasks=None), tok, reward=reward)
    names, cats = _as_list(rec, "read_skills"), _as_list(rec, "read_categories")
    starts, ends = _as_list(rec, "read_tok_start"), _as_list(rec, "read_tok_end")
    if not len(names) == len(cats) == len(starts) == len(ends):
        raise BadValue(f"fields 'read_skills', 'read_categories', 'read_tok_start', 'read_tok_end': {len(names)}, "
                       f"{len(cats)}, {len(starts)} and {len(ends)} entries; expected one per read in each")
    n_tok = fields.integer(rec, "response_tokens", minimum=1)
    row.update(read_skills=[str(n) for n in names], read_categories=[str(c) for c in cats],
               read_tok_start=[int(s) for s in starts], read_tok_end=[int(e) for e in ends], response_tokens=n_tok,
               sel_weight=min(1.0, sum(int(e) - int(s) for s, e in zip(starts, ends)) / n_tok))
    if "_g" in row:  # rescored: the logged positions must be in the rescoring tokenizer's tokens
        g = row["_g"]
        if len(g) != n_tok:
            raise BadValue(f"field 'response_tokens': {n_tok} logged, but the rescoring model's tokenizer gives {len(g)} "
                           "tokens for the completion; --rescore needs the model the run trained")
        row["grad_weight_sel"] = float(sum(g[int(s):int(e)].sum() for s, e in zip(starts, ends)))
    return row


def read_trl(path: str | Path, opts: ReaderOptions, problems: Problems) -> Iterator[pa.Table]:
    """TRL 1.x ``<output_dir>/completions/completions_<step>.parquet`` (or one such file)."""
    tok = make_tokenizer(opts.tokenizer)
    for file in trl_files(Path(path)):
        table = read_parquet(file, problems, _EXPECTED)
        if table is None:
            continue
        rewards = list(opts.reward_columns or [f.name for f in table.schema if f.name not in _TRL_META
                                               and _is_number(f.type)])
        bad = _column_problem(table.schema, rewards)
        if bad is not None:
            problems.bad_file(bad[0], f"{file}: {bad[1]}; expected {_EXPECTED}")
            continue
        df = table.to_pandas()
        reward = "+".join(rewards)  # the reward is the sum of the reward functions' columns
        df[reward] = df[rewards].astype(float).sum(axis=1, min_count=1)
        where_of = [f"{file}: row {i}" for i in range(len(df))]
        logged = all(c in df.columns for c in LOGGED_READS)
        rows, wheres = rows_of(df.to_dict("records"), where_of, problems,
                               (lambda rec: logged_reads_row(rec, opts, tok, reward)) if logged
                               else (lambda rec: text_row(rec, opts, tok, reward=reward)))
        out = finish(rows, wheres, problems, opts, credit="outcome")
        if out is not None:
            yield out

