"""The audit's engine: stage a log as Parquet parts, check every row, and query it with DuckDB.

:func:`open_log` reads one log (a kit run, a TRL / verl / NeMo-RL log through
:mod:`skillgate_lib.readers`, or a plain table), checks and stages it in a scratch
directory, and yields an :class:`Engine`: DuckDB views over the valid rows (``src``: the
input in the trajectory schema; ``t``: per-row Share, read signs, categories and horizon
bin) and the aggregate queries the measures are computed from. Nothing is written under
the audited path.

**Why DuckDB.** Its SQL scans Parquet globs out of core with list functions and lambdas
over the per-read columns, windowed group statistics and exact quantiles, spilling to disk
under a set ``memory_limit`` and ``threads``, so every aggregate is one vectorised query
and nothing loads the whole log into Python (a pyarrow dataset scan would need
hand-written batch loops for the group windows and quantiles).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator, Sequence

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from skillgate_lib import readers
from skillgate_lib.logs import CATEGORIES, TRAJECTORY_SCHEMA, ArtifactError
from skillgate_lib.readers import REQUIRED, detect_format

FORMATS = ("auto", "kit", "trl", "verl", "nemo", "table")
_DUCK_TYPES = {"int64": "BIGINT", "string": "VARCHAR", "large_string": "VARCHAR", "double": "DOUBLE", "bool": "BOOLEAN",
               "list<item: string>": "VARCHAR[]", "list<item: int64>": "BIGINT[]", "list<item: double>": "DOUBLE[]"}


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
        """Build the views over ``files``: the checked input, per-row measures, then horizon bins.

        ``staged``: the parts were written by the kit's staging (they carry ``_file`` /
        ``_row`` / ``_rownum``); else DuckDB names each row's file and row itself.
        """
        self._source_views(files, staged, split)
        self._measure_views(files, std_ddof, std_eps)
        self._bin_view(n_bins)

    def _source_views(self, files: Sequence[Path], staged: bool, split: str | None) -> None:
        """``src0`` (the input in the trajectory schema), ``gstats`` / ``src1`` (group statistics); bad rows reported."""
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

    def _measure_views(self, files: Sequence[Path], std_ddof: int, std_eps: float) -> None:
        """``t0`` / ``t1``: the valid rows with recomputed advantages, selector tokens, read advantages and Share."""
        # Population (ddof 0) or sample (ddof 1) std: the group size is known, so rescale the sample std.
        sd = "coalesce(_gsd, 0)" if std_ddof == 1 else "coalesce(_gsd, 0) * sqrt((_gvalid - 1.0) / _gvalid)"
        self.x(f"""CREATE TEMP VIEW t0 AS SELECT *,
            (reward - _gmean) / ({sd} + {std_eps}) AS adv_re,
            coalesce(list_sum(list_transform(range(len(read_tok_start)),
                lambda i: read_tok_end[i + 1] - read_tok_start[i + 1])), 0) AS k
            FROM src1 WHERE {self._bad_case} IS NULL""")
        self.x("""CREATE TEMP VIEW t1 AS SELECT *,
            coalesce(read_adv, list_transform(read_skills, lambda x: coalesce(adv_exec, adv_re))) AS ra,
            coalesce(sel_weight, least(k / response_tokens, 1.0)) AS share,
            CASE WHEN grad_weight_all > 0 THEN least(grad_weight_sel / grad_weight_all, 1.0) END AS gshare
            FROM t0""")
        counts = self.q("SELECT count(*) n, count(horizon) nh, count(DISTINCT horizon) dh, "
                        "count(DISTINCT response_tokens) dl, count(gshare) ng FROM t1").iloc[0]
        self.n_grad = int(counts["ng"])
        if counts["n"] == 0:
            raise ArtifactError(f"{files[0]}: no valid rows left after skipping bad ones")
        self.n_rows = int(counts["n"])
        self.horizon_kind = "steps" if counts["nh"] == counts["n"] else "response_tokens"
        self._distinct_horizons = int(counts["dh"] if self.horizon_kind == "steps" else counts["dl"])

    def _bin_view(self, n_bins: int) -> None:
        """``t``: every valid row with its horizon ``h``, bin, read counts and (if categorised) read categories."""
        hcol = "horizon" if self.horizon_kind == "steps" else "response_tokens"
        if self._distinct_horizons <= n_bins:
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

    def grad_share_quantiles(self) -> pd.DataFrame:
        """Gradient Share (``grad_weight_sel / grad_weight_all``) by bin and overall: count, mean and quartiles
        (linear interpolation, as the loss-weight Share's), over the rows that log the gradient weights."""
        return self.q("""SELECT bin, count(gshare) gshare_n, avg(gshare) gshare_mean,
            quantile_cont(gshare, 0.25) gshare_q25, quantile_cont(gshare, 0.5) gshare_median,
            quantile_cont(gshare, 0.75) gshare_q75
            FROM t GROUP BY GROUPING SETS ((bin), ()) ORDER BY bin NULLS LAST""")

    def share_histogram(self) -> pd.DataFrame:
        """Distinct (bin, Share rounded to 1e-9) with counts: quantiles exact to 1e-9, in an aggregate that spills."""
        return self.q("SELECT bin, round(share, 9) s, count(*) c FROM t GROUP BY ALL ORDER BY bin, s")

    def value_groups(self) -> pd.DataFrame:
        """Distinct (bin, group difference) with their group counts, over matched groups, in a fixed order (the
        bootstrap draws by position, so an order left to DuckDB's threads would move the interval between runs)."""
        return self.q(f"""WITH g AS (SELECT avg(h) hg,
                count(*) FILTER (has_oracle) n_o, sum(succ) FILTER (has_oracle) s_o,
                count(*) FILTER (NOT has_oracle AND n_reads > 0) n_x,
                sum(succ) FILTER (NOT has_oracle AND n_reads > 0) s_x
              FROM t GROUP BY step, split, group_id)
            SELECT {self.bin_of('hg')} AS bin, round(s_o / n_o - s_x / n_x, 12) AS d, count(*) c
            FROM g WHERE n_o > 0 AND n_x > 0 GROUP BY ALL ORDER BY bin, d""")

    def fit_inputs(self) -> tuple[pd.DataFrame, dict[str, float]]:
        counts = self.q("SELECT horizon::BIGINT h, has_oracle o, succ s, count(*) c FROM t WHERE n_reads > 0 GROUP BY ALL")
        lengths = self.q("""SELECT regr_slope(response_tokens, horizon) slope, regr_intercept(response_tokens, horizon) icpt,
            sum(k) / nullif(sum(n_reads), 0) k_read FROM t WHERE n_reads > 0""").iloc[0].to_dict()
        lengths["group_size"] = float(self.q("SELECT mode(c) g FROM (SELECT count(*) c FROM t GROUP BY step, split, group_id)")["g"][0])
        return counts, lengths


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


def is_inside(child: Path, parent: Path) -> bool:
    """Whether ``child`` is ``parent`` or lies under it (symlinks resolved)."""
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
    if path.is_dir() and is_inside(Path(tempfile.gettempdir()), path):
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
