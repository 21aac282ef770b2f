"""The audit's text report: three small tables (Share; Sign and Value; reads), trends, dilution, the closed form's
predicted ratio with its measured error, the theory fit and any skipped rows.

Every line fits :data:`WIDTH` columns (file paths in error and skip messages aside, which are never broken);
each table column holds one unit, named in its header (``%`` a percentage of trajectories, reads or weight, ``pp``
percentage points); counts are integers; a legend under each table spells out its abbreviations.

The predicted ratio SkillGate / outcome-only of the closed form
(:func:`skillgate_lib.theory.predicted_signal_ratio`) is printed only beside its error in the kit's own rate
study (:mod:`skillgate_lib.report.rates`, read from the committed ``data/runs/speed`` when the report is
printed): where that study is absent the prediction is not printed at all.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from skillgate_lib import paths, readers
from skillgate_lib.audit.measures import AuditResult
from skillgate_lib.logs import CATEGORIES

#: The widest line the report prints (paths in error and skip messages aside).
WIDTH = 100
#: Fewer matched groups than this in a bin: Value is printed without its interval.
MIN_VALUE_GROUPS = 5
#: The audit's predicted-ratio columns: (audit column, label printed, the rate study's predictor column).
THEORY_RATIOS = (("ratio_share", "theory (loss weight)", "pred_share"),
                 ("ratio_gshare", "theory (gradient)", "pred_gshare"))
#: Each of the rate study's predictors (:data:`skillgate_lib.report.rates.PREDICTORS`) as the report names it.
THEORY_LABELS = {"pred_share": "theory (loss weight)", "pred_gshare": "theory (gradient)",
                 "pred_summed": "theory (summed)"}
#: The trend measures by name.
MEASURE_NAMES = {"share_median": "Share (median)", "gshare_median": "Gradient Share (median)",
                 "sign_wrong": "wrong-signed reads", "sign_negative": "negative reads", "sign_zero": "zero reads",
                 "value": "Value", "oracle_read": "oracle read"}


def categories_note(fmt: str) -> str:
    """Why Sign and Value are missing from an audit of a log without read categories, and what to pass."""
    need = ("pass --tasks META with the slate of each task: " + readers.tasks.EXPECTED if fmt in ("trl", "verl", "nemo")
            else f"the table needs a read_categories column (one of {', '.join(CATEGORIES)} per read)")
    return ("no skill categories: Share, read counts and advantage signs are reported; Sign (wrong-signed reads), "
            f"Value and the oracle/misleading read rates need them ({need})")


#: What the report says when a log holds no gradient weights.
GRADIENT_NOTE = ("no gradient weights (grad_weight_sel / grad_weight_all), so no Gradient Share: kit runs log them from "
                 "the sampling logits, and a run written before they existed gets them by re-running its command "
                 "(same seed, same rollouts); a TRL or verl log gets them with --rescore MODEL (the policy that "
                 "sampled it, re-reading each rollout's text)")

# Phrases the wrapper never breaks (tests and users search the report for them).
_KEEP = ("Sign (wrong-signed reads), Value", "task_id and/or prompt, oracle, skills {name: category}",
         "task_id and/or prompt, skill, category", "the table needs a read_categories column", "pass --tasks META",
         "no skill categories", "no gradient weights", "Gradient Share")


def _wrap(text: str, indent: str = "  ") -> list[str]:
    """``text`` as lines of at most :data:`WIDTH` columns (continuations indented), never breaking a word nor
    a phrase of :data:`_KEEP`."""
    for phrase in _KEEP:
        text = text.replace(phrase, phrase.replace(" ", "\0"))
    lines = textwrap.wrap(text, width=WIDTH, subsequent_indent=indent, break_long_words=False,
                          break_on_hyphens=False)
    return [ln.replace("\0", " ") for ln in lines]


def ratio_text(v: float) -> str:
    """A ratio with three significant digits and never in scientific notation: 5.26x, 71.7x, 511x, 2,120x."""
    if not np.isfinite(v):
        return "-"
    if abs(v) >= 100:
        return f"{v:,.0f}x"
    return f"{v:.1f}x" if abs(v) >= 10 else f"{v:.2f}x"


def _dilution(v: float) -> str:
    return "unbounded (the longest bin's median is 0)" if v == math.inf else ratio_text(v)


def _factor(v: float) -> str:
    """A fold error: 51x, 1.5x."""
    return f"{v:,.0f}x" if v >= 10 else f"{v:.1f}x"


def _p_text(p: float, alpha: float) -> str:
    """A p-value in two significant digits (three where two would print it as ``alpha``), < 0.001 below that."""
    if not np.isfinite(p):
        return "-"
    if p < 0.001:
        return "< 0.001"
    text = f"{p:.2g}"
    return f"{p:.3g}" if float(text) == alpha and p != alpha else text


def _num(f: Callable[[float], str]) -> Callable[[float], str]:
    """``f`` with nan printed as ``-``."""
    return lambda v: "-" if v is None or pd.isna(v) else f(float(v))


_pct = _num(lambda v: f"{100 * v:.1f}")
_pct2 = _num(lambda v: f"{100 * v:.2f}")
_pp = _num(lambda v: f"{100 * v:+.1f}")
_count = _num(lambda v: f"{int(round(v)):,}")


def _horizon(lo: float, hi: float) -> str:
    a, b = (f"{v:.0f}" if float(v).is_integer() else f"{v:g}" for v in (lo, hi))
    return a if a == b else f"{a}-{b}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> list[str]:
    """A text table, columns two spaces apart: column i left-aligned where ``align[i]`` is ``l``, else (and
    past the end of ``align``) right-aligned; the first column left-aligned by default."""
    align = align or "l"
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows)]
    out = []
    for row in (headers, *rows):
        cells = [str(c).ljust(w) if align[i:i + 1] == "l" else str(c).rjust(w)
                 for i, (c, w) in enumerate(zip(row, widths))]
        out.append("  ".join(cells).rstrip())
    return out


def _rows(result: AuditResult) -> list[tuple[str, pd.Series]]:
    """(bin label, row) for each horizon bin, then ``all``."""
    out = [(str(int(r["bin"])), r) for _, r in result.bins.iterrows()]
    overall = pd.Series(result.overall)
    overall["h_min"], overall["h_max"] = result.bins["h_min"].min(), result.bins["h_max"].max()
    return out + [("all", overall)]


def _horizon_header(result: AuditResult) -> tuple[str, str]:
    return (("H", "H: horizon in steps") if result.horizon_kind == "steps" else
            ("tokens", "tokens: response tokens (the log has no step horizon)"))


def _share_table(result: AuditResult) -> list[str]:
    """Trajectories, median Share and its quartiles and, where logged, Gradient Share, by horizon bin."""
    hname, hnote = _horizon_header(result)
    grad = result.n_grad > 0
    headers = ["bin", hname, "n", "Share %", "Share IQR %"] + (["Grad. Share %", "Grad. Share IQR %"] if grad else [])
    rows = []
    for label, r in _rows(result):
        row = [label, _horizon(r["h_min"], r["h_max"]), _count(r["n"]), _pct2(r["share_median"]),
               f"{_pct2(r['share_q25'])}-{_pct2(r['share_q75'])}"]
        if grad:
            row += [_pct2(r["gshare_median"]),
                    "-" if pd.isna(r["gshare_q25"]) else f"{_pct2(r['gshare_q25'])}-{_pct2(r['gshare_q75'])}"]
        rows.append(row)
    legend = (f"{hnote}; n: trajectories; Share: median share of the loss weight on the skill-name tokens"
              + ("; Grad. Share: their median share of the logit-gradient norms" if grad else "")
              + "; IQR: 25th-75th percentile")
    return _table(headers, rows) + _wrap(legend)


def _sign_value_table(result: AuditResult) -> list[str]:
    """Reads and the signs of their advantages; Value with its bootstrap interval (none below
    :data:`MIN_VALUE_GROUPS` matched groups), by horizon bin."""
    hname, _ = _horizon_header(result)
    headers = ["bin", hname, "reads", "negative %", "zero %", "wrong %", "Value pp", "Value 95% CI pp", "groups"]
    rows, few = [], False
    for label, r in _rows(result):
        groups = r.get("value_groups", math.nan)
        if pd.isna(r["value"]):
            ci = "-"
        elif pd.isna(groups) or groups < MIN_VALUE_GROUPS or pd.isna(r["value_lo"]):
            ci, few = f"n<{MIN_VALUE_GROUPS}", True
        else:
            ci = f"[{_pp(r['value_lo'])}, {_pp(r['value_hi'])}]"
        rows.append([label, _horizon(r["h_min"], r["h_max"]), _count(r["reads"]), _pct(r["sign_negative"]),
                     _pct(r["sign_zero"]), _pct(r["sign_wrong"]), _pp(r["value"]), ci,
                     _count(groups) if result.categorised else "-"])
    legend = ("reads: skill reads; negative, zero: reads whose advantage is < 0, = 0; wrong: of the nonzero, an "
              "oracle read's < 0 or another read's > 0; Value: success after an oracle read minus after other "
              "reads, within prompt groups holding both (groups), bootstrap CI"
              + (f"; n<{MIN_VALUE_GROUPS}: under {MIN_VALUE_GROUPS} groups, no interval" if few else ""))
    return _table(headers, rows) + _wrap(legend)


def _reads_table(result: AuditResult) -> list[str]:
    """Oracle and misleading read rates, reads per trial and success, by horizon bin."""
    hname, _ = _horizon_header(result)
    headers = ["bin", hname, "oracle read %", "misleading read %", "reads / trial", "success %"]
    rows = [[label, _horizon(r["h_min"], r["h_max"]), _pct(r["oracle_read"]), _pct(r["misleading_read"]),
             _num(lambda v: f"{v:.2f}")(r["reads_per_trial"]), _pct(r["success"])] for label, r in _rows(result)]
    legend = ("oracle read, misleading read: trials that read at least one such skill; reads / trial: mean skill "
              "reads per trial; success: trials solved")
    return _table(headers, rows) + _wrap(legend)


def _trend_lines(result: AuditResult) -> list[str]:
    """One line per trend measure: rho, p and the label of :func:`skillgate_lib.audit.stats.trend_verdict`."""
    t = result.trends
    names = [MEASURE_NAMES.get(m, m) for m in t["measure"]]
    rows = [[name, "-" if pd.isna(r.rho) else f"{r.rho:+.3f}", _p_text(r.p_value, result.alpha), r.verdict]
            for name, r in zip(names, t.itertuples())]
    legend = (f"rho: Spearman's rank correlation with the horizon; p: its two-sided permutation p-value; "
              f"\"no trend\" unless p <= {result.alpha:g}; monotonically: each bin worse (or better) than the last")
    return ["trends vs horizon", *_table(["measure", "rho", "p", "verdict"], rows, "lrrl"), *_wrap(legend)]


def rate_study_fit(data_dir: Path | None = paths.DATA_DIR) -> pd.DataFrame | None:
    """The kit's rate study's score of each closed-form predictor and of the leave-one-out constant
    (:func:`skillgate_lib.report.rates.predictor_fit` over the AdamW studies of ``data_dir/runs/speed``, as
    the docs compute it), indexed by predictor column (``pred_share``, ...) and ``constant``; None where the
    study's data are absent."""
    if data_dir is None or not (Path(data_dir) / "runs" / "speed").is_dir():
        return None
    from skillgate_lib.report import rates

    diagnosis = Path(data_dir) / "runs" / "diagnosis"
    runs = rates.all_runs(Path(data_dir) / "runs" / "speed")
    if runs.empty:
        return None
    study_table = rates.rate_table(runs, diagnosis / "probes", diagnosis / "gradient_proxy" / "summary.csv")
    if study_table.empty:
        return None
    fit = rates.predictor_fit(study_table[study_table["optimizer"] == "adamw"]).set_index("predictor")
    by_label = {label: col for col, label in rates.PREDICTORS.items()} | {rates.CONSTANT: "constant"}
    fit.index = [by_label.get(p, p) for p in fit.index]
    return fit


def theory_error(fit: pd.DataFrame, column: str) -> str | None:
    """How the rate study scored predictor ``column``: ``"overstated the observed ratio 51x on average; a
    constant did better"``; None where it has no score."""
    if column not in fit.index or "mean_residual" not in fit or pd.isna(fit.loc[column, "mean_residual"]):
        return None
    r = fit.loc[column]
    m = float(r["mean_residual"])  # mean of log(observed / predicted)
    text = (f"{'overstated' if m < 0 else 'understated'} the observed ratio {_factor(math.exp(abs(m)))} on average"
            if abs(m) >= math.log(1.05) else "matched the observed ratio on average")
    if "constant" in fit.index and pd.notna(fit.loc["constant", "max_abs_residual"]):
        better = fit.loc["constant", "max_abs_residual"] < r["max_abs_residual"]
        text += "; a constant did better" if better else "; better than a constant"
    return text


def prediction_lines(result: AuditResult, data_dir: Path | None = paths.DATA_DIR) -> list[str]:
    """The closed form's predicted ratio SkillGate / outcome-only (mean over the bins), each beside its error in
    the kit's rate study; nothing where the study's data are absent or the audit has no prediction."""
    wanted = [(col, label, pred) for col, label, pred in THEORY_RATIOS if pd.notna(result.overall.get(col))]
    fit = rate_study_fit(data_dir) if wanted else None
    if fit is None:
        return []
    scored = [(label, result.overall[col], err, int(fit.loc[pred, "studies"])) for col, label, pred in wanted
              if (err := theory_error(fit, pred)) is not None]
    if not scored:
        return []
    studies = {n for *_, n in scored}
    n = str(studies.pop()) if len(studies) == 1 else "AdamW"
    lw, vw = max(len(label) for label, *_ in scored), max(len(ratio_text(v)) for _, v, *_ in scored)
    return (_wrap(f"predicted ratio SkillGate / outcome-only (mean over bins) and its error in the kit's {n} rate "
                 "studies:")
            + [f"  {label:<{lw}}  {ratio_text(v):>{vw}}: {err}" for label, v, err, _ in scored])


def _theory_line(result: AuditResult) -> list[str]:
    """The fitted model's parameters in words, or why there is none."""
    m = result.model
    if m is None:
        return _wrap(result.model_note)
    return _wrap(f"fitted theory: oracle-read rate {m.p_oracle:.3f}, per-step success after an oracle read "
                f"{m.q_step:.3f}, success after another read {m.s_wrong:.3f}, group size {m.group_size}, "
                f"{m.selector_tokens} skill-name tokens, response tokens {m.selector_tokens + m.base_tokens} "
                f"+ {m.tokens_per_step} per step")


def _problem_lines(problems: readers.Problems) -> list[str]:
    """What was skipped (one line each, never broken: they name files) and the advantage check."""
    lines = [ln for ln in problems.summary().splitlines() if not ln.startswith("advantage check:")]
    if problems.adv_checked:
        d = problems.adv_max_diff
        lines += _wrap(f"advantage check: {problems.adv_mismatch:,} of {problems.adv_checked:,} logged advantages "
                      "differ from the recomputed group broadcast (largest difference "
                      f"{'< 0.001' if d < 0.001 else f'{d:.3g}'})")
    return lines


def report(result: AuditResult, data_dir: Path | None = paths.DATA_DIR) -> str:
    """The CLI's text report (module docstring). ``data_dir``: where the rate study that scores the predicted
    ratio lives (None: print no prediction)."""
    head = f"audit of {result.source}"
    what = f"({result.fmt}, {result.n_rows:,} trajectories, horizon = {result.horizon_kind})"
    lines = [f"{head} {what}"] if len(head) + len(what) < WIDTH else [head, f"  {what}"]
    if not result.categorised:
        lines += _wrap(categories_note(result.fmt))
    lines += ["", "Share by horizon", *_share_table(result),
              "", "Sign and Value by horizon", *_sign_value_table(result),
              "", "reads by horizon", *_reads_table(result), ""]
    lines.append(f"dilution (median Share, shortest / longest bin): {_dilution(result.dilution)}")
    if result.n_grad:
        lines += _wrap(f"dilution (median Gradient Share, shortest / longest bin): {_dilution(result.grad_dilution)} "
                      f"(from the {result.n_grad:,} of {result.n_rows:,} trajectories that log it)")
    else:
        lines += _wrap(GRADIENT_NOTE)
    lines += prediction_lines(result, data_dir)
    lines += ["", *_trend_lines(result), "", *_theory_line(result)]
    problems = _problem_lines(result.problems)
    if problems:
        lines += ["", *problems]
    return "\n".join(lines)
