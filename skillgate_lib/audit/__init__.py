"""Audit a GRPO run's logs for selector credit starvation: Share, Sign, Value by horizon.

Usage::

    python -m skillgate_lib audit PATH [--format auto|kit|trl|verl|nemo|table] [--tasks META]
                                       [--skip-bad] [--out DIR] [--split train|eval|all] ...

``PATH`` is a kit run directory, a TRL ``output_dir`` (or its ``completions/``), a verl
``rollout_data_dir``, a NeMo-RL log directory holding ``train_data_step<N>.jsonl``, or a
plain Parquet/JSONL table (file or directory) in the trajectory schema of
:mod:`skillgate_lib.logs`. External logs are first turned into that table by
:mod:`skillgate_lib.readers` (one step file at a time, staged as Parquet in a temporary
directory); Parquet parts are checked file by file before DuckDB scans them. The input
is only ever read: nothing is written under PATH, and ``--out`` may not lie inside it.

Bad input (a truncated or corrupt file, an empty one, a stray file, a column missing or
of the wrong type, a corrupt line, a bad value) stops the audit with an error naming the
file, the line or row and the field, and what was expected; ``--skip-bad`` skips it and
the report counts what was skipped by reason. Without skill categories (an external log
read without ``--tasks``) the audit reports Share, read counts and advantage signs, and
says once that Sign and Value need ``--tasks``.

**Engine: DuckDB.** Its SQL scans Parquet globs out of core with list functions and
lambdas over the per-read columns, windowed group statistics and exact quantiles,
spilling to disk under a set ``memory_limit`` and ``threads``, so every aggregate below
is one vectorised query and nothing loads the whole log into Python (a pyarrow dataset
scan would need hand-written batch loops for the group windows and quantiles).

Measures, per horizon bin (horizon = logged steps H when every row has one, else response
tokens; bins are the distinct values when there are at most ``n_bins`` of them, else
quantile bins):

* **Share** ``sel_weight`` as logged (kit, NeMo-RL), else ``k / L`` (k = selector tokens,
  L = response tokens): median, IQR, mean; the dilution ratio = median of the shortest bin
  / median of the longest;
* **Sign** over read actions, using each read's applied advantage ``read_adv``: fraction
  negative, fraction zero, and fraction wrong-signed among nonzero (an oracle read with
  A < 0 or a non-oracle read with A > 0);
* **Value** within each prompt group (step, split, group_id) that holds both a trajectory
  that read the oracle and one that read only other skills: success rate of the first
  minus the second; averaged over groups, with a percentile bootstrap over groups. The
  bootstrap resamples groups exactly, as a multinomial over the distinct group
  differences (few, since successes are 0/1 and groups small), so it costs O(distinct)
  not O(groups) per replicate;
* **reads**: oracle-read rate and misleading-read rate (fraction of trials reading at
  least one such skill), reads per trial, success rate.

Each measure gets a Spearman trend against the bins' mean horizon with an exact
permutation p-value (Monte Carlo beyond 8 bins) and a verdict on whether it worsens
monotonically. The theory model (:func:`skillgate_lib.theory.fit_model`) is fitted to the
log's oracle reads, horizons and successes and its curves overlaid.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import math
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from skillgate_lib import paths, readers, theory
from skillgate_lib.logs import CATEGORIES, TRAJECTORY_SCHEMA, ArtifactError, RunWriter
from skillgate_lib.readers import REQUIRED, detect_format

FORMATS = ("auto", "kit", "trl", "verl", "nemo", "table")
_DUCK_TYPES = {"int64": "BIGINT", "string": "VARCHAR", "large_string": "VARCHAR", "double": "DOUBLE", "bool": "BOOLEAN",
               "list<item: string>": "VARCHAR[]", "list<item: int64>": "BIGINT[]", "list<item: double>": "DOUBLE[]"}
#: (measure column, direction in which it worsens with horizon)
TRENDS = (("share_median", "down"), ("sign_wrong", "up"), ("sign_negative", "up"), ("sign_zero", "up"),
          ("value", "down"), ("oracle_read", "down"))
#: Measures that need each read's category (the task's slate): null without task metadata.
BY_CATEGORY = ("sign_wrong", "value", "value_lo", "value_hi", "oracle_read", "misleading_read")


@dataclass
class AuditResult:
    """What an audit found. ``bins`` has one row per horizon bin; ``overall`` the same columns for all rows."""

    source: str
    fmt: str
    horizon_kind: str
    """``"steps"`` (logged horizon) or ``"response_tokens"``."""
    bins: pd.DataFrame
    overall: dict[str, float]
    trends: pd.DataFrame
    dilution: float
    """median Share of the shortest bin / of the longest."""
    problems: readers.Problems
    n_rows: int
    model: theory.StarvationModel | None = None
    model_note: str = ""
    curves: pd.DataFrame = field(default_factory=pd.DataFrame)
    """the fitted model's predictions on a fine horizon grid (empty without a fit)."""
    categorised: bool = True
    """whether reads carry categories; without them the :data:`BY_CATEGORY` columns are NaN."""

    def summary_table(self) -> pd.DataFrame:
        cols = ["bin", "h_min", "h_max", "n", "share_median", "share_q25", "share_q75", "sign_negative", "sign_wrong",
                "sign_zero", "value", "value_lo", "value_hi", "value_groups", "oracle_read", "misleading_read",
                "reads_per_trial", "success"]
        rows = pd.concat([self.bins, pd.DataFrame([{**self.overall, "bin": "all"}])], ignore_index=True)
        return rows[cols]


# ---------------------------------------------------------------------------- sources


def _table_files(path: Path, suffix: str) -> list[Path]:
    return sorted(path.glob(f"*{suffix}")) if path.is_dir() else [path]


def _stage_external(path: Path, fmt: str, opts: readers.ReaderOptions, problems: readers.Problems,
                    staging: Path) -> list[Path]:
    read = {"trl": readers.read_trl, "verl": readers.read_verl, "nemo": readers.read_nemo}[fmt]
    out = []
    for j, table in enumerate(read(path, opts, problems)):
        table = table.append_column("_file", pa.array([f"{path} ({fmt} reader output)"] * len(table)))
        table = table.append_column("_row", pa.array([f"row {i}" for i in range(len(table))]))
        table = table.append_column("_rownum", pa.array(np.arange(len(table))))
        part = staging / f"{fmt}-{j:06d}.parquet"
        pq.write_table(table, part)
        out.append(part)
    return out


def _case(checks: Sequence[tuple[str, ...]]) -> str:
    """SQL: the index of the first check whose condition holds, else NULL."""
    return "(CASE " + " ".join(f"WHEN {c} THEN {i}" for i, (c, *_) in enumerate(checks)) + " END)"


def _sql_list(items: Sequence[Any]) -> str:
    return "[" + ", ".join("'" + str(x).replace("'", "''") + "'" for x in items) + "]"


# ---------------------------------------------------------------------------- engine


#: DuckDB's errors about the data it reads (not about the SQL): reported as bad input, not as a traceback.
_DATA_ERRORS = (duckdb.InvalidInputException, duckdb.IOException, duckdb.ConversionException,
                duckdb.OutOfRangeException)


def _data_error(err: duckdb.Error) -> bool:
    """Whether a DuckDB error is about the bytes it read; its Parquet reader's Thrift errors are plain ``Error``."""
    return isinstance(err, _DATA_ERRORS) or type(err) is duckdb.Error


class Unreadable(ArtifactError):
    """DuckDB cannot read the input (a part that the Parquet checks passed but DuckDB's own reader rejects)."""


class Engine:
    """The DuckDB views the audit queries: ``src`` (validated input), ``t`` (derived per-row measures).

    ``categorised`` is false when no row has ``read_categories`` (an external log read
    without task metadata): Share and read counts are then measured, the category-based
    columns (wrong-signed reads, Value, oracle and misleading read rates) are null.
    """

    def __init__(self, source: Path, fmt: str, problems: readers.Problems, threads: int, memory_limit: str,
                 temp_dir: Path):
        self.source, self.fmt, self.problems = source, fmt, problems
        self.con = duckdb.connect(config={"threads": threads, "memory_limit": memory_limit,
                                          "temp_directory": str(temp_dir), "preserve_insertion_order": False})

    def q(self, sql: str) -> pd.DataFrame:
        try:
            return self.con.sql(sql).df()
        except duckdb.Error as err:
            if not _data_error(err):
                raise
            raise Unreadable(f"{self.source}: the input cannot be read ({readers.files.first_line(err)})") from None

    def x(self, sql: str) -> None:
        try:
            self.con.execute(sql)
        except duckdb.Error as err:
            if not _data_error(err):
                raise
            raise Unreadable(f"{self.source}: the input cannot be read ({readers.files.first_line(err)})") from None

    def open(self, files: Sequence[Path], staged: bool, split: str | None, std_ddof: int, std_eps: float,
             n_bins: int) -> None:
        flist = _sql_list(files)
        extra = "" if staged else ", filename = true, file_row_number = true"
        raw = f"read_parquet({flist}, union_by_name = true{extra})"
        present = set(self.q(f"DESCRIBE SELECT * FROM {raw}")["column_name"])
        self.categorised = ("read_categories" in present
                            and int(self.q(f"SELECT count(read_categories) n FROM {raw}")["n"][0]) > 0)
        select = []
        for f in TRAJECTORY_SCHEMA:
            typ = _DUCK_TYPES[str(f.type)]
            expr = f"CAST({f.name} AS {typ})" if f.name in present else f"NULL::{typ}"
            select.append(f"coalesce({expr}, 'train') AS split" if f.name == "split" else f"{expr} AS {f.name}")
        origin = ("_file, _row, _rownum" if staged else
                  "filename AS _file, 'row ' || file_row_number AS _row, file_row_number AS _rownum")
        where = "" if split is None else f"WHERE split = {_sql_list([split])[1:-1]}"
        self.x(f"CREATE TEMP VIEW src0 AS SELECT * FROM (SELECT {', '.join(select)}, {origin} FROM {raw}) {where}")
        self._checks = self._row_checks() + [
            ("_gsize = 1", "group of size 1", "group_id",
             "is a group of size 1; expected other rollouts with the same step, split and group_id")]
        row_ok = f"{_case(self._checks[:-1])} IS NULL"
        # Group statistics by aggregation (one small row per group) joined back, not a window:
        # a window would materialise every row with its lists, an aggregate spills and stays small.
        # The size counts every logged rollout; mean and std only the valid ones, so a skipped
        # row's reward (NaN, or corrupt) never enters its partners' recomputed advantages.
        self.x(f"CREATE TEMP TABLE gstats AS SELECT step AS _s, split AS _sp, group_id AS _g, count(*) AS _gsize, "
               f"count(*) FILTER ({row_ok}) AS _gvalid, avg(reward) FILTER ({row_ok}) AS _gmean, "
               f"stddev_samp(reward) FILTER ({row_ok}) AS _gsd FROM src0 GROUP BY ALL")
        self.x("CREATE TEMP VIEW src1 AS SELECT src0.*, _gsize, _gvalid, _gmean, _gsd FROM src0 LEFT JOIN gstats ON "
               "step IS NOT DISTINCT FROM _s AND split IS NOT DISTINCT FROM _sp AND group_id IS NOT DISTINCT FROM _g")
        if int(self.q("SELECT count(*) n FROM src0")["n"][0]) == 0:
            raise ArtifactError(f"{files[0]}: the trajectory table is empty" + (f" for split {split!r}" if split else ""))
        self._bad_case = _case(self._checks)
        self._validate()
        # Population (ddof 0) or sample (ddof 1) std: the group size is known, so rescale the sample std.
        sd = "coalesce(_gsd, 0)" if std_ddof == 1 else "coalesce(_gsd, 0) * sqrt((_gvalid - 1.0) / _gvalid)"
        self.x(f"""CREATE TEMP VIEW t0 AS SELECT *,
            (reward - _gmean) / ({sd} + {std_eps}) AS adv_re,
            coalesce(list_sum(list_transform(range(len(read_tok_start)),
                lambda i: read_tok_end[i + 1] - read_tok_start[i + 1])), 0) AS k
            FROM src1 WHERE {self._bad_case} IS NULL""")
        self.x("""CREATE TEMP VIEW t1 AS SELECT *,
            coalesce(read_adv, list_transform(read_skills, lambda x: coalesce(adv_exec, adv_re))) AS ra,
            coalesce(sel_weight, least(k / response_tokens, 1.0)) AS share
            FROM t0""")
        counts = self.q("SELECT count(*) n, count(horizon) nh, count(DISTINCT horizon) dh, "
                        "count(DISTINCT response_tokens) dl FROM t1").iloc[0]
        if counts["n"] == 0:
            raise ArtifactError(f"{files[0]}: no valid rows left after skipping bad ones")
        self.n_rows = int(counts["n"])
        self.horizon_kind = "steps" if counts["nh"] == counts["n"] else "response_tokens"
        hcol = "horizon" if self.horizon_kind == "steps" else "response_tokens"
        distinct = counts["dh"] if self.horizon_kind == "steps" else counts["dl"]
        if distinct <= n_bins:
            edges = self.q(f"SELECT DISTINCT {hcol} v FROM t1 ORDER BY v")["v"].tolist()[:-1]
        else:
            qs = ", ".join(f"{i / n_bins:.6f}" for i in range(1, n_bins))
            edges = sorted(set(self.q(f"SELECT unnest(quantile_disc({hcol}, [{qs}])) v FROM t1")["v"].tolist()))
        self.edges = [float(e) for e in edges]
        elist = "[" + ", ".join(repr(e) for e in self.edges) + "]::DOUBLE[]"
        self.bin_of = lambda col: f"len(list_filter({elist}, lambda e: {col} > e))"
        by_category = ("""len(list_filter(range(len(ra)), lambda i: (read_categories[i + 1] = 'oracle' AND ra[i + 1] < 0)
                OR (read_categories[i + 1] <> 'oracle' AND ra[i + 1] > 0))) AS n_wrong,
            list_contains(read_categories, 'oracle') AS has_oracle,
            list_contains(read_categories, 'misleading') AS has_mis""" if self.categorised else
                       "NULL::BIGINT AS n_wrong, NULL::BOOLEAN AS has_oracle, NULL::BOOLEAN AS has_mis")
        self.x(f"""CREATE TEMP VIEW t AS SELECT *,
            {hcol}::DOUBLE AS h, {self.bin_of(hcol)} AS bin, success::INT AS succ, len(read_skills) AS n_reads,
            len(list_filter(ra, lambda a: a < 0)) AS n_neg,
            len(list_filter(ra, lambda a: a = 0)) AS n_zero,
            {by_category}
            FROM t1""")

    def _row_checks(self) -> list[tuple[str, str, str, str]]:
        """``(condition, reason, field, what is wrong and what was expected)`` for one row; the first that holds
        names the row's problem."""
        cats = _sql_list(CATEGORIES)
        required = [c for c in REQUIRED if self.categorised or c not in readers.CATEGORY_COLUMNS]
        lists = ["read_skills", "read_tok_start", "read_tok_end", "read_adv"] + ["read_categories"] * self.categorised
        per_read = "has not one entry per read; expected as many as read_skills"
        checks = [(f"{c} IS NULL", "missing column", c, "is null; expected a value in every row") for c in required]
        checks += [(f"list_contains(list_transform({c}, lambda v: v IS NULL), true)", "bad value", c,
                    "has a null entry; expected a value per read") for c in lists]
        if self.categorised:
            checks += [("len(read_categories) <> len(read_skills)", "bad value", "read_categories", per_read),
                       (f"NOT list_has_all({cats}, read_categories)", "bad value", "read_categories",
                        f"has an unknown category; expected each of {', '.join(CATEGORIES)}")]
        checks += [
            ("len(read_tok_start) <> len(read_skills)", "bad value", "read_tok_start", per_read),
            ("len(read_tok_end) <> len(read_skills)", "bad value", "read_tok_end", per_read),
            ("read_adv IS NOT NULL AND len(read_adv) <> len(read_skills)", "bad value", "read_adv", per_read),
            ("read_adv IS NOT NULL AND NOT list_bool_and(list_transform(read_adv, lambda a: isfinite(a)))", "bad value",
             "read_adv", "has a non-finite advantage; expected finite numbers"),
            ("adv_exec IS NOT NULL AND NOT isfinite(adv_exec)", "bad value", "adv_exec", "is not finite; expected a number"),
            ("response_tokens < 1", "bad value", "response_tokens", "is below 1; expected the response's token count"),
            ("NOT isfinite(reward)", "bad value", "reward", "is not finite; expected a number"),
            ("sel_weight IS NOT NULL AND (isnan(sel_weight) OR sel_weight < 0 OR sel_weight > 1)", "bad value",
             "sel_weight", "is outside [0, 1]; expected a fraction of the loss weight"),
            ("len(list_filter(range(len(read_tok_start)), lambda i: read_tok_start[i + 1] < 0 "
             "OR read_tok_end[i + 1] <= read_tok_start[i + 1])) > 0 OR list_sum(list_transform(range(len(read_tok_start)), "
             "lambda i: read_tok_end[i + 1] - read_tok_start[i + 1])) > response_tokens",
             "span outside response", "read_tok_start/read_tok_end",
             "holds a span that is empty, negative or longer than the response; expected 0 <= start < end, "
             "spans within response_tokens"),
        ]
        return checks

    def _validate(self) -> None:
        bad = self.q(f"SELECT {self._bad_case} AS bad, count(*) n, arg_min(_file || ': ' || _row, _rownum) AS first_at "
                     f"FROM src1 WHERE {self._bad_case} IS NOT NULL GROUP BY bad ORDER BY min(_file), min(_rownum)")
        for rec in bad.itertuples():
            _, reason, fld, what = self._checks[int(rec.bad)]
            many = f" ({rec.n} such rows)" if rec.n > 1 else ""
            self.problems.bad(reason, f"{rec.first_at}: field {fld!r} {what}{many}", n_rows=int(rec.n))

    def advantage_check(self, tol: float = 1e-3) -> None:
        r = self.q(f"SELECT count(*) n, count(*) FILTER (abs(adv_exec - adv_re) > {tol} * (1 + abs(adv_re))) bad, "
                   "max(abs(adv_exec - adv_re)) mx FROM t WHERE adv_exec IS NOT NULL").iloc[0]
        p = self.problems
        p.adv_checked += int(r["n"])
        p.adv_mismatch += int(r["bad"] or 0)
        p.adv_max_diff = max(p.adv_max_diff, float(r["mx"]) if pd.notna(r["mx"]) else 0.0)

    def per_bin(self) -> pd.DataFrame:
        return self.q("""SELECT bin, count(*) n, min(h) h_min, max(h) h_max, avg(h) h_mean,
            avg(share) share_mean, sum(n_reads) reads, sum(n_neg) neg, sum(n_zero) zero, sum(n_wrong) wrong,
            avg(has_oracle::INT) oracle_read, avg(has_mis::INT) misleading_read, avg(n_reads) reads_per_trial,
            avg(succ) success
            FROM t GROUP BY GROUPING SETS ((bin), ()) ORDER BY bin NULLS LAST""")

    def share_histogram(self) -> pd.DataFrame:
        """Distinct (bin, Share rounded to 1e-9) with counts: quantiles exact to 1e-9, in an aggregate that spills."""
        return self.q("SELECT bin, round(share, 9) s, count(*) c FROM t GROUP BY ALL ORDER BY bin, s")

    def value_groups(self) -> pd.DataFrame:
        """Distinct (bin, group difference) with their group counts, over matched groups."""
        return self.q(f"""WITH g AS (SELECT avg(h) hg,
                count(*) FILTER (has_oracle) n_o, sum(succ) FILTER (has_oracle) s_o,
                count(*) FILTER (NOT has_oracle AND n_reads > 0) n_x,
                sum(succ) FILTER (NOT has_oracle AND n_reads > 0) s_x
              FROM t GROUP BY step, split, group_id)
            SELECT {self.bin_of('hg')} AS bin, round(s_o / n_o - s_x / n_x, 12) AS d, count(*) c
            FROM g WHERE n_o > 0 AND n_x > 0 GROUP BY ALL""")

    def fit_inputs(self) -> tuple[pd.DataFrame, dict[str, float]]:
        counts = self.q("SELECT horizon::BIGINT h, has_oracle o, succ s, count(*) c FROM t WHERE n_reads > 0 GROUP BY ALL")
        lengths = self.q("""SELECT regr_slope(response_tokens, horizon) slope, regr_intercept(response_tokens, horizon) icpt,
            sum(k) / nullif(sum(n_reads), 0) k_read FROM t WHERE n_reads > 0""").iloc[0].to_dict()
        lengths["group_size"] = float(self.q("SELECT mode(c) g FROM (SELECT count(*) c FROM t GROUP BY step, split, group_id)")["g"][0])
        return counts, lengths


# ---------------------------------------------------------------------------- statistics


def weighted_quantiles(values: np.ndarray, counts: np.ndarray, qs: Sequence[float]) -> list[float]:
    """Quantiles (linear interpolation, as numpy's default) of a sample given as sorted distinct values with counts."""
    cum = np.cumsum(counts)
    n = int(cum[-1])
    out = []
    for q in qs:
        i = q * (n - 1)
        lo, hi = (values[np.searchsorted(cum, j, side="right")] for j in (math.floor(i), math.ceil(i)))
        out.append(float(lo + (i - math.floor(i)) * (hi - lo)))
    return out


def bootstrap_mean(values: np.ndarray, counts: np.ndarray, n_boot: int, rng: np.random.Generator,
                   level: float = 0.95) -> tuple[float, float, float]:
    """Mean of a sample given as distinct ``values`` with ``counts``, and its percentile bootstrap CI.

    Resampling n units with replacement is a multinomial draw over the distinct values,
    so this equals the ordinary bootstrap in distribution at O(n_boot x distinct) cost.
    """
    n = int(counts.sum())
    if n == 0:
        return math.nan, math.nan, math.nan
    mean = float(values @ counts / n)
    draws = rng.multinomial(n, counts / n, size=n_boot) @ values / n
    lo, hi = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return mean, float(lo), float(hi)


def spearman_trend(x: np.ndarray, y: np.ndarray, worse: str, rng: np.random.Generator,
                   n_perm: int = 20000) -> dict[str, Any]:
    """Spearman rho of ``y`` on ``x``, a two-sided permutation p-value and whether ``y`` worsens.

    ``worse`` is ``"up"`` or ``"down"``: the direction in which the measure gets worse.
    The p-value is exact (all permutations) for up to 8 points, else Monte Carlo with
    ``n_perm`` permutations. ``monotone`` means every step between consecutive bins moves
    strictly in the worsening direction.
    """
    ok = ~(np.isnan(x) | np.isnan(y))
    x, y = x[ok], y[ok]
    n = len(x)
    out = {"n_bins": n, "rho": math.nan, "p_value": math.nan, "monotone": False, "verdict": "too few bins"}
    if n < 3:
        return out
    rx = pd.Series(x).rank().to_numpy()
    ry = pd.Series(y).rank().to_numpy()
    if np.std(ry) == 0:
        return {**out, "rho": 0.0, "p_value": 1.0, "verdict": "flat"}

    def rho(a: np.ndarray) -> np.ndarray:
        a = a - a.mean(axis=-1, keepdims=True)
        b = rx - rx.mean()
        return (a @ b) / np.sqrt((a**2).sum(-1) * (b**2).sum())

    r = float(rho(ry))
    perms = (np.array(list(itertools.permutations(range(n)))) if n <= 8
             else np.argsort(rng.random((n_perm, n)), axis=1))
    null = rho(ry[perms])
    p = float(np.mean(np.abs(null) >= abs(r) - 1e-12))
    steps = np.diff(y[np.argsort(x)])
    sign = 1 if worse == "up" else -1
    monotone = bool(np.all(sign * steps > 0))
    worsens = sign * r > 0
    verdict = ("worsens monotonically" if worsens and monotone else
               "worsens (not monotonically)" if worsens else "does not worsen")
    return {"n_bins": n, "rho": r, "p_value": p, "monotone": monotone, "verdict": verdict}


def _fit_theory(eng: Engine) -> tuple[theory.StarvationModel | None, str]:
    if not eng.categorised:
        return None, "no theory overlay: the model is fitted to oracle reads, which need skill categories"
    if eng.horizon_kind != "steps":
        return None, "no theory overlay: the log has no step horizon (the model is in steps)"
    counts, lengths = eng.fit_inputs()
    # The likelihood depends on the data through these counts only, so scaling them down to
    # at most 2M rollouts keeps the fit (to rounding) and bounds memory.
    c = counts["c"].to_numpy()
    c = np.maximum(1, np.round(c * min(1.0, 2e6 / c.sum()))).astype(int)
    k = max(1, int(round(lengths["k_read"] or 1)))
    slope = lengths["slope"] if pd.notna(lengths["slope"]) else 0.0
    icpt = lengths["icpt"] if pd.notna(lengths["icpt"]) else k
    try:
        model = theory.fit_model(
            np.repeat(counts["o"].to_numpy(bool), c), np.repeat(counts["h"].to_numpy(np.int64), c),
            np.repeat(counts["s"].to_numpy(int), c).astype(bool),
            group_size=max(2, int(lengths["group_size"])), selector_tokens=k,
            base_tokens=max(0, int(round(icpt - k))), tokens_per_step=max(0, int(round(slope))))
    except ValueError as err:
        return None, f"no theory overlay: {err}"
    return model, (f"fitted theory: p_oracle={model.p_oracle:.3f} q_step={model.q_step:.3f} s_wrong={model.s_wrong:.3f} "
                   f"G={model.group_size} k={model.selector_tokens} L(H)={model.selector_tokens + model.base_tokens}"
                   f"+{model.tokens_per_step}H")


# ---------------------------------------------------------------------------- the audit


def run_audit(path: str | Path, fmt: str = "auto", tasks: str | Path | readers.TaskTable | None = None,
              skip_bad: bool = False, split: str | None = "train", n_bins: int = 8, n_boot: int = 1000, seed: int = 0,
              tokenizer: Any = None, read_patterns: Sequence[str] = readers.DEFAULT_READ_PATTERNS,
              reward_columns: Sequence[str] | None = None, success_threshold: float = 1.0,
              std_ddof: int = 1, std_eps: float = 1e-4, threads: int = 2, memory_limit: str = "512MB") -> AuditResult:
    """Audit one log. ``split=None`` audits every split; the others mirror the CLI flags."""
    task_table = readers.TaskTable.load(tasks) if isinstance(tasks, (str, Path)) else tasks
    opts = readers.ReaderOptions(tokenizer=tokenizer, read_patterns=tuple(read_patterns), tasks=task_table,
                                 reward_columns=tuple(reward_columns) if reward_columns else None,
                                 success_threshold=success_threshold, std_ddof=std_ddof, std_eps=std_eps,
                                 skip_bad=skip_bad)
    with open_log(path, fmt, opts, split, n_bins, threads, memory_limit) as eng:
        return _measures(eng, str(path), n_boot, np.random.default_rng(seed))


def _readable_by_duckdb(eng: Engine, files: Sequence[Path]) -> list[Path]:
    """The ``files`` DuckDB reads whole; each other one is reported as a corrupt file (raised or skipped)."""
    con = duckdb.connect(config={"threads": 1})
    good = []
    for file in files:
        try:
            con.sql(f"SELECT max(hash(COLUMNS(*))) FROM read_parquet({_sql_list([file])})").fetchall()
        except duckdb.Error as err:
            if not _data_error(err):
                raise
            eng.problems.bad_file("corrupt file", f"{file}: DuckDB cannot read it ({readers.files.first_line(err)}); "
                                                  "expected a trajectory table part")
            continue
        good.append(file)
    con.close()
    if len(good) == len(files):
        raise Unreadable(f"{eng.source}: the input cannot be read, though each part can on its own")
    if not good:
        raise ArtifactError(f"{eng.source}: empty input: no {eng.fmt} rows to audit\n{eng.problems.summary()}")
    return good


def _inside(child: Path, parent: Path) -> bool:
    child, parent = child.resolve(), parent.resolve()
    return child == parent or parent in child.parents


@contextlib.contextmanager
def open_log(path: str | Path, fmt: str = "auto", opts: readers.ReaderOptions = readers.ReaderOptions(),
             split: str | None = "train", n_bins: int = 8, threads: int = 2,
             memory_limit: str = "512MB") -> Iterator[Engine]:
    """Read, check and stage one log; yields the :class:`Engine` over its valid rows.

    Bad files and rows are raised, or skipped and counted in ``engine.problems`` when
    ``opts.skip_bad``. Nothing is written under ``path``: staged tables and DuckDB's spill
    files live in a scratch directory that is removed on exit.
    """
    path = Path(path)
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    fmt = detect_format(path) if fmt == "auto" else fmt
    if path.is_dir() and _inside(Path(tempfile.gettempdir()), path):
        raise ArtifactError(f"{path}: the temporary directory {tempfile.gettempdir()} lies inside the audited "
                            "directory; set TMPDIR elsewhere (the audit never writes into its input)")
    problems = readers.Problems(skip_bad=opts.skip_bad)
    scratch = Path(tempfile.mkdtemp(prefix="skillgate-audit-"))
    eng = None
    try:
        jsonl_table = fmt == "table" and (path.suffix == ".jsonl" or (path.is_dir() and any(path.glob("*.jsonl"))))
        staged = fmt not in ("kit", "table") or jsonl_table
        if fmt == "kit":
            files = readers.check_parquet_tables(sorted((path / "trajectories").glob("*.parquet")), problems,
                                                 every_column=True)
        elif jsonl_table:
            files = readers.stage_jsonl_tables(_table_files(path, ".jsonl"), scratch, problems)
        elif fmt == "table":
            files = readers.check_parquet_tables(_table_files(path, ".parquet"), problems)
        else:
            files = _stage_external(path, fmt, opts, problems, scratch)
        if not files:
            raise ArtifactError(f"{path}: empty input: no {fmt} rows to audit"
                                + (f"\n{problems.summary()}" if problems.any_skipped else ""))
        eng = Engine(path, fmt, problems, threads, memory_limit, scratch)
        try:
            eng.open(files, staged, split, opts.std_ddof, opts.std_eps, n_bins)
        except Unreadable:
            if staged:
                raise
            # Which part DuckDB's reader rejects (rare: the checks read every page with Arrow's reader).
            eng.con.close()
            files = _readable_by_duckdb(eng, files)
            eng = Engine(path, fmt, problems, threads, memory_limit, scratch)
            eng.open(files, staged, split, opts.std_ddof, opts.std_eps, n_bins)
        if not staged:
            eng.advantage_check()
        yield eng
    finally:
        if eng is not None:
            eng.con.close()
        shutil.rmtree(scratch, ignore_errors=True)


def _measures(eng: Engine, source: str, n_boot: int, rng: np.random.Generator) -> AuditResult:
    agg = eng.per_bin()
    with np.errstate(invalid="ignore", divide="ignore"):
        agg["sign_negative"] = agg["neg"] / agg["reads"]
        agg["sign_zero"] = agg["zero"] / agg["reads"]
        agg["sign_wrong"] = agg["wrong"].astype(float) / (agg["reads"] - agg["zero"])
    hist = eng.share_histogram()
    quant = []
    for b in agg["bin"].tolist():
        sub = hist if pd.isna(b) else hist[hist["bin"] == b]
        sub = sub.groupby("s", sort=True)["c"].sum()
        quant.append(dict(zip(("share_q25", "share_median", "share_q75"),
                              weighted_quantiles(sub.index.to_numpy(float), sub.to_numpy(), (0.25, 0.5, 0.75)))))
    agg = pd.concat([agg, pd.DataFrame(quant)], axis=1)
    vg = eng.value_groups()
    value = []
    for b in agg["bin"].tolist():
        sub = vg if pd.isna(b) else vg[vg["bin"] == b]
        mean, lo, hi = bootstrap_mean(sub["d"].to_numpy(float), sub["c"].to_numpy(float), n_boot, rng)
        value.append({"value": mean, "value_lo": lo, "value_hi": hi, "value_groups": int(sub["c"].sum())})
    agg = pd.concat([agg, pd.DataFrame(value)], axis=1)
    overall = agg[agg["bin"].isna()].drop(columns="bin").iloc[0].to_dict()
    bins = agg[agg["bin"].notna()].reset_index(drop=True)
    bins["bin"] = bins["bin"].astype(int)
    trends = pd.DataFrame([{"measure": m, "worse": w, **spearman_trend(bins["h_mean"].to_numpy(float),
                                                                       bins[m].to_numpy(float), w, rng)}
                           if eng.categorised or m not in BY_CATEGORY else
                           {"measure": m, "worse": w, "n_bins": 0, "rho": math.nan, "p_value": math.nan,
                            "monotone": False, "verdict": "needs skill categories"}
                           for m, w in TRENDS])
    first, last = bins["share_median"].iloc[0], bins["share_median"].iloc[-1]
    model, note = _fit_theory(eng)
    curves = pd.DataFrame()
    if model is not None:
        grid = np.linspace(bins["h_min"].min(), bins["h_max"].max(), 50)
        curves = pd.DataFrame({"horizon": grid, "share": model.share(grid), "sign_error": model.sign_error(grid),
                               "value": model.value(grid), "zero_credit": model.zero_credit(grid),
                               "oracle_read": np.full_like(grid, model.p_oracle), "success": model.success(grid)})
    return AuditResult(source=source, fmt=eng.fmt, horizon_kind=eng.horizon_kind, bins=bins, overall=overall,
                       trends=trends, dilution=float(first / last) if last > 0 else math.inf, problems=eng.problems,
                       categorised=eng.categorised,
                       n_rows=eng.n_rows, model=model, model_note=note, curves=curves)


# ---------------------------------------------------------------------------- figures


def figures(result: AuditResult) -> dict[str, tuple[Any, pd.DataFrame]]:
    """``{stable name: (figure, the data drawn)}`` for ``audit_share/sign/value/reads`` and ``audit_summary``."""
    import matplotlib.pyplot as plt

    from skillgate_lib.plots import METHOD_COLORS

    b, cv = result.bins, result.curves
    xlabel = "horizon H (steps)" if result.horizon_kind == "steps" else "horizon (response tokens)"

    def share(ax):
        ax.errorbar(b["h_mean"], 100 * b["share_median"], yerr=[100 * (b["share_median"] - b["share_q25"]),
                    100 * (b["share_q75"] - b["share_median"])], fmt="o", capsize=3, label="audited median (IQR)")
        if not cv.empty:
            ax.plot(cv["horizon"], 100 * cv["share"], color=METHOD_COLORS["theory"], label="theory k/L(H)")
        ax.set(xlabel=xlabel, ylabel="selector share of loss weight (%)",
               title=f"Share (dilution {result.dilution:.1f}x)")
        ax.legend()

    def sign(ax):
        for col, lab in (("sign_wrong", "wrong-signed | A != 0"), ("sign_negative", "A < 0"), ("sign_zero", "A = 0")):
            ax.plot(b["h_mean"], b[col], "o-", label=lab)
        if not cv.empty:
            ax.plot(cv["horizon"], cv["sign_error"], color=METHOD_COLORS["theory"], label="theory sign error")
        ax.set(xlabel=xlabel, ylabel="fraction of read actions", title="Sign", ylim=(0, 1))
        ax.legend()

    def value(ax):
        ax.errorbar(b["h_mean"], 100 * b["value"], yerr=[100 * (b["value"] - b["value_lo"]),
                    100 * (b["value_hi"] - b["value"])], fmt="o", capsize=3, label="audited (95% bootstrap CI)")
        if not cv.empty:
            ax.plot(cv["horizon"], 100 * cv["value"], color=METHOD_COLORS["theory"], label="theory q^H - s_wrong")
        ax.axhline(0, color="0.5", lw=0.8)
        ov = result.overall
        title = (f"Value {100 * ov['value']:+.1f} pp [{100 * ov['value_lo']:+.1f}, {100 * ov['value_hi']:+.1f}]"
                 if result.categorised else "Value (needs skill categories: --tasks)")
        ax.set(xlabel=xlabel, ylabel="success(oracle read) - success(other) (pp)", title=title)
        ax.legend()

    def reads(ax):
        ax.plot(b["h_mean"], b["oracle_read"], "o-", label="oracle read")
        ax.plot(b["h_mean"], b["misleading_read"], "o-", label="misleading read")
        ax.plot(b["h_mean"], b["success"], "o-", label="success")
        if not cv.empty:
            ax.plot(cv["horizon"], cv["success"], color=METHOD_COLORS["theory"], label="theory success")
        ax2 = ax.twinx()
        ax2.plot(b["h_mean"], b["reads_per_trial"], "s--", color="0.4", label="reads / trial")
        ax2.set_ylabel("reads per trial")
        ax2.set_ylim(0, 1.2 * max(1.0, float(b["reads_per_trial"].max())))
        ax2.grid(False)
        ax.set(xlabel=xlabel, ylabel="fraction of trials", title="Read behaviour", ylim=(0, 1))
        ax.legend(loc="upper left")
        ax2.legend(loc="upper right")

    table = result.summary_table()
    out = {}
    for name, draw in (("audit_share", share), ("audit_sign", sign), ("audit_value", value), ("audit_reads", reads)):
        fig, ax = plt.subplots(figsize=(5, 3.6))
        draw(ax)
        out[name] = (fig, table)
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for ax, draw in zip(axes.flat, (share, sign, value, reads)):
        draw(ax)
    fig.suptitle(f"Selector credit audit: {Path(result.source).name} ({result.n_rows:,} trajectories)")
    fig.tight_layout()
    out["audit_summary"] = (fig, table)
    return out


# ---------------------------------------------------------------------------- synthetic logs


def write_synthetic_log(run_dir: str | Path, n_rows: int, model: theory.StarvationModel | None = None,
                        horizons: Sequence[int] = tuple(range(1, 9)), rows_per_step: int = 4096,
                        extra_read: float = 0.0, seed: int = 0, note: str = "") -> Path:
    """Write a SYNTHETIC kit run of about ``n_rows`` rollouts drawn from the theory model's process.

    Per prompt group (``model.group_size`` rollouts, horizon H uniform over ``horizons``):
    each rollout reads the oracle with probability ``p_oracle``, else a misleading /
    relevant / irrelevant skill (probabilities 0.5 / 0.3 / 0.2); with probability
    ``extra_read`` it adds a second, non-oracle read. It succeeds with probability
    ``q_step**H`` after an oracle read and ``s_wrong`` otherwise (reward = success).
    Each read's name spans ``selector_tokens`` tokens; L = reads*k + base + tps*H. Advantages
    are broadcast GRPO ``(R - mean) / (std + 1e-4)`` (unbiased std), ``sel_weight = k_total / L``.
    Parts are written one step at a time, so memory stays bounded whatever ``n_rows``.
    """
    model = model or theory.StarvationModel()
    run_dir = Path(run_dir)
    writer = RunWriter(run_dir)
    G, k = model.group_size, model.selector_tokens
    rng = np.random.default_rng(seed)
    groups_per_step = max(1, rows_per_step // G)
    n_groups = max(1, -(-n_rows // G))
    other_cats = np.array(["misleading", "relevant", "irrelevant"])
    hs = np.asarray(horizons, dtype=np.int64)
    writer.write_config({"synthetic": True, "note": note or "SYNTHETIC log drawn from theory.StarvationModel",
                         "generator": "skillgate_lib.audit.write_synthetic_log", "n_rows": n_groups * G, "seed": seed,
                         "horizons": hs.tolist(), "extra_read": extra_read, "model": model.__dict__, "credit": "outcome"})
    for step, g0 in enumerate(range(0, n_groups, groups_per_step)):
        ng = min(groups_per_step, n_groups - g0)
        n = ng * G
        H = np.repeat(rng.choice(hs, size=ng), G)
        oracle = rng.random(n) < model.p_oracle
        success = rng.random(n) < np.where(oracle, model.q_step ** H.astype(float), model.s_wrong)
        reward = success.astype(float).reshape(ng, G)
        sd = reward.std(axis=1, ddof=1, keepdims=True)
        adv = ((reward - reward.mean(axis=1, keepdims=True)) / (sd + 1e-4)).ravel()
        n_reads = 1 + (rng.random(n) < extra_read)
        first_cat = np.where(oracle, "oracle", other_cats[rng.choice(3, size=n, p=[0.5, 0.3, 0.2])])
        second_cat = other_cats[rng.choice(3, size=n, p=[0.5, 0.3, 0.2])]
        two = n_reads == 2
        offsets = np.concatenate([[0], np.cumsum(n_reads)])
        total = int(offsets[-1])
        cats = np.empty(total, dtype=object)
        cats[offsets[:-1]] = first_cat
        cats[offsets[:-1][two] + 1] = second_cat[two]
        skill_id = rng.integers(0, 5, size=total)
        names = np.char.add(np.char.add(np.asarray(cats, dtype=str), "-"), skill_id.astype(str))
        pos = np.arange(total) - np.repeat(offsets[:-1], n_reads)  # read index within its row
        starts = 2 + pos * (k + 4)
        L = n_reads * k + model.base_tokens + model.tokens_per_step * H
        ref = lambda values, typ: pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(values, typ))
        table = pa.table({
            "step": pa.array(np.full(n, step, np.int64)), "split": pa.array(["train"] * n),
            "group_id": pa.array(np.char.add("g", np.repeat(np.arange(g0, g0 + ng), G).astype(str))),
            "rollout": pa.array(np.tile(np.arange(G, dtype=np.int64), ng)),
            "task_id": pa.array(np.char.add("task-", np.repeat(np.arange(g0, g0 + ng), G).astype(str))),
            "domain": pa.array(np.array(["ledger", "recipes", "routing", "inventory", "calendar"])[H % 5]),
            "horizon": pa.array(H), "response_tokens": pa.array(L.astype(np.int64)),
            "reward": pa.array(reward.ravel()), "success": pa.array(success),
            "read_skills": ref(names, pa.string()), "read_categories": ref(cats.astype(str), pa.string()),
            "read_tok_start": ref(starts.astype(np.int64), pa.int64()),
            "read_tok_end": ref((starts + k).astype(np.int64), pa.int64()),
            "adv_exec": pa.array(adv), "read_adv": ref(np.repeat(adv, n_reads), pa.float64()),
            "sel_weight": pa.array(n_reads * k / L), "credit": pa.array(["outcome"] * n),
        }, schema=TRAJECTORY_SCHEMA)
        pq.write_table(table, run_dir / "trajectories" / f"step-{step:06d}-train.parquet", compression="zstd",
                       write_page_checksum=True)
    return run_dir


# ---------------------------------------------------------------------------- CLI


def _fmt_table(df: pd.DataFrame) -> str:
    show = df.copy()
    for c in ("share_median", "share_q25", "share_q75"):
        show[c] = show[c].map(lambda v: f"{100 * v:.2f}%")
    for c in ("sign_negative", "sign_wrong", "sign_zero", "oracle_read", "misleading_read", "success"):
        show[c] = show[c].map(lambda v: f"{v:.3f}")
    for c in ("value", "value_lo", "value_hi"):
        show[c] = show[c].map(lambda v: "nan" if pd.isna(v) else f"{100 * v:+.1f}")
    show["reads_per_trial"] = show["reads_per_trial"].map(lambda v: f"{v:.2f}")
    show = show.rename(columns={"value": "value_pp", "value_lo": "lo", "value_hi": "hi", "value_groups": "groups",
                                "share_median": "share_med", "misleading_read": "mislead_read"})
    return show.to_string(index=False)


def categories_note(fmt: str) -> str:
    """Why Sign and Value are missing from an audit of a log without read categories, and what to pass."""
    need = ("pass --tasks META with the slate of each task: " + readers.tasks.EXPECTED if fmt in ("trl", "verl", "nemo")
            else f"the table needs a read_categories column (one of {', '.join(CATEGORIES)} per read)")
    return ("no skill categories: Share, read counts and advantage signs are reported; Sign (wrong-signed reads), "
            f"Value and the oracle/misleading read rates need them ({need})")


def report(result: AuditResult) -> str:
    """The CLI's text report: per-bin table, trends, dilution, theory fit and any skipped rows."""
    lines = [f"audit of {result.source} ({result.fmt}, {result.n_rows:,} trajectories, horizon = {result.horizon_kind})"]
    if not result.categorised:
        lines.append(categories_note(result.fmt))
    lines += ["", _fmt_table(result.summary_table()), "",
             f"dilution (median Share, shortest / longest bin): {result.dilution:.2f}x", "", "trends vs horizon:"]
    for r in result.trends.itertuples():
        lines.append(f"  {r.measure:<14} rho {r.rho:+.3f}  p {r.p_value:<8.2g} -> {r.verdict}")
    lines += ["", result.model_note]
    if result.problems.summary():
        lines += ["", result.problems.summary()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m skillgate_lib audit", description=__doc__.splitlines()[0])
    p.add_argument("path", type=Path, help="run directory, log directory or table file")
    p.add_argument("--format", default="auto", choices=FORMATS, help="log format (default: detect)")
    p.add_argument("--tasks", type=Path, help="task metadata (JSONL/JSON/CSV/Parquet): slate categories per task, "
                                              "needed for Sign and Value of TRL, verl and NeMo-RL logs")
    p.add_argument("--skip-bad", action="store_true", help="skip bad files and rows and report counts by reason")
    p.add_argument("--out", type=Path, help="figure directory (default build/audit/<name>)")
    p.add_argument("--split", default="train", help="train, eval or all (default train)")
    p.add_argument("--bins", type=int, default=8, help="maximum horizon bins (default 8)")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap replicates for Value (default 1000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tokenizer", help="Hugging Face tokenizer name or path (default: whitespace fallback)")
    p.add_argument("--read-pattern", action="append", help="regex with a 'name' group, repeatable (default: "
                                                           "<read>name</read> and ~/.claude/skills/<name>/SKILL.md)")
    p.add_argument("--reward-columns", help="TRL: comma-separated reward columns to sum (default: all numeric)")
    p.add_argument("--success-threshold", type=float, default=1.0, help="success = reward >= this, if not logged")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--memory-limit", default="512MB", help="DuckDB memory limit (default 512MB)")
    p.add_argument("--no-figures", action="store_true")
    args = p.parse_args(argv)
    out = args.out or paths.BUILD_DIR / "audit" / args.path.resolve().name
    if not args.no_figures and _inside(out, args.path):
        print(f"audit: error: --out {out} lies inside the audited {args.path}; the audit never writes into its input",
              flush=True)
        return 2
    try:
        result = run_audit(
            args.path, fmt=args.format, tasks=args.tasks, skip_bad=args.skip_bad,
            split=None if args.split == "all" else args.split, n_bins=args.bins, n_boot=args.n_boot, seed=args.seed,
            tokenizer=args.tokenizer, read_patterns=tuple(args.read_pattern or readers.DEFAULT_READ_PATTERNS),
            reward_columns=args.reward_columns.split(",") if args.reward_columns else None,
            success_threshold=args.success_threshold, threads=args.threads, memory_limit=args.memory_limit)
    except ArtifactError as err:
        hint = isinstance(err, readers.BadInput) and not args.skip_bad
        print(f"audit: error: {err}" + ("\n(--skip-bad skips bad files and rows and counts them by reason)" if hint else ""),
              flush=True)
        return 1
    print(report(result), flush=True)
    if not args.no_figures:
        import matplotlib.pyplot as plt

        from skillgate_lib.plots import savefig

        for name, (fig, data) in figures(result).items():
            savefig(name, fig, data=data, out_dir=out)
            plt.close(fig)
        result.trends.to_csv(out / "audit_trends.csv", index=False)
        print(f"\nfigures: {out}", flush=True)
    return 0
