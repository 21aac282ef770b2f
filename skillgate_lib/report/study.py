"""Reading a study back (:mod:`skillgate_lib.runs.study`): test-set table with intervals, paired differences.

A study directory holds ``plan.json``, ``selection.json``, one folder per run and
``warmstart/test.json``. Everything here reads those files and imports no trainer, so the
table and the figures rebuild on a machine that trains nothing (``make figures``).

Intervals:

* a trained method: mean over seeds of its test-set rate, Student-t 95 % interval over
  seeds (the unit that varies: a seed's training and sampling; over 5-8 seeds a percentile
  bootstrap understates the interval, as it cannot see beyond the values drawn);
* the warm start (one model, no training seed): Wilson 95 % interval over the test
  instances of its single evaluation;
* a paired difference (SkillGate minus a baseline): per shared seed (same prompts,
  same LoRA init), then mean and Student-t interval over those seeds.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from skillgate_lib import logs, methods
from skillgate_lib.audit import t_interval

#: The rates of the table (percent) and reads per trial.
MEASURES = ("success", "oracle_read", "misleading_read", "reads")


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: not found; is {path.parent} a finished study (python -m skillgate_lib study)?")


def at_choice(entry: dict, config: dict) -> bool:
    """Whether a run's ``config`` sits at the point a ``selection.json`` entry chose (its ``point`` when the method
    searched several knobs jointly, else its one ``knob``'s ``value``)."""
    point = entry.get("point") or {entry["knob"]: entry["value"]}
    return all(k in config and float(config[k]) == float(v) for k, v in point.items())


def point_of(entry: dict, config: dict) -> str:
    """A run's point of its method's grid, labelled as ``selection.json`` labels it."""
    knobs = list(entry["point"]) if entry.get("point") else [entry.get("knob", "lr")]
    if len(knobs) == 1:
        return f"{float(config[knobs[0]]):g}"
    return ",".join(f"{k}={float(config[k]):g}" for k in knobs)


def test_results(study_dir: str | Path) -> pd.DataFrame:
    """One row per tested run: method, seed, the chosen value, ``test/*`` measures; the warm start as ``sft``."""
    study_dir = Path(study_dir)
    selection = _read_json(study_dir / "selection.json")
    rows = []
    for run in sorted(p for p in study_dir.iterdir() if (p / "test.json").exists() and (p / "config.json").exists()):
        config = logs.read_config(run)
        method = methods.of_config(config)
        if method not in selection or not at_choice(selection[method], config):
            continue
        rows.append({"method": method, "seed": int(config["seed"]), "run": run.name,
                     "value": selection[method]["value"], **_read_json(run / "test.json")})
    warm = study_dir / "warmstart" / "test.json"
    if warm.exists():
        rows.append({"method": "sft", "seed": -1, "run": "warmstart", "value": math.nan, **_read_json(warm)})
    if not rows:
        raise FileNotFoundError(f"{study_dir}: no run with a test.json at its method's chosen value")
    return pd.DataFrame(rows)


def _wilson(p: float, n: int, z: float = 1.96) -> tuple[float, float]:
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def summary_table(tests: pd.DataFrame) -> pd.DataFrame:
    """Per method: seeds, and for each measure the mean with its 95 % interval (rates in percent)."""
    rows = []
    for method in methods.in_order(tests["method"].unique()):
        sub = tests[tests["method"] == method]
        row = {"method": method, "seeds": len(sub) if method != "sft" else 0}
        for m in MEASURES:
            scale = 1.0 if m == "reads" else 100.0
            values = sub[f"test/{m}"].to_numpy(float)
            if method == "sft":
                mean = float(values[0])
                lo, hi = _wilson(mean, int(sub["tasks"].iloc[0])) if m != "reads" else (math.nan, math.nan)
            else:
                mean, lo, hi = t_interval(values)
            row |= {m: mean * scale, f"{m}_lo": lo * scale, f"{m}_hi": hi * scale}
        rows.append(row)
    return pd.DataFrame(rows)


def paired_differences(tests: pd.DataFrame, method: str = "skillgate",
                       measures=("success", "oracle_read", "misleading_read")) -> pd.DataFrame:
    """``method`` minus each other trained method on their shared seeds: mean and 95 % interval (pp)."""
    base = tests[tests["method"] == method].set_index("seed")
    rows = []
    for other in methods.in_order(set(tests["method"]) - {method, "sft"}):
        o = tests[tests["method"] == other].set_index("seed")
        seeds = base.index.intersection(o.index)
        row = {"baseline": other, "seeds": len(seeds)}
        for m in measures:
            d = (base.loc[seeds, f"test/{m}"] - o.loc[seeds, f"test/{m}"]).to_numpy(float) * 100
            mean, lo, hi = t_interval(d)
            row |= {m: mean, f"{m}_lo": lo, f"{m}_hi": hi}
        rows.append(row)
    return pd.DataFrame(rows)


def gain_by_horizon(tests: pd.DataFrame, method: str = "skillgate", baseline: str = "outcome",
                    measure: str = "success") -> pd.DataFrame:
    """Paired difference ``method - baseline`` on the test set by horizon H (pp, t-interval over seeds)."""
    a = tests[tests["method"] == method].set_index("seed")
    b = tests[tests["method"] == baseline].set_index("seed")
    seeds = a.index.intersection(b.index)
    cols = sorted((c for c in tests.columns if c.startswith(f"test/{measure}/horizon=")), key=lambda c: int(c.split("=")[1]))
    rows = []
    for c in cols:
        d = (a.loc[seeds, c] - b.loc[seeds, c]).to_numpy(float) * 100
        mean, lo, hi = t_interval(d)
        rows.append({"horizon": int(c.split("=")[1]), "diff": mean, "lo": lo, "hi": hi,
                     method: a.loc[seeds, c].mean() * 100, baseline: b.loc[seeds, c].mean() * 100})
    return pd.DataFrame(rows)


def validation_curves(study_dir: str | Path) -> pd.DataFrame:
    """Validation success / oracle-read by step of every run: method, knob value, point (its grid point, as
    ``selection.json`` labels it), seed, step, chosen."""
    study_dir = Path(study_dir)
    selection = _read_json(study_dir / "selection.json")
    frames = []
    for run in sorted(p for p in study_dir.iterdir() if (p / "metrics.jsonl").exists()):
        config = logs.read_config(run)
        method = methods.of_config(config)
        entry = selection.get(method, {"knob": "lr"})
        ev = logs.read_metrics(run).query("split == 'eval'")
        frames.append(pd.DataFrame({
            "method": method, "value": float(config[entry["knob"]]), "point": point_of(entry, config),
            "seed": int(config["seed"]), "step": ev["step"].astype(int),
            "success": ev["eval/success"], "oracle_read": ev["eval/oracle_read"],
            "chosen": method in selection and at_choice(entry, config)}))
    return pd.concat(frames, ignore_index=True)


def table_markdown(table: pd.DataFrame, reference: pd.DataFrame | None = None) -> str:
    """The test-set table as Markdown: mean [95 % interval] per measure, beside the paper's numbers."""
    ref = reference.set_index("method") if reference is not None else None
    lines = ["| method | seeds | success % | oracle read % | misleading read % | reads / trial | "
             "paper: success | paper: oracle read | paper: misleading read |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for _, r in table.iterrows():
        m = methods.METHODS.get(r["method"])
        label = f"{m.label} (`{m.name}`)" if m is not None else r["method"]
        cells = [f"{r[c]:.1f} [{r[c + '_lo']:.1f}, {r[c + '_hi']:.1f}]" for c in ("success", "oracle_read", "misleading_read")]
        cells.append(f"{r['reads']:.2f}" + (f" [{r['reads_lo']:.2f}, {r['reads_hi']:.2f}]" if not math.isnan(r["reads_lo"]) else ""))
        paper = ref.loc[m.paper_row] if ref is not None and m is not None and m.paper_row in ref.index else None
        ref_cells = [f"{paper[c]:.1f}" for c in ("success", "oracle_read", "misleading_read")] if paper is not None else ["–"] * 3
        seeds = "1 model" if r["method"] == "sft" else str(int(r["seeds"]))
        lines.append(f"| {label} | {seeds} | " + " | ".join(cells + ref_cells) + " |")
    return "\n".join(lines) + "\n"


def paired_markdown(diffs: pd.DataFrame, method: str = "skillgate") -> str:
    """The paired differences as Markdown (percentage points, 95 % interval over shared seeds)."""
    lines = [f"| {method} minus | seeds | success pp | oracle read pp | misleading read pp |", "|---|---:|---:|---:|---:|"]
    for _, r in diffs.iterrows():
        cells = [f"{r[c]:+.1f} [{r[c + '_lo']:+.1f}, {r[c + '_hi']:+.1f}]" for c in ("success", "oracle_read", "misleading_read")]
        lines.append(f"| {r['baseline']} | {int(r['seeds'])} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def audit_outcome_runs(study_dir: str | Path, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """The audit of each outcome-only run of a study (its logged training rollouts), one row per seed.

    Columns: seed, share_median, dilution, sign_wrong, zero_credit (reads with no credit),
    value with its interval, rollouts, reads_per_trial, ``signal`` = value x share_median (outcome-only's
    selector signal as the theory writes it, up to the factor (G-1)/G: small = starved), and
    ``ratio``: the theory fitted to that log (:func:`skillgate_lib.theory.fit_model`),
    SkillGate's selector signal over outcome-only's, each averaged over the log's horizons
    first (NaN when the fitted outcome-only signal averages to 0 or below).
    """
    from skillgate_lib.audit import run_audit

    tests = test_results(study_dir)
    rows = []
    for _, r in tests[tests["method"] == "outcome"].iterrows():
        result = run_audit(Path(study_dir) / r["run"], split="train", n_boot=n_boot, seed=seed)
        ov, model = result.overall, result.model
        ratio = math.nan
        if model is not None:
            hs = np.arange(int(result.bins["h_min"].min()), int(result.bins["h_max"].max()) + 1)
            outcome_signal = float(np.nanmean(model.selector_signal(hs)))
            if outcome_signal > 0:
                ratio = float(np.nanmean(model.selector_signal_skillgate(hs))) / outcome_signal
        rows.append({"seed": r["seed"], "share_median": ov["share_median"], "dilution": result.dilution,
                     "sign_wrong": ov["sign_wrong"], "zero_credit": ov["sign_zero"], "value": ov["value"],
                     "value_lo": ov["value_lo"], "value_hi": ov["value_hi"], "rollouts": result.n_rows,
                     "reads_per_trial": ov["reads_per_trial"], "signal": ov["value"] * ov["share_median"], "ratio": ratio})
    return pd.DataFrame(rows)


def dose_response(study_dirs: dict[str, str | Path], n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Per regime: the outcome runs' audited starvation (mean over seeds) beside SkillGate's paired gain on the test set.

    ``study_dirs``: regime -> a finished study holding outcome and skillgate runs on shared seeds.
    The audit means leave out runs whose logged rollouts read nothing (a policy that stopped
    reading has no selector credit to measure: its Share would count as 0 and its dilution as
    infinite); ``audit_runs_without_reads`` counts them. The paired differences keep every seed.
    """
    rows = []
    for regime, d in study_dirs.items():
        tests = test_results(d)
        diff = paired_differences(tests[tests["method"].isin(["skillgate", "outcome"])],
                                  measures=("success", "oracle_read")).iloc[0]
        audits = audit_outcome_runs(d, n_boot=n_boot, seed=seed)
        reading = audits[audits["reads_per_trial"] > 0]
        table = summary_table(tests[tests["method"].isin(["skillgate", "outcome"])]).set_index("method")
        rows.append({"regime": regime, "seeds": int(diff["seeds"]),
                     **{f"audit_{c}": reading[c].mean() for c in ("share_median", "dilution", "sign_wrong", "zero_credit",
                                                                 "value", "signal", "ratio")},
                     "audit_rollouts": int(reading["rollouts"].sum()),
                     "audit_runs_without_reads": len(audits) - len(reading),
                     **{f"{m}_{k}": diff[f"{m}{s}"] for m in ("success", "oracle_read")
                        for k, s in (("diff", ""), ("lo", "_lo"), ("hi", "_hi"))},
                     **{f"{m}_{meth}": table.loc[meth, m] for m in ("success", "oracle_read")
                        for meth in ("outcome", "skillgate")}})
    return pd.DataFrame(rows)
