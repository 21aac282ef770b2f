"""Reading the rate study back: each run's speed, the speed ratio per regime and optimizer, and what predicts it.

The study and its measure are :mod:`skillgate_lib.runs.speed`. This module reads the committed
studies under ``data/runs/speed/<regime>[-<optimizer>]/`` and computes, fixed before the runs:

* per study, the two arms at their chosen step sizes, paired by seed: each arm's mean slope
  (Student-t interval over seeds), the observed speed ratio SkillGate / outcome-only (ratio of
  the mean slopes, BCa bootstrap over the seed pairs) and the paired slope difference
  (t-interval). A ratio of rates means something only where outcome-only learns the choice:
  where its slope's interval does not lie above 0 the ratio is left out (nan) and the study
  counts as one where outcome-only GRPO does not learn the choice in the budget (this rule
  was added after the results of the ``paper_note8``, ``paper_note4`` and ``paper`` studies,
  the last of which has both arms losing oracle-read; ``ratio_all`` is the ratio without it);
* the theory's predicted ratio (:func:`skillgate_lib.theory.predicted_signal_ratio`) from the
  regime's probe of its warm start (``data/runs/diagnosis/probes/*.json``) with three doses:
  the loss-weight Share, the Gradient Share (logit-gradient norms), and, where measured, the
  name's share of the summed parameter gradient (``data/runs/diagnosis/gradient_proxy``);
* per predictor, over the studies: the least-squares slope of log observed on log predicted,
  the Spearman rank correlation, and the residuals (log observed - log predicted).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from skillgate_lib import logs, paths
from skillgate_lib.audit.stats import t_interval

#: Steps the primary measure spans (evaluations at 0, 5, ..., 25).
SLOPE_STEPS = 25
#: Where the committed rate studies live.
SPEED_DIR = paths.DATA_DIR / "runs" / "speed"
#: The rate study's primary measures: a study's plan names one (``plan.json``'s ``measure``) and selects on it.
#: ``oracle``: the sampled validation oracle-read (the first seven studies); ``choice``: the teacher-forced
#: P(oracle | slate) of :mod:`skillgate_lib.runs.choice`, the choice alone (studies planned from 2026-12-06).
MEASURES = {"oracle": f"slope of logit(val oracle-read) over steps 0-{SLOPE_STEPS}",
            "choice": f"slope of logit(val choice) over steps 0-{SLOPE_STEPS}: the teacher-forced P(oracle | slate)"}
#: The run-table column each measure's slope is in.
MEASURE_COLUMNS = {"oracle": "slope_val", "choice": "slope_choice"}


def measure_of(plan: dict) -> str:
    """The key of :data:`MEASURES` a study's plan declares (a plan before the choice measure: ``oracle``)."""
    for key, text in MEASURES.items():
        if plan.get("measure") == text:
            return key
    return "oracle"


#: The doses a predicted ratio is computed from: column of the rate table -> label.
PREDICTORS = {"pred_share": "loss-weight Share", "pred_gshare": "Gradient Share",
              "pred_summed": "summed-gradient share"}


def speed_run_name(method: str, lr: float, seed: int) -> str:
    return f"{method}-lr{lr:g}-seed{seed}"


def _logit(p: np.ndarray, n: int) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=float), 0.5 / n, 1 - 0.5 / n)
    return np.log(p / (1 - p))


def _slope(x, y) -> float:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 2:
        return float("nan")
    return float(np.polyfit(x, y, 1)[0])


def half_gap_step(steps, rates) -> float:
    """The first step at which ``rates`` closes half of its first value's gap to 1 (linear between points);
    ``inf`` when it never does."""
    steps, rates = np.asarray(steps, dtype=float), np.asarray(rates, dtype=float)
    target = rates[0] + (1 - rates[0]) / 2
    for i in range(1, len(rates)):
        if rates[i] >= target:
            a, b = rates[i - 1], rates[i]
            return float(steps[i - 1] + (steps[i] - steps[i - 1]) * ((target - a) / (b - a) if b > a else 1.0))
    return float("inf")


def speed_measures(run_dir: str | Path, upto: int = SLOPE_STEPS) -> dict:
    """The rate study's measures of one run, from its ``metrics.jsonl`` (module docstring)."""
    run_dir = Path(run_dir)
    cfg = logs.read_config(run_dir)
    m = logs.read_metrics(run_dir)
    ev = m[m["split"] == "eval"].sort_values("step")
    tr = m[m["split"] == "train"].sort_values("step")
    if ev.empty or ev["step"].iloc[0] != 0:
        raise ValueError(f"{run_dir}/metrics.jsonl: no step-0 evaluation; the rate study needs one (eval_every divides 0)")
    n_eval = int(cfg["eval_tasks"])
    early = ev[ev["step"] <= upto]
    on = tr[tr["step"] <= upto]
    n_train = int(cfg["prompts_per_step"]) * int(cfg["group_size"])
    choice = early["eval/choice_logit"] if "eval/choice_logit" in early else pd.Series(dtype=float)
    return {
        "slope_val": _slope(early["step"], _logit(early["eval/oracle_read"], n_eval)),
        "slope_choice": (_slope(early["step"], choice) if len(choice) and choice.notna().all() else math.nan),
        "slope_onpolicy": _slope(on["step"], _logit(on["train/oracle_read"], n_train)),
        "half_gap_step": half_gap_step(ev["step"], ev["eval/oracle_read"]),
        "val_oracle_read_0": float(ev["eval/oracle_read"].iloc[0]),
        f"val_oracle_read_{upto}": float(early["eval/oracle_read"].iloc[-1]),
        "val_oracle_read_final": float(ev["eval/oracle_read"].iloc[-1]),
        "val_success_final": float(ev["eval/success"].iloc[-1]),
        "val_choice_final": float(ev["eval/choice"].iloc[-1]) if "eval/choice" in ev else math.nan,
        "steps_done": int(tr["step"].max()) if not tr.empty else 0,
    }


def studies(root: str | Path = SPEED_DIR) -> list[Path]:
    """The study directories under ``root`` (those holding a ``plan.json``), sorted by name."""
    return sorted(p.parent for p in Path(root).glob("*/plan.json"))


def _plan(study_dir: Path) -> dict:
    return json.loads((study_dir / "plan.json").read_text())


def run_table(study_dir: str | Path) -> pd.DataFrame:
    """One row per run of a study: method, lr, seed, whether it is at the arm's choice, its speed measures
    (:func:`skillgate_lib.runs.speed.speed_measures`) and its test record where it has one."""
    study_dir = Path(study_dir)
    plan = _plan(study_dir)
    sel_path = study_dir / "selection.json"
    chosen = json.loads(sel_path.read_text()) if sel_path.exists() else {}
    rows = []
    for cfg_path in sorted(study_dir.glob("*/config.json")):
        cfg = json.loads(cfg_path.read_text())
        run = cfg_path.parent
        if run.name != speed_run_name(cfg["method"], cfg["lr"], cfg["seed"]):
            continue
        row = {"study": study_dir.name, "regime": plan["regime"], "model": plan["model"], "optimizer": plan["optimizer"],
               "method": cfg["method"], "lr": float(cfg["lr"]), "seed": int(cfg["seed"]),
               "chosen": cfg["method"] in chosen and float(chosen[cfg["method"]]["value"]) == float(cfg["lr"]),
               "measure": measure_of(plan), **speed_measures(run)}
        row["slope_primary"] = row[MEASURE_COLUMNS[row["measure"]]]
        if (run / "test.json").exists():
            test = json.loads((run / "test.json").read_text())
            row.update(test_success=test["test/success"], test_oracle_read=test["test/oracle_read"])
        rows.append(row)
    return pd.DataFrame(rows)


def all_runs(root: str | Path = SPEED_DIR) -> pd.DataFrame:
    """:func:`run_table` of every study under ``root``."""
    tables = [run_table(s) for s in studies(root)]
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


def ratio_interval(num: np.ndarray, den: np.ndarray, seed: int = 0, n_boot: int = 4000) -> tuple[float, float, float]:
    """mean(num) / mean(den) over seed pairs and its BCa bootstrap interval (pairs resampled together);
    nan bounds for fewer than three pairs or a denominator whose resamples reach 0."""
    from scipy import stats

    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    ratio = float(num.mean() / den.mean()) if den.mean() != 0 else math.nan
    if len(num) < 3 or not np.isfinite(ratio):
        return ratio, math.nan, math.nan
    res = stats.bootstrap((num, den), lambda a, b, axis=-1: a.mean(axis=axis) / b.mean(axis=axis), paired=True,
                          vectorized=True, n_resamples=n_boot, method="BCa", random_state=np.random.default_rng(seed))
    lo, hi = res.confidence_interval
    return ratio, float(lo), float(hi)


def _probes(root: Path) -> dict[tuple[str, str], dict]:
    """Probe summaries by (regime, model); a probe of a preset's knobs set by hand (``paper+custom``) is also found
    under that preset's name."""
    from skillgate_lib.env import regimes

    out, by_knobs = {}, {}
    for p in sorted(root.glob("*.json")):
        d = json.loads(p.read_text())
        out.setdefault((d["regime"], d["model"]), d)
        knobs = {k: (tuple(d[k]) if isinstance(d.get(k), list) else d.get(k)) for k in regimes.get("paper").knobs()}
        for name, r in regimes.REGIMES.items():
            if r.knobs() == knobs:
                by_knobs.setdefault((name, d["model"]), d)
    return {**by_knobs, **out}  # a probe run under the preset's own name comes first


def _summed_shares(path: Path) -> dict[tuple[str, str], float]:
    if not path.exists():
        return {}
    t = pd.read_csv(path)
    return {(r.regime, r.model): float(r.median_share_summed) for r in t.itertuples()}


def paired_arms(runs: pd.DataFrame):
    """Per study (sorted), its runs at each arm's chosen step size and both arms' rows on the seeds they share,
    in seed order: ``(study, runs, outcome rows, SkillGate rows)``, the rows indexed by seed; studies with fewer
    than 2 shared seeds are skipped."""
    for study, g in runs[runs["chosen"]].groupby("study", sort=True):
        arms = {m: g[g["method"] == m].set_index("seed") for m in ("outcome", "skillgate")}
        seeds = sorted(set(arms["outcome"].index) & set(arms["skillgate"].index))
        if len(seeds) >= 2:
            yield study, g, arms["outcome"].loc[seeds], arms["skillgate"].loc[seeds]


def rate_table(runs: pd.DataFrame, probes_dir: str | Path | None = paths.DATA_DIR / "runs" / "diagnosis" / "probes",
               proxy_csv: str | Path | None = paths.DATA_DIR / "runs" / "diagnosis" / "gradient_proxy" / "summary.csv",
               selector_coef: float = 0.2) -> pd.DataFrame:
    """One row per study: both arms at their choice, paired by seed, and the predicted ratios (module docstring).
    ``probes_dir`` / ``proxy_csv`` ``None``: no predictions (their columns nan)."""
    from skillgate_lib.policy.models import is_embedded
    from skillgate_lib.theory import predicted_signal_ratio

    probes = _probes(Path(probes_dir)) if probes_dir is not None else {}
    summed = _summed_shares(Path(proxy_csv)) if proxy_csv is not None else {}
    if "slope_primary" not in runs:  # a table built before studies declared their measure: the oracle-read slope
        runs = runs.assign(slope_primary=runs["slope_val"], measure="oracle")
    rows = []
    for study, g, o, s in paired_arms(runs):
        regime, optimizer, model = g["regime"].iloc[0], g["optimizer"].iloc[0], g["model"].iloc[0]
        row = {"study": study, "regime": regime, "optimizer": optimizer, "model": model,
               "pretrained": not is_embedded(model), "seeds": len(o),
               "lr_outcome": o["lr"].iloc[0], "lr_skillgate": s["lr"].iloc[0]}
        for name, arm in (("outcome", o), ("skillgate", s)):
            row[f"slope_{name}"], row[f"slope_{name}_lo"], row[f"slope_{name}_hi"] = t_interval(arm["slope_primary"])
            row[f"half_gap_{name}"] = float(np.median(arm["half_gap_step"]))
            row[f"start_oracle_{name}"] = float(arm["val_oracle_read_0"].mean())
            row[f"final_oracle_{name}"] = float(arm["val_oracle_read_final"].mean())
            row[f"success_{name}"] = float(arm["val_success_final"].mean())
        row["outcome_learns"] = bool(row["slope_outcome_lo"] > 0)
        row["ratio_all"], row["ratio_all_lo"], row["ratio_all_hi"] = ratio_interval(s["slope_primary"].to_numpy(),
                                                                                   o["slope_primary"].to_numpy())
        row["ratio"], row["ratio_lo"], row["ratio_hi"] = (
            (row["ratio_all"], row["ratio_all_lo"], row["ratio_all_hi"]) if row["outcome_learns"]
            else (math.nan, math.nan, math.nan))
        row["diff"], row["diff_lo"], row["diff_hi"] = t_interval(s["slope_primary"].to_numpy() - o["slope_primary"].to_numpy())
        row["measure"] = g["measure"].iloc[0]
        for key, col in MEASURE_COLUMNS.items():  # both measures' ratios where the runs logged both
            row[f"ratio_{key}"] = (float(s[col].mean() / o[col].mean()) if col in s and s[col].notna().all()
                                   and o[col].notna().all() and o[col].mean() != 0 else math.nan)
        row["ratio_onpolicy"] = (float(s["slope_onpolicy"].mean() / o["slope_onpolicy"].mean()) if row["outcome_learns"]
                                 else math.nan)
        probe = probes.get((regime, model), {})
        row["pred_share"] = probe.get("ratio_share", math.nan)
        row["pred_gshare"] = probe.get("ratio_gshare", math.nan)
        share = summed.get((regime, model))
        row["pred_summed"] = (float(predicted_signal_ratio(probe["value"], share, selector_coef))
                              if share is not None and "value" in probe else math.nan)
        rows.append(row)
    return pd.DataFrame(rows)


def embedded_studies(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of a :func:`rate_table` trained on the kit's embedded tiny model: the studies the rate sentences
    count regimes over. A pretrained model's study (``pretrained``) is reported on its own (notebook 06 and its
    own verdict sentence, :func:`skillgate_lib.report.pretrained.study_sentence`), a rule fixed before its first
    run. The closed forms' fit follows the sentences; the lookahead's leave-one-out scores every study. A table
    without the column is the tiny model's."""
    return table[~table["pretrained"].astype(bool)] if "pretrained" in table else table


def predictor_fit(table: pd.DataFrame) -> pd.DataFrame:
    """Per predictor (:data:`PREDICTORS`): over the studies with a positive observed ratio and a prediction, the
    log-log least-squares slope, the Spearman rank correlation and the mean and largest absolute residual
    (natural log of observed / predicted); last, the same residuals of :data:`CONSTANT`, left out in turn."""
    from scipy import stats

    rows = []
    for col, label in PREDICTORS.items():
        t = table[(table["ratio"] > 0) & table[col].notna() & (table[col] > 0)]
        if len(t) < 2:
            rows.append({"predictor": label, "studies": len(t)})
            continue
        x, y = np.log(t[col].to_numpy()), np.log(t["ratio"].to_numpy())
        slope = float(np.polyfit(x, y, 1)[0]) if np.ptp(x) > 0 else math.nan
        rho = float(stats.spearmanr(x, y).statistic) if len(t) >= 3 else math.nan
        resid = y - x
        rows.append({"predictor": label, "studies": len(t), "loglog_slope": slope, "spearman": rho,
                     "mean_residual": float(resid.mean()), "max_abs_residual": float(np.abs(resid).max())})
    y = np.log(table.loc[table["ratio"] > 0, "ratio"].to_numpy())
    if len(y) >= 2:  # each study predicted by the geometric mean of the others' observed ratios
        resid = y - (y.sum() - y) / (len(y) - 1)
        rows.append({"predictor": CONSTANT, "studies": len(y), "mean_residual": float(resid.mean()),
                     "max_abs_residual": float(np.abs(resid).max())})
    return pd.DataFrame(rows)


#: The predictor every theory must beat: each study's ratio predicted by the geometric mean of the other studies'.
CONSTANT = "constant (the other studies' mean)"


def rate_figure(table: pd.DataFrame):
    """Observed speed ratio against each predicted ratio (log-log, identity line), one panel per predictor, every
    panel on the same square axes so that the identity is each panel's diagonal; colour by regime, marker by
    optimizer, bars the BCa interval of the ratio; one legend below."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import LogLocator, NullFormatter

    from skillgate_lib.plots import WIDTH

    fig, axes = plt.subplots(1, len(PREDICTORS), figsize=(WIDTH * 1.35, 4.0), sharex=True, sharey=True,
                             layout="constrained")
    markers = {"adamw": "o", "nsgd": "s", "sgd": "^"}
    shown = table[table["ratio"] > 0]
    colours = {r: f"C{i}" for i, r in enumerate(sorted(shown["regime"].unique()))}
    vals = pd.concat([shown["ratio"], shown["ratio_lo"], shown["ratio_hi"], *(shown[c] for c in PREDICTORS)]).dropna()
    vals = vals[vals > 0]
    lim = (min(0.7, float(vals.min()) / 1.5), max(2.0, float(vals.max()) * 1.5)) if len(vals) else (0.5, 2.0)
    for ax, (col, label) in zip(axes, PREDICTORS.items()):
        ax.plot(lim, lim, color="grey", lw=1, ls="--")
        nudge = {"adamw": 1.0, "nsgd": 0.9, "sgd": 1.1}  # one regime's optimizers share a prediction: side by side
        for r in shown[shown[col].notna()].itertuples():
            ax.errorbar([getattr(r, col) * nudge.get(r.optimizer, 1.0)], [r.ratio], yerr=[[max(r.ratio - r.ratio_lo, 0)], [max(r.ratio_hi - r.ratio, 0)]],
                        fmt=markers.get(r.optimizer, "o"), color=colours[r.regime], capsize=3, ms=6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lim)
        ax.set_ylim(lim)
        ax.set_aspect("equal")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(LogLocator(base=10))
            axis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(f"predicted, from {label}")
    axes[0].set_ylabel("observed speed ratio\nSkillGate / outcome-only")
    handles = [Line2D([], [], color=c, marker="o", ls="", label=r) for r, c in colours.items()]
    handles += [Line2D([], [], color="0.3", marker=markers.get(o, "o"), ls="", label=o)
                for o in dict.fromkeys(shown["optimizer"])]
    handles.append(Line2D([], [], color="grey", lw=1, ls="--", label="identity"))
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 5), fontsize=8)
    return fig


def rate_markdown(table: pd.DataFrame) -> str:
    """The rate table as Markdown (docs/results.md): per study, its measure (the slope of logit(validation choice) or of
    logit(validation oracle-read), as its plan declares), each arm's slope, the observed ratio and the predictions."""
    from skillgate_lib.report.markdown import markdown_table

    def ci(m, lo, hi, f="{:.3f}"):
        return f"{f.format(m)} [{f.format(lo)}, {f.format(hi)}]"

    rows = [[f"`{r.study}`", getattr(r, "measure", "oracle"), str(r.seeds), f"{r.lr_outcome:g} / {r.lr_skillgate:g}",
             ci(r.slope_outcome, r.slope_outcome_lo, r.slope_outcome_hi), ci(r.slope_skillgate, r.slope_skillgate_lo, r.slope_skillgate_hi),
             ci(r.ratio, r.ratio_lo, r.ratio_hi, "{:.2f}") if r.outcome_learns else "– (outcome-only does not learn)",
             f"{100 * r.start_oracle_outcome:.1f} -> {100 * r.final_oracle_outcome:.1f} / {100 * r.final_oracle_skillgate:.1f}",
             *(f"{getattr(r, c):.2f}" if np.isfinite(getattr(r, c)) else "–" for c in PREDICTORS)]
            for r in table.itertuples()]
    return markdown_table(["study", "slope of logit(val ...)", "seeds", "lr (outcome / SkillGate)", "slope, outcome-only",
                           "slope, SkillGate", "observed ratio [BCa 95 %]", "val oracle-read, step 0 -> 30, outcome / SkillGate (%)",
                           *(f"predicted from {v}" for v in PREDICTORS.values())],
                          rows, "lllrrrrr" + "r" * len(PREDICTORS))


def fit_markdown(fit: pd.DataFrame) -> str:
    """The predictor fits as Markdown."""
    from skillgate_lib.report.markdown import markdown_table

    def num(v, f="{:+.2f}"):
        return f.format(v) if pd.notna(v) else "–"

    rows = [[r["predictor"], str(int(r["studies"])), num(r.get("loglog_slope")), num(r.get("spearman")),
             num(r.get("mean_residual")), num(r.get("max_abs_residual"), "{:.2f}")] for _, r in fit.iterrows()]
    return markdown_table(["predictor", "studies", "log-log slope", "Spearman rho", "mean log residual",
                           "largest abs. log residual"], rows, "lrrrrr")


def _span(rows: pd.DataFrame, col: str, scale: float = 100.0, f: str = "{:.0f}") -> str:
    """``min-max`` of a column as text (one number when they print alike)."""
    lo, hi = f.format(scale * rows[col].min()), f.format(scale * rows[col].max())
    return lo if lo == hi else f"{lo}-{hi}"


def _not_learning(t: pd.DataFrame) -> str:
    """Where outcome-only GRPO does not learn the choice: each such regime's validation oracle-read, start -> step 30,
    for both arms, and whether SkillGate's slope lies above 0 there."""
    return "; ".join(f"`{r.regime}` {100 * r.start_oracle_outcome:.0f} % -> {100 * r.final_oracle_outcome:.0f} % "
                     f"(SkillGate -> {100 * r.final_oracle_skillgate:.0f} %, "
                     f"{'whose slope is above 0' if r.slope_skillgate_lo > 0 else 'not learning either'}; "
                     f"SkillGate {faster_word(r)}, paired slope {_diff(r)})"
                     for r in t.itertuples())


def rate_summary(table: pd.DataFrame, fit: pd.DataFrame) -> str:
    """The rate study's findings in a few generated sentences (docs/results.md), over the tiny model's studies
    (:func:`embedded_studies`; a pretrained model's study has its own sentence, :mod:`skillgate_lib.report.pretrained`)."""
    table = embedded_studies(table)
    t = table[table["optimizer"] == "adamw"]
    rated = t[t["outcome_learns"]]
    word = pd.Series([faster_word(r) for r in rated.itertuples()], index=rated.index, dtype=object)
    faster, slower, neither = (rated[word == w] for w in ("faster", "slower", "not shown faster"))

    def each(rows):
        return ", ".join(f"`{r.regime}` {r.ratio:.2f} [{r.ratio_lo:.2f}, {r.ratio_hi:.2f}]" for r in rows.itertuples())

    out = [f"With AdamW at each arm's best step size, outcome-only GRPO learns the choice (its slope's interval above 0, "
           f"a rule added after the first three studies' results) in {len(rated)} of {len(t)} regimes; there SkillGate learns it faster "
           f"(the ratio's interval above 1 and the paired slope difference's above 0) in {len(faster)} "
           f"(speed ratio [BCa 95 %]: {each(faster) or 'none'})"
           + (f", slower in {len(slower)} ({each(slower)})" if len(slower) else "")
           + (f", and is not shown faster in {len(neither)} ({each(neither)})" if len(neither) else "") + "."]
    if len(rated) < len(t):
        stalled = t[~t["outcome_learns"]]
        out.append("Where outcome-only GRPO does not learn the choice in 30 steps (validation oracle-read, start -> "
                   f"step 30): {_not_learning(stalled)}. Without the rule, their ratios would read "
                   + ", ".join(f"`{r.regime}` {_ratio(r, 'ratio_all')}" for r in stalled.itertuples()) + ".")
    fit = fit.set_index("predictor")
    scored = fit.dropna(subset=["max_abs_residual"]) if "max_abs_residual" in fit else fit.iloc[:0]
    theory = scored.drop(index=CONSTANT, errors="ignore")
    if len(theory):
        best = theory["max_abs_residual"].idxmin()
        out.append(f"Of the theory's predicted ratios, the one from the {best} comes closest (every regime within a factor "
                   f"of {math.exp(theory.loc[best, 'max_abs_residual']):.1f}, log-log slope "
                   f"{theory.loc[best, 'loglog_slope']:+.2f}, Spearman {theory.loc[best, 'spearman']:+.2f}); "
                   + "; ".join(f"the {p}'s overstates the ratio {math.exp(-r['mean_residual']):.0f}-fold on average "
                               f"(at worst {math.exp(r['max_abs_residual']):.0f}-fold)"
                               for p, r in theory.iterrows() if p != best and r["mean_residual"] < 0) + ".")
        sentence = predictor_sentence(fit.reset_index())
        if sentence:
            out.append(sentence[:1].upper() + sentence[1:] + "; the threshold a prediction had to meet was not fixed "
                       "before the runs.")
    others = table[table["optimizer"] != "adamw"]
    for regime, g in table[table["regime"].isin(others["regime"])].groupby("regime", sort=True):
        each = "; ".join(f"{r.optimizer} {_ratio(r)}, paired slope {_diff(r)}: {faster_word(r)}" if r.outcome_learns
                         else f"{r.optimizer}: outcome-only does not learn" for r in g.itertuples())
        out.append(f"The optimizer control in `{regime}` (speed ratio by optimizer, each with its own searched step "
                   f"size; \"faster\" where both the ratio's interval lies above 1 and the paired slope difference's "
                   f"above 0): {each}.")
    if len(rated):
        gain = rated.assign(gain=rated["final_oracle_outcome"] - rated["start_oracle_outcome"])
        lo, hi = 100 * gain["gain"].min(), 100 * gain["gain"].max()
        moves = (f"raises validation oracle-read by {_span(gain, 'gain')} points" if lo >= 0 else
                 f"moves validation oracle-read by {lo:+.0f} to {hi:+.0f} points (the choice and the number of reads a "
                 "trial makes both move it)")
        out.append(f"Where it learns the choice, outcome-only GRPO {moves} in 30 steps, to "
                   f"{_span(rated, 'final_oracle_outcome')} % (SkillGate to {_span(rated, 'final_oracle_skillgate')} %).")
    return "\n".join(s for s in out if s) + "\n"


def faster_word(r) -> str:
    """How a study's SkillGate compares in speed, by both its tests: ``faster`` when the ratio's interval lies above 1
    and the paired slope difference's above 0, ``slower`` when both lie below, else ``not shown faster``."""
    if r.ratio_lo > 1 and r.diff_lo > 0:
        return "faster"
    if r.ratio_hi < 1 and r.diff_hi < 0:
        return "slower"
    return "not shown faster"


def _diff(r) -> str:
    return f"{r.diff:+.3f} [{r.diff_lo:+.3f}, {r.diff_hi:+.3f}]"


def _ratio(r, col: str = "ratio") -> str:
    lo, hi = getattr(r, f"{col}_lo"), getattr(r, f"{col}_hi")
    f = (lambda v: f"{v:.2f}" if abs(v) < 100 else f"{v:.0f}")
    return f"{f(getattr(r, col))} [{f(lo)}, {f(hi)}]"


def predictor_sentence(fit: pd.DataFrame) -> str:
    """Whether any dose of the theory predicts the ratio better than :data:`CONSTANT`, by their largest log error."""
    f = fit.set_index("predictor")
    scored = f.dropna(subset=["max_abs_residual"]) if "max_abs_residual" in f else f.iloc[:0]
    theory = scored.drop(index=CONSTANT, errors="ignore")
    if theory.empty or CONSTANT not in scored.index:
        return ""
    best = theory["max_abs_residual"].idxmin()
    b, c = theory.loc[best], scored.loc[CONSTANT]
    verb = "predicts it no better than" if c["max_abs_residual"] <= b["max_abs_residual"] else "predicts it better than"
    return (f"the theory's closed form {verb} a constant (worst miss {math.exp(b['max_abs_residual']):.1f}x with the {best}, "
            f"{math.exp(c['max_abs_residual']):.2f}x with the others' mean)")


def verdict_sentence(table: pd.DataFrame, fit: pd.DataFrame) -> str:
    """The README verdict's sentence on the rate study (AdamW studies): where outcome-only GRPO learns the choice, how
    much faster SkillGate learns it (with the rule that picks those studies flagged as added after results, and
    the ratios it leaves out), whether the theory predicts it better than a constant, and what happens where
    outcome-only does not learn. Each word is backed by an interval (:func:`faster_word`). Over the tiny model's
    studies (:func:`embedded_studies`); ``fit`` is scored over whichever studies the caller gives it."""
    t = embedded_studies(table)
    t = t[t["optimizer"] == "adamw"]
    rated = t[t["outcome_learns"]]
    stalled = t[~t["outcome_learns"]]
    n, k = len(t), len(rated)
    words = np.array([faster_word(r) for r in rated.itertuples()], dtype=object)
    faster, other = rated[words == "faster"], rated[words != "faster"]
    where = (f"Outcome-only learns the choice in 30 steps in all {n} regimes; SkillGate learns it faster in " if k == n
             else f"Where outcome-only learns the choice in 30 steps ({k} of {n} regimes, a rule set after the first "
                  "results), SkillGate learns it faster in ")
    out = (where + f"{len(faster) if len(faster) < k else 'every one'}"
           + (f" ({_span(faster, 'ratio', 1.0, '{:.1f}')}x; ratio and paired intervals clear 1 and 0)"
              if len(faster) else ""))
    said: dict[str, list[str]] = {}
    for r in other.itertuples():  # the ratio alone, and which test it fails where its own interval clears 1
        said.setdefault(faster_word(r), []).append(
            f"`{r.regime}` ({_ratio(r)}" + ("; paired interval covers 0)" if r.ratio_lo > 1 else ")"))
    for word, regimes_ in said.items():
        out += f"; {word} in " + (", ".join(regimes_[:-1]) + " and " + regimes_[-1] if len(regimes_) > 1
                                        else regimes_[0])
    sentence = predictor_sentence(fit)
    if sentence:
        out += "; " + sentence
    if len(stalled):
        words = sorted({faster_word(r) for r in stalled.itertuples()})
        out += (f"; elsewhere ({', '.join(f'`{r}`' for r in stalled['regime'])}) it is "
                + " or ".join(words))
    return out + "."


def display_table(table: pd.DataFrame) -> pd.DataFrame:
    """The rate table as a reader meets it in a notebook: one row per study, its primary measure (``choice`` or
    ``oracle``, :data:`MEASURES`), each cell a number with its unit
    and interval as text (choice speed (validation) in logit per step; ``never`` for a half-gap step not reached;
    the ratio without the post-hoc rule beside it)."""
    def ci(m, lo, hi, f="{:+.3f}"):
        return "–" if not np.isfinite(m) else f"{f.format(m)} [{f.format(lo)}, {f.format(hi)}]"

    def step(v):
        return "never" if not np.isfinite(v) else f"{v:.0f}"

    rows = []
    for r in table.itertuples():
        rows.append({"study": r.study, "measure": getattr(r, "measure", "oracle"), "seeds": r.seeds,
                     "lr outcome / SkillGate": f"{r.lr_outcome:g} / {r.lr_skillgate:g}",
                     "speed, outcome": ci(r.slope_outcome, r.slope_outcome_lo, r.slope_outcome_hi),
                     "speed, SkillGate": ci(r.slope_skillgate, r.slope_skillgate_lo, r.slope_skillgate_hi),
                     "ratio [BCa]": ci(r.ratio, r.ratio_lo, r.ratio_hi, "{:.2f}"),
                     "ratio, no rule": _ratio(r, "ratio_all"),
                     "half-gap step O / S": f"{step(r.half_gap_outcome)} / {step(r.half_gap_skillgate)}",
                     **{f"theory: {v}": (f"{getattr(r, c):.2f}" if np.isfinite(getattr(r, c)) else "–")
                        for c, v in PREDICTORS.items()}})
    columns = ["study", "measure", "seeds", "lr outcome / SkillGate", "speed, outcome", "speed, SkillGate", "ratio [BCa]",
               "ratio, no rule", "half-gap step O / S", *(f"theory: {v}" for v in PREDICTORS.values())]
    return pd.DataFrame(rows, columns=columns).set_index("study")  # no study (an empty selection): the columns alone


def display_fit(fit: pd.DataFrame) -> pd.DataFrame:
    """:func:`predictor_fit` as factors a reader need not convert: how many times each predictor over- or
    understates the observed ratio, on average and at worst, beside its log-log slope and rank correlation."""
    out = fit.set_index("predictor")
    return pd.DataFrame({
        "studies": out["studies"],
        "log-log slope": out.get("loglog_slope").round(2),
        "Spearman": out.get("spearman").round(2),
        "on average": [("–" if not np.isfinite(m) else f"{'over' if m < 0 else 'under'}states {math.exp(abs(m)):.2f}x")
                       for m in out["mean_residual"]],
        "at worst": [("–" if not np.isfinite(m) else f"off {math.exp(m):.2f}x") for m in out["max_abs_residual"]],
    })
