"""The lookahead against the rate study: each prediction tested on the study it was not fitted to.

Reads the committed predictions (``data/runs/predict/<study>.json``, :mod:`skillgate_lib.runs.predict`)
and the rate study's table (:func:`~skillgate_lib.report.rates.rate_table`), and scores every
predictor of the speed ratio by leave-one-out over the studies with an observed ratio:

* **lookahead**: the predicted ratio after K steps, K chosen on the *other* studies (the K whose
  mean absolute log error over them is least), so no study's K is fitted to it;
* **lookahead, K = k**: each fixed K, for the record (not a predictor: choosing among them on all
  studies would fit K);
* **theory**: the closed forms from each share (:data:`~skillgate_lib.report.rates.PREDICTORS`),
  which fit nothing;
* **constant**: the geometric mean of the other studies' observed ratios.

The error of a prediction is ``log(observed / predicted)``; a prediction of 0 or below (an arm
that did not move, or moved the wrong way) has no log and counts as a miss with the error of the
worst finite one, so a predictor cannot gain by failing.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd

from skillgate_lib import paths

PREDICT_DIR = paths.DATA_DIR / "runs" / "predict"
#: The name of the leave-one-out lookahead and of the constant in the tables.
LOOKAHEAD = "lookahead (K by leave-one-out)"
CONSTANT = "constant (the other studies' mean)"


def predictions(root: str | Path = PREDICT_DIR) -> pd.DataFrame:
    """One row per committed prediction and k: study, regime, optimizer, model, step sizes, seeds, each arm's mean
    change in logit(choice) with its t-interval, and the ratio with its BCa interval."""
    rows = []
    for path in sorted(Path(root).glob("*.json")):
        rec = json.loads(path.read_text())
        cfg = rec["config"]
        for r in rec.get("ratios", []):
            rows.append({"study": cfg.get("study") or path.stem, "regime": cfg["regime"], "optimizer": cfg["optimizer"],
                         "model": cfg["model"], "lr_outcome": cfg["lr"]["outcome"], "lr_skillgate": cfg["lr"]["skillgate"],
                         "file": path.name, "commit": rec.get("commit"), **r})
    return pd.DataFrame(rows)


def _git(*args: str) -> subprocess.CompletedProcess:
    """``git ARGS`` in the repository, output captured."""
    return subprocess.run(["git", "-C", str(paths.REPO_ROOT), *args], capture_output=True, text=True)


def _added_by(*paths: str | Path) -> str | None:
    """The full id of the oldest commit that added any of ``paths`` (``git log --diff-filter=A``; a path may hold a
    ``*``, git's pathspec wildcard), or None."""
    out = _git("log", "--diff-filter=A", "--format=%H", "--", *(str(Path(p).resolve()) for p in paths))
    ids = out.stdout.split() if out.returncode == 0 else []
    return ids[-1] if ids else None


def _runs_added_by(speed_root: str | Path, study: str) -> str | None:
    """The commit of a study's first runs: the oldest that added its exported ``selection.json`` or any run's records
    carried while it ran (``data/runs/in_progress/speed/<study>/<run>/metrics.jsonl``, beside ``speed_root``); None
    until the study is exported."""
    export = Path(speed_root) / study / "selection.json"
    if _added_by(export) is None:
        return None
    return _added_by(export, Path(speed_root).parent / "in_progress" / "speed" / study / "*" / "metrics.jsonl")


def added_in(path: str | Path) -> str:
    """The id of the commit that added ``path``, cut to 7 hex digits, or "not committed".

    Cut by hand rather than git's ``%h``, whose length grows with the objects in the clone: the generated docs must
    read the same in a fresh clone (CI) as here."""
    full = _added_by(path)
    return full[:7] if full else "not committed"


def _errors(observed: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """log(observed / predicted); nan where the prediction is not positive."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(predicted > 0, np.log(observed) - np.log(np.where(predicted > 0, predicted, 1.0)), np.nan)


def _score(err: np.ndarray) -> float:
    """Mean absolute log error, a miss (nan) counted as the worst finite error (or 10 when none is finite)."""
    err = np.abs(np.asarray(err, dtype=float))
    worst = np.nanmax(err) if np.isfinite(err).any() else 10.0
    return float(np.where(np.isfinite(err), err, worst).mean())


def loo_table(table: pd.DataFrame, preds: pd.DataFrame) -> pd.DataFrame:
    """One row per study with an observed ratio (> 0) and a prediction: the observed ratio and, per predictor, its
    prediction and error (module docstring); ``k_loo`` the K the other studies chose."""
    from skillgate_lib.report.rates import PREDICTORS

    obs = table[(table["ratio"] > 0)].set_index("study")
    wide = preds.pivot_table(index="study", columns="k", values="ratio")
    studies = [s for s in obs.index if s in wide.index]
    ks = list(wide.columns)
    rows = []
    for s in studies:
        others = [o for o in studies if o != s]
        y_others = np.log(obs.loc[others, "ratio"].to_numpy(dtype=float))
        row = {"study": s, "regime": obs.loc[s, "regime"], "optimizer": obs.loc[s, "optimizer"],
               "observed": float(obs.loc[s, "ratio"]), "observed_lo": float(obs.loc[s, "ratio_lo"]),
               "observed_hi": float(obs.loc[s, "ratio_hi"])}
        if others:
            k = min(ks, key=lambda k: (_score(_errors(np.exp(y_others), wide.loc[others, k].to_numpy(dtype=float))), k))
            row["k_loo"] = int(k)
            row[LOOKAHEAD] = float(wide.loc[s, k])
            row[CONSTANT] = float(np.exp(y_others.mean()))
        for k in ks:
            row[f"lookahead, K = {k}"] = float(wide.loc[s, k])
        for col, label in PREDICTORS.items():
            row[f"theory: {label}"] = float(obs.loc[s, col])
        rows.append(row)
    return pd.DataFrame(rows)


def predictor_columns(loo: pd.DataFrame) -> list[str]:
    """The predictor columns of a :func:`loo_table`, the scored ones first."""
    fixed = [c for c in loo.columns if c.startswith("lookahead, K = ")]
    theory = [c for c in loo.columns if c.startswith("theory: ")]
    return [c for c in (LOOKAHEAD, CONSTANT) if c in loo.columns] + theory + fixed


def loo_summary(loo: pd.DataFrame) -> pd.DataFrame:
    """Per predictor over the studies of ``loo``: how many it predicted (a positive prediction), its mean and largest
    absolute log error (a miss counted as :func:`_score` does) and the Spearman rank correlation of prediction and
    observation; ``scored`` says which are predictors and which are the record of a fixed K."""
    from scipy import stats

    rows = []
    y = loo["observed"].to_numpy(dtype=float)
    for col in predictor_columns(loo):
        p = loo[col].to_numpy(dtype=float)
        err = _errors(y, p)
        finite = np.isfinite(err)
        rho = (float(stats.spearmanr(p[finite], y[finite]).statistic) if finite.sum() >= 3 and np.ptp(p[finite]) > 0
               else math.nan)
        worst = float(np.nanmax(np.abs(err))) if finite.any() else math.nan
        rows.append({"predictor": col, "studies": len(loo), "predicted": int(finite.sum()),
                     "mean_abs_log_error": _score(err), "max_abs_log_error": worst if finite.all() else math.inf,
                     "spearman": rho, "scored": not col.startswith("lookahead, K = ")})
    return pd.DataFrame(rows)


def display_summary(summary: pd.DataFrame) -> pd.DataFrame:
    """:func:`loo_summary` as factors: a predictor is off by ``x`` on average (geometric) and at worst."""
    def factor(v):
        return "–" if not np.isfinite(v) else f"{math.exp(v):.2f}x"

    return pd.DataFrame({"predictor": summary["predictor"],
                         "predicted / studies": [f"{a} / {b}" for a, b in zip(summary["predicted"], summary["studies"])],
                         "off on average": [factor(v) for v in summary["mean_abs_log_error"]],
                         "off at worst": [factor(v) if np.isfinite(v) else "a miss" for v in summary["max_abs_log_error"]],
                         "Spearman": [f"{v:+.2f}" if np.isfinite(v) else "–" for v in summary["spearman"]]}
                        ).set_index("predictor")


def display_loo(loo: pd.DataFrame) -> pd.DataFrame:
    """:func:`loo_table` as a reader meets it: the observed ratio with its interval, each scored predictor's
    prediction, and the K the other studies chose."""
    out = pd.DataFrame({"study": loo["study"],
                        "observed [BCa]": [f"{o:.2f} [{lo:.2f}, {hi:.2f}]" for o, lo, hi in
                                           zip(loo["observed"], loo["observed_lo"], loo["observed_hi"])]})
    if "k_loo" in loo:
        out["K chosen"] = loo["k_loo"]
    for col in predictor_columns(loo):
        if not col.startswith("lookahead, K = "):
            out[col] = loo[col].map(lambda v: f"{v:.2f}" if np.isfinite(v) else "–")
    return out.set_index("study")


def loo_verdict(summary: pd.DataFrame) -> str:
    """Whether the lookahead beats the constant predictor, by mean absolute log error (largest beside), in words."""
    s = summary.set_index("predictor")
    if LOOKAHEAD not in s.index or CONSTANT not in s.index:
        return ""
    a, c = s.loc[LOOKAHEAD], s.loc[CONSTANT]
    theory = s[s.index.str.startswith("theory: ")]
    best = theory["mean_abs_log_error"].idxmin() if len(theory) else None
    word = "beats" if a["mean_abs_log_error"] < c["mean_abs_log_error"] else "does not beat"

    def worst(v):
        return "a miss" if not np.isfinite(v) else f"{math.exp(v):.2f}x"

    out = (f"over {int(a['studies'])} rate studies, each left out in turn, the lookahead {word} the constant predictor: "
           f"off {math.exp(a['mean_abs_log_error']):.2f}x on average (at worst {worst(a['max_abs_log_error'])}) against "
           f"{math.exp(c['mean_abs_log_error']):.2f}x ({worst(c['max_abs_log_error'])})")
    if best is not None:
        out += (f"; the best closed form ({best.removeprefix('theory: ')}) is off "
                f"{math.exp(theory.loc[best, 'mean_abs_log_error']):.2f}x")
    return out


def loo_figure(loo: pd.DataFrame):
    """Observed ratio (BCa bars) against the lookahead's leave-one-out prediction, the best closed form and the
    constant, log-log, one panel each on the same square axes with the identity line; one colour and marker per
    study, named in one legend below."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, NullLocator

    summary = loo_summary(loo).set_index("predictor")
    theory = summary[summary.index.str.startswith("theory: ")]
    cols = [LOOKAHEAD, theory["mean_abs_log_error"].idxmin() if len(theory) else None, CONSTANT]
    cols = [c for c in cols if c is not None and c in loo]
    vals = np.concatenate([loo[c].to_numpy(dtype=float) for c in cols] + [loo["observed_lo"], loo["observed_hi"]])
    vals = vals[np.isfinite(vals) & (vals > 0)]
    lo, hi = vals.min() / 1.2, vals.max() * 1.2
    ticks = [t for t in (0.5, 0.75, 1, 1.5, 2, 3, 4, 6, 8) if lo <= t <= hi]
    markers = "osD^vP*X"
    fig, axes = plt.subplots(1, len(cols), figsize=(3.5 * len(cols), 4.2), sharex=True, sharey=True, squeeze=False)
    for ax, col in zip(axes[0], cols):
        for i, r in enumerate(loo.itertuples()):
            x = float(loo.loc[r.Index, col])
            if not (np.isfinite(x) and x > 0):
                continue
            ax.errorbar([x], [r.observed], yerr=[[r.observed - r.observed_lo], [r.observed_hi - r.observed]],
                        fmt=markers[i % len(markers)], color=f"C{i}", ecolor=f"C{i}", capsize=2, label=r.study)
        ax.plot([lo, hi], [lo, hi], color="0.4", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_aspect("equal")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(FixedLocator(ticks))
            axis.set_minor_locator(NullLocator())
            axis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
        err = summary.loc[col, "mean_abs_log_error"]
        ax.set_title(f"{col.removeprefix('theory: ')}\noff {math.exp(err):.2f}x on average", fontsize=9)
        ax.set_xlabel("predicted ratio")
    axes[0][0].set_ylabel("observed speed ratio (SkillGate / outcome)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def complete(preds: pd.DataFrame, root: str | Path = PREDICT_DIR) -> pd.DataFrame:
    """The rows of ``preds`` whose prediction file holds every run it planned (both arms on every seed)."""
    done = set()
    for path in Path(root).glob("*.json"):
        rec = json.loads(path.read_text())
        if len(rec.get("runs", [])) == 2 * len(rec["config"]["seeds"]):
            done.add(path.name)
    return preds[preds["file"].isin(done)]


def markdown(table: pd.DataFrame, root: str | Path = PREDICT_DIR) -> str:
    """docs/results.md's lookahead block: every committed prediction at K = 1..5 beside its study's observed ratio,
    the leave-one-out table of the scored predictors, their summary, and the verdict in words."""
    from skillgate_lib.report.markdown import markdown_table

    preds = complete(predictions(root), root)
    if preds.empty:
        return "No committed prediction yet (`data/runs/predict/`).\n"
    obs = table.set_index("study")
    ks = sorted(preds["k"].unique())
    rows = []
    for study, g in preds.groupby("study", sort=True):
        g = g.set_index("k")
        o = obs.loc[study] if study in obs.index else None
        seen = ("–" if o is None else f"{o['ratio']:.2f} [{o['ratio_lo']:.2f}, {o['ratio_hi']:.2f}]" if o["ratio"] > 0
                else "– (outcome-only does not learn)")
        lr = g.iloc[0]
        rows.append([f"`{study}`", added_in(Path(root) / lr["file"]), f"{lr['lr_outcome']:g} / {lr['lr_skillgate']:g}",
                     str(int(lr["seeds"])),
                     *[f"{g.loc[k, 'ratio']:.2f} [{g.loc[k, 'ratio_lo']:.2f}, {g.loc[k, 'ratio_hi']:.2f}]" for k in ks],
                     f"{g.loc[ks[-1], 'delta_outcome']:+.3f} / {g.loc[ks[-1], 'delta_skillgate']:+.3f}", seen])
    out = [markdown_table(["study", "prediction committed in", "lr (both arms)", "seeds", *[f"K = {k}" for k in ks],
                           f"logit change at K = {ks[-1]}, outcome / SkillGate", "observed ratio [BCa 95 %]"],
                          rows, "llrr" + "r" * len(ks) + "rr")]
    loo = loo_table(table, preds)
    if len(loo) >= 2:
        shown = display_loo(loo).reset_index()
        out.append(markdown_table(list(shown.columns), shown.astype(str).values.tolist(), "l" + "r" * (shown.shape[1] - 1)))
        summary = display_summary(loo_summary(loo)).reset_index()
        out.append(markdown_table(list(summary.columns), summary.astype(str).values.tolist(), "lrrrr"))
        sentence = loo_verdict(loo_summary(loo))
        out.append(sentence[:1].upper() + sentence[1:] + ".")
    pre = preregistered(table, root)
    if not pre.empty:
        out.append(preregistered_sentence(pre))
    variant = variant_sentence(variant_table(table, root))
    if variant:
        out.append(variant)
    return "\n\n".join(out) + "\n"


def variant_table(table: pd.DataFrame, root: str | Path = PREDICT_DIR, variant: str = "shared") -> pd.DataFrame:
    """The cheaper variant (``root/<variant>/``, ``predict --rollouts shared``) against the on-policy lookahead, on the
    studies both predicted: per study the observed ratio and each one's leave-one-out prediction (K chosen on the
    other common studies), and per predictor the mean absolute log error as a factor (``off``). Empty with fewer
    than three common studies."""
    own, cheap = (complete(predictions(r), r) for r in (Path(root), Path(root) / variant))
    common = sorted(set(own["study"]) & set(cheap["study"]) & set(table.loc[table["ratio"] > 0, "study"]))
    if len(common) < 3:
        return pd.DataFrame()
    rows = []
    for name, preds in (("lookahead, own rollouts", own), (f"lookahead, {variant} rollouts", cheap)):
        loo = loo_table(table[table["study"].isin(common)], preds[preds["study"].isin(common)]).set_index("study")
        for study in common:
            rows.append({"study": study, "predictor": name, "observed": loo.loc[study, "observed"],
                         "predicted": loo.loc[study, LOOKAHEAD], "k": int(loo.loc[study, "k_loo"])})
    out = pd.DataFrame(rows)
    out["off"] = np.exp(np.abs(_errors(out["observed"].to_numpy(), out["predicted"].to_numpy())))
    return out


def variant_sentence(v: pd.DataFrame) -> str:
    """Whether the cheaper variant predicts as well as the on-policy lookahead, in words (its numbers from ``v``)."""
    if v.empty:
        return ""
    mean = v.groupby("predictor")["off"].apply(lambda x: float(np.exp(np.log(x).mean())))
    own, cheap = (mean[m] for m in sorted(mean.index, key=lambda m: "own" not in m))
    verdict = "predicts as well" if cheap <= own else "predicts worse"
    studies = ", ".join(f"`{s}`" for s in sorted(v["study"].unique()))
    return (f"The cheaper variant (both arms updating on the same rollouts, drawn once from the warm start) "
            f"{verdict} on the {v['study'].nunique()} studies both predicted ({studies}; each left out): off "
            f"{cheap:.2f}x on average against the on-policy lookahead's {own:.2f}x.")


#: :func:`preregistered`'s columns, which an empty table has too (no study preregistered, or no git history to tell).
PREREGISTERED_COLUMNS = ["study", "prediction_commit", "runs_commit", "k", "predicted", "predicted_lo", "predicted_hi",
                         "observed", "observed_lo", "observed_hi", "inside", "lookahead_off", "constant",
                         "constant_off"]


def preregistered(table: pd.DataFrame, root: str | Path = PREDICT_DIR,
                  speed_root: str | Path = paths.DATA_DIR / "runs" / "speed") -> pd.DataFrame:
    """The studies whose prediction was committed before their runs: one row each with the commits (prediction,
    runs), the lookahead's prediction at the K it was committed to (the file's last K, the one its commit states; not
    a K chosen again as later studies come in) and its interval, the observed ratio, whether
    the observation falls in the prediction's interval, and the lookahead's and the constant's errors (x-fold).
    A study of ``table`` without a ratio (outcome-only not shown to learn) keeps its row, the observation and errors
    nan and ``inside`` None: the order of the commits does not depend on the result.
    The runs' commit is the first to hold any of the study's runs (:func:`_runs_added_by`: its exported
    ``selection.json`` or a run carried while it ran); a study not yet exported is left out."""
    preds = complete(predictions(root), root)
    if preds.empty or table.empty:
        return pd.DataFrame(columns=PREREGISTERED_COLUMNS)
    loo = loo_table(table, preds).set_index("study")
    rows = []
    for study in sorted(set(table["study"]) & set(preds["study"])):
        pred_full = _added_by(Path(root) / f"{study}.json")
        runs_full = _runs_added_by(speed_root, study)
        if None in (pred_full, runs_full) or pred_full == runs_full:
            continue
        if _git("merge-base", "--is-ancestor", pred_full, runs_full).returncode != 0:
            continue  # the prediction came after the runs: a retro-prediction
        k = int(preds.loc[preds["study"] == study, "k"].max())
        at = preds[(preds["study"] == study) & (preds["k"] == k)].iloc[0]
        r = loo.loc[study] if study in loo.index else None
        observed = float(r["observed"]) if r is not None else math.nan
        constant = float(r[CONSTANT]) if r is not None and CONSTANT in r else math.nan
        rows.append({"study": study, "prediction_commit": pred_full[:7], "runs_commit": runs_full[:7], "k": k,
                     "predicted": float(at["ratio"]), "predicted_lo": float(at["ratio_lo"]),
                     "predicted_hi": float(at["ratio_hi"]), "observed": observed,
                     "observed_lo": float(r["observed_lo"]) if r is not None else math.nan,
                     "observed_hi": float(r["observed_hi"]) if r is not None else math.nan,
                     "inside": bool(at["ratio_lo"] <= observed <= at["ratio_hi"]) if r is not None else None,
                     "lookahead_off": _off(observed, float(at["ratio"])), "constant": constant,
                     "constant_off": _off(observed, constant)})
    return pd.DataFrame(rows, columns=PREREGISTERED_COLUMNS)


def _off(observed: float, predicted: float) -> float:
    """How many times ``predicted`` misses ``observed`` (>= 1); nan where either is not a positive number."""
    ok = all(math.isfinite(v) and v > 0 for v in (observed, predicted))
    return math.exp(abs(math.log(observed / predicted))) if ok else math.nan


def preregistered_sentence(pre: pd.DataFrame) -> str:
    """Each preregistered study in words: prediction (commit) against observation, and the constant beside it."""
    def one(r) -> str:
        said = (f"Preregistered for `{r.study}` (prediction in {r.prediction_commit}, runs in {r.runs_commit}): the "
                f"lookahead predicted {r.predicted:.2f} [{r.predicted_lo:.2f}, {r.predicted_hi:.2f}] at K = {r.k}, ")
        if not math.isfinite(r.observed):
            return said + "the study observed no ratio (outcome-only's speed interval does not lie above 0)."
        return said + (f"the study observed {r.observed:.2f} [{r.observed_lo:.2f}, {r.observed_hi:.2f}], "
                       f"{'inside' if r.inside else 'outside'} the predicted interval (off {r.lookahead_off:.2f}x; "
                       f"the constant, {r.constant:.2f}, off {r.constant_off:.2f}x).")
    return " ".join(one(r) for r in pre.itertuples())


def lookahead_sentence(table: pd.DataFrame, root: str | Path = PREDICT_DIR,
                       speed_root: str | Path = paths.DATA_DIR / "runs" / "speed") -> str:
    """The README verdict's sentence on the lookahead: whether it predicts the speed ratio better than the constant,
    left out in turn, and on how many studies; empty when fewer than three studies are predicted. The preregistered
    studies of the tiny model are named here; a pretrained model's has its own sentence
    (:func:`skillgate_lib.report.pretrained.study_sentence`)."""
    preds = complete(predictions(root), root)
    if preds.empty:
        return ""
    loo = loo_table(table, preds)
    if len(loo) < 3:
        return ""
    s = loo_summary(loo).set_index("predictor")
    a, c = s.loc[LOOKAHEAD], s.loc[CONSTANT]
    better = a["mean_abs_log_error"] < c["mean_abs_log_error"]
    from skillgate_lib.report.rates import embedded_studies

    pre = preregistered(table, root, speed_root)
    if len(pre):
        pre = pre[pre["study"].isin(embedded_studies(table)["study"])]
    registered = "".join(f"; `{r.study}`, preregistered {r.predicted:.2f} vs "
                         + (f"{r.observed:.2f}" if math.isfinite(r.observed) else "no ratio") for r in pre.itertuples())
    return (f"A {int(preds['k'].max())}-step lookahead does {'better' if better else 'no better'} (off "
            f"{math.exp(a['mean_abs_log_error']):.2f}x vs {math.exp(c['mean_abs_log_error']):.2f}x over {len(loo)} studies"
            f"{registered}).")
