"""TRL 1.x ``<output_dir>/completions/completions_<step>.parquet``: one scalar advantage per completion."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pyarrow as pa

from skillgate_lib.readers.files import read_parquet
from skillgate_lib.readers.problems import Problems
from skillgate_lib.readers.rows import ReaderOptions, finish, rows_of, text_row
from skillgate_lib.readers.tokenizers import make_tokenizer

# Columns that are never rewards: TRL's own, and those SkillGateGRPOTrainer adds (the kit schema).
_TRL_META = {"step", "prompt", "completion", "advantage", "task_id", "horizon", "domain", "success", "split", "image",
             "response_tokens", "adv_exec", "sel_weight", "rollout"}
_EXPECTED = "TRL completions_<step>.parquet with step, prompt, completion and numeric reward-function columns"


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
        rows, wheres = rows_of(df.to_dict("records"), where_of, problems,
                               lambda rec: text_row(rec, opts, tok, reward=reward))
        out = finish(rows, wheres, problems, opts, credit="outcome")
        if out is not None:
            yield out

