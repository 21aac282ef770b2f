"""The audit itself: Share, Sign and Value by horizon bin from an :class:`~skillgate_lib.audit.engine.Engine`.

:func:`run_audit` opens a log, computes every measure per horizon bin and overall, tests
each for a trend against horizon and fits the theory overlay; :class:`AuditResult` holds
what it found.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from skillgate_lib import readers, theory
from skillgate_lib.audit.engine import Engine, open_log
from skillgate_lib.audit.fit import fit_theory, theory_curves
from skillgate_lib.audit.stats import ALPHA, bootstrap_mean, spearman_trend, weighted_quantiles

#: (measure column, direction in which it worsens with horizon)
TRENDS = (("share_median", "down"), ("gshare_median", "down"), ("sign_wrong", "up"), ("sign_negative", "up"), ("sign_zero", "up"),
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
    grad_dilution: float = math.nan
    """median Gradient Share of the shortest bin / of the longest (nan without the gradient weights)."""
    n_grad: int = 0
    """rows that log the gradient weights (``grad_weight_sel`` / ``grad_weight_all``); 0: Gradient Share is nan."""
    alpha: float = ALPHA
    """the trend test's level: a trend's ``verdict`` is "no trend" unless its p-value <= alpha."""

    def summary_table(self) -> pd.DataFrame:
        cols = ["bin", "h_min", "h_max", "n", "share_median", "share_q25", "share_q75", "gshare_median", "gshare_q25",
                "gshare_q75", "ratio_share", "ratio_gshare", "sign_negative", "sign_wrong",
                "sign_zero", "value", "value_lo", "value_hi", "value_groups", "oracle_read", "misleading_read",
                "reads_per_trial", "success"]
        rows = pd.concat([self.bins, pd.DataFrame([{**self.overall, "bin": "all"}])], ignore_index=True)
        return rows[cols]


def side_by_side(results: dict[str, AuditResult]) -> pd.DataFrame:
    """One row per audited run: Share and Gradient Share (median) at the shortest and longest horizon bin with
    their dilutions, the wrong-signed fraction at both ends, Value with its interval, and the predicted
    selector-signal ratios averaged over the bins."""
    rows = []
    for name, r in results.items():
        first, last, ov = r.bins.iloc[0], r.bins.iloc[-1], r.overall
        rows.append({"run": name, "h_short": first["h_min"], "h_long": last["h_max"],
                     "share_short": first["share_median"], "share_long": last["share_median"], "dilution": r.dilution,
                     "gshare_short": first["gshare_median"], "gshare_long": last["gshare_median"],
                     "grad_dilution": r.grad_dilution, "sign_wrong_short": first["sign_wrong"],
                     "sign_wrong_long": last["sign_wrong"], "value": ov["value"], "value_lo": ov["value_lo"],
                     "value_hi": ov["value_hi"], "ratio_share": ov["ratio_share"], "ratio_gshare": ov["ratio_gshare"],
                     "oracle_read": ov["oracle_read"], "success": ov["success"], "trajectories": r.n_rows})
    return pd.DataFrame(rows).set_index("run")


def run_audit(path: str | Path, fmt: str = "auto", tasks: str | Path | readers.TaskTable | None = None,
              skip_bad: bool = False, split: str | None = "train", n_bins: int = 8, n_boot: int = 1000, seed: int = 0,
              tokenizer: Any = None, read_patterns: Sequence[str] = readers.DEFAULT_READ_PATTERNS,
              reward_columns: Sequence[str] | None = None, success_threshold: float = 1.0,
              std_ddof: int = 1, std_eps: float = 1e-4, threads: int = 2, memory_limit: str = "512MB",
              selector_coef: float = 0.2, alpha: float = ALPHA, rescore: Any = None) -> AuditResult:
    """Audit one log. ``split=None`` audits every split; ``selector_coef`` is the lambda of the predicted
    selector-signal ratio; ``alpha`` the trend test's level (:func:`~skillgate_lib.audit.stats.trend_verdict`);
    ``rescore``: a :class:`~skillgate_lib.audit.rescore.Rescorer` that gives a text log its gradient weights (its
    tokenizer is the audit's unless ``tokenizer`` is given); the others mirror the CLI flags."""
    task_table = readers.TaskTable.load(tasks) if isinstance(tasks, (str, Path)) else tasks
    if rescore is not None and tokenizer is None:
        tokenizer = rescore.tokenizer
    opts = readers.ReaderOptions(tokenizer=tokenizer, read_patterns=tuple(read_patterns), tasks=task_table,
                                 reward_columns=tuple(reward_columns) if reward_columns else None,
                                 success_threshold=success_threshold, std_ddof=std_ddof, std_eps=std_eps,
                                 skip_bad=skip_bad, rescorer=rescore)
    with open_log(path, fmt, opts, split, n_bins, threads, memory_limit) as eng:
        return _measures(eng, str(path), n_boot, np.random.default_rng(seed), selector_coef, alpha)


def _measures(eng: Engine, source: str, n_boot: int, rng: np.random.Generator,
              selector_coef: float = 0.2, alpha: float = ALPHA) -> AuditResult:
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
    agg = pd.concat([agg, eng.grad_share_quantiles().drop(columns="bin")], axis=1)
    with np.errstate(invalid="ignore"):
        agg["ratio_share"] = theory.predicted_signal_ratio(agg["value"], agg["share_median"], selector_coef)
        agg["ratio_gshare"] = theory.predicted_signal_ratio(agg["value"], agg["gshare_median"], selector_coef)
    overall = agg[agg["bin"].isna()].drop(columns="bin").iloc[0].to_dict()
    bins = agg[agg["bin"].notna()].reset_index(drop=True)
    bins["bin"] = bins["bin"].astype(int)
    for col in ("ratio_share", "ratio_gshare"):  # "averaged over H": the mean of the bins' predictions
        overall[col] = float(bins[col].mean()) if bins[col].notna().any() else math.nan
    trends = pd.DataFrame([{"measure": m, "worse": w, **spearman_trend(bins["h_mean"].to_numpy(float),
                                                                       bins[m].to_numpy(float), w, rng,
                                                                       alpha=alpha)}
                           if (eng.categorised or m not in BY_CATEGORY) and (eng.n_grad or not m.startswith("gshare")) else
                           {"measure": m, "worse": w, "n_bins": 0, "rho": math.nan, "p_value": math.nan,
                            "monotone": False,
                            "verdict": "needs gradient weights" if m.startswith("gshare") else "needs skill categories"}
                           for m, w in TRENDS])
    first, last = bins["share_median"].iloc[0], bins["share_median"].iloc[-1]
    gfirst, glast = bins["gshare_median"].iloc[0], bins["gshare_median"].iloc[-1]
    grad_dilution = float(gfirst / glast) if eng.n_grad and glast > 0 else math.nan
    model, note = fit_theory(eng)
    curves = pd.DataFrame() if model is None else theory_curves(model, bins["h_min"].min(), bins["h_max"].max())
    return AuditResult(source=source, fmt=eng.fmt, horizon_kind=eng.horizon_kind, bins=bins, overall=overall,
                       trends=trends, dilution=float(first / last) if last > 0 else math.inf, problems=eng.problems,
                       grad_dilution=grad_dilution, n_grad=eng.n_grad, alpha=alpha,
                       categorised=eng.categorised,
                       n_rows=eng.n_rows, model=model, model_note=note, curves=curves)
