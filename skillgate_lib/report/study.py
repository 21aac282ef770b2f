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
from typing import NamedTuple

import numpy as np
import pandas as pd

from skillgate_lib import logs, methods
from skillgate_lib.audit import t_interval

#: The rates of the table (percent) and reads per trial.
MEASURES = ("success", "oracle_read", "misleading_read", "reads")

#: The on-policy steps over which a run's speed of learning the choice is measured.
SPEED_STEPS = 25


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
        rows.append({"method": method, "seed": int(config["seed"]), "run": run.name, "run_dir": str(run),
                     "value": selection[method]["value"], **_read_json(run / "test.json")})
    warm = study_dir / "warmstart" / "test.json"
    if warm.exists():
        rows.append({"method": "sft", "seed": -1, "run": "warmstart", "run_dir": str(warm.parent), "value": math.nan,
                     **_read_json(warm)})
    if not rows:
        raise FileNotFoundError(f"{study_dir}: no run with a test.json at its method's chosen value")
    return pd.DataFrame(rows)


#: Studies that searched some arms of a study again after its results, by the study they supplement, in the order
#: they ran: each supplement's arms replace that study's rows of the same arms (:func:`with_supplements`).
SUPPLEMENTS = {"paper_note8": ("paper_note8-edge", "paper_note8-lambda")}


def with_supplements(tests: pd.DataFrame, study_dir: str | Path) -> pd.DataFrame:
    """``tests`` (:func:`test_results` of ``study_dir``) with every arm a supplement of that study (:data:`SUPPLEMENTS`,
    beside it in the same folder) searched again taken from the supplement, at the supplement's choice."""
    study_dir = Path(study_dir)
    for name in SUPPLEMENTS.get(study_dir.name, ()):
        sup = study_dir.parent / name
        if not (sup / "selection.json").exists():
            continue
        arms = set(_read_json(sup / "selection.json"))
        tests = pd.concat([tests[~tests["method"].isin(arms)],
                           test_results(sup).query("method in @arms")], ignore_index=True)
    return tests


def choice_speed(run_dir: str | Path, upto: int = SPEED_STEPS) -> float:
    """How fast a run learns the choice: the least-squares slope of logit(on-policy oracle-read) over its
    training steps 1..``upto`` (per step; the rate study's ``slope_onpolicy``). NaN for a run with no on-policy
    choice to measure: no rollouts (selection BC) or an oracle-read of 0 at every step (skill-free RL, which
    trains without the slate)."""
    from skillgate_lib.report.rates import speed_measures

    m = logs.read_metrics(run_dir)
    train = m[(m["split"] == "train") & (m["step"] <= upto)] if "train/oracle_read" in m else m.iloc[:0]
    if train.empty or not (train["train/oracle_read"] > 0).any():
        return math.nan
    return float(speed_measures(run_dir, upto)["slope_onpolicy"])


def shared_rollouts(tests: pd.DataFrame, method: str, other: str,
                    columns: tuple[str, ...] = ("train/oracle_read", "train/success", "train/reads")) -> pd.DataFrame:
    """Per seed that both methods of ``tests`` (:func:`test_results`) ran, the first training step whose logged
    on-policy statistics differ between them (the runs share their rollouts before it: same seed, same prompts, same
    samples until the updates differ); ``None`` where they never differ."""
    tests = tests.set_index(["method", "seed"])
    rows = []
    for seed in sorted(set(tests.loc[method].index) & set(tests.loc[other].index)):
        a, b = (logs.read_metrics(tests.loc[(m, seed), "run_dir"]).query("split == 'train'").set_index("step")
                for m in (method, other))
        steps = a.index.intersection(b.index)
        differ = [s for s in steps if not a.loc[s, list(columns)].equals(b.loc[s, list(columns)])]
        rows.append({"seed": seed, "first_differing_step": min(differ) if differ else None})
    return pd.DataFrame(rows)


def with_choice_speed(tests: pd.DataFrame, upto: int = SPEED_STEPS) -> pd.DataFrame:
    """``tests`` (:func:`test_results`) with a ``speed`` column: :func:`choice_speed` of each run (NaN for the
    warm start)."""
    speed = [math.nan if r == "warmstart" else choice_speed(d, upto) for r, d in zip(tests["run"], tests["run_dir"])]
    return tests.assign(speed=speed)


def _wilson(p: float, n: int, z: float = 1.96) -> tuple[float, float]:
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def rate_interval(p: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """Mean of the proportions ``p`` (one per seed) and its Student-t interval over seeds cut to [0, 1].

    A mean of proportions cannot leave [0, 1], so cutting the interval there keeps its coverage while a reader no
    longer sees 102 % (one seed lagging the rest stretched a t-interval past 100 %). Over 4-8 seeds a bootstrap
    interval would understate the spread; the t-interval does not."""
    mean, lo, hi = t_interval(p, level)
    return mean, (max(lo, 0.0) if not math.isnan(lo) else lo), (min(hi, 1.0) if not math.isnan(hi) else hi)


def summary_table(tests: pd.DataFrame) -> pd.DataFrame:
    """Per method: seeds, and for each measure the mean with its 95 % interval (rates in percent); with the
    choice speed (logit per step) where ``tests`` has a ``speed`` column (:func:`with_choice_speed`).

    A rate's interval stays in [0, 100] %: over seeds, the Student-t interval cut to [0, 100] %
    (:func:`rate_interval`); for the warm start, one model, the Wilson interval over test instances. Reads per trial
    (a count) and the choice speed get the Student-t interval."""
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
            elif m == "reads":
                mean, lo, hi = t_interval(values)
            else:
                mean, lo, hi = rate_interval(values)
            row |= {m: mean * scale, f"{m}_lo": lo * scale, f"{m}_hi": hi * scale}
        if "speed" in sub:
            row |= dict(zip(("speed", "speed_lo", "speed_hi"), t_interval(sub["speed"].to_numpy(float))))
        rows.append(row)
    return pd.DataFrame(rows)


def paired_differences(tests: pd.DataFrame, method: str = "skillgate",
                       measures=("success", "oracle_read", "misleading_read")) -> pd.DataFrame:
    """``method`` minus each other trained method on their shared seeds: mean and 95 % interval (pp; the choice
    speed ``speed``, where asked for, in logit per step)."""
    base = tests[tests["method"] == method].set_index("seed")
    rows = []
    for other in methods.in_order(set(tests["method"]) - {method, "sft"}):
        o = tests[tests["method"] == other].set_index("seed")
        seeds = base.index.intersection(o.index)
        row = {"baseline": other, "seeds": len(seeds)}
        for m in measures:
            col, scale = ("speed", 1.0) if m == "speed" else (f"test/{m}", 100.0)
            d = (base.loc[seeds, col] - o.loc[seeds, col]).to_numpy(float) * scale
            mean, lo, hi = t_interval(d)
            row |= {m: mean, f"{m}_lo": lo, f"{m}_hi": hi}
        rows.append(row)
    return pd.DataFrame(rows)


def paired_differences_by_horizon(tests: pd.DataFrame, method: str = "skillgate", baseline: str = "outcome",
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


#: The line under the test-set table that says what its cells are.
TABLE_LEGEND = ("Mean over seeds [95 % Student-t interval over seeds; for rates cut to [0, 100] %; the warm start, "
                "one model: Wilson over test instances]. *Reads*: reads per trial (its interval in the CSV). "
                f"*Choice speed (on-policy)*: slope of logit(on-policy oracle-read) over GRPO steps 1-{SPEED_STEPS}, "
                "logit per step. *Paper*: the reference's numbers (success / oracle-read / misleading-read %).")


def table_markdown(table: pd.DataFrame, reference: pd.DataFrame | None = None) -> str:
    """The test-set table as Markdown: mean [95 % interval] per measure (and the choice speed (on-policy) where
    ``table`` has it), beside the paper's numbers, with short headers and :data:`TABLE_LEGEND` under it."""
    ref = reference.set_index("method") if reference is not None else None
    speed = "speed" in table
    lines = ["| method | seeds | success % | oracle-read % | misleading-read % | reads | "
             + ("choice speed (on-policy) | " if speed else "") + "paper |",
             "|---|---:|---:|---:|---:|---:|" + ("---:|" if speed else "") + "---:|"]
    for _, r in table.iterrows():
        m = methods.METHODS.get(r["method"])
        cells = [f"{r[c]:.1f} [{r[c + '_lo']:.1f}, {r[c + '_hi']:.1f}]" for c in ("success", "oracle_read", "misleading_read")]
        cells.append(f"{r['reads']:.2f}")  # its interval is in the CSV: a column of "1.00 [1.00, 1.00]" crowds the lab
        if speed:
            cells.append(_signed(r, "speed", "{:+.3f}"))
        paper = ref.loc[m.paper_row] if ref is not None and m is not None and m.paper_row in ref.index else None
        cells.append(" / ".join(f"{paper[c]:.1f}" for c in ("success", "oracle_read", "misleading_read"))
                     if paper is not None else "–")
        seeds = "1 model" if r["method"] == "sft" else str(int(r["seeds"]))
        lines.append(f"| {methods.label(r['method'])} | {seeds} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\n" + TABLE_LEGEND + "\n"


def _signed(row: pd.Series, col: str, f: str) -> str:
    """``row[col]`` with its interval, formatted by ``f``; a dash where the value is NaN."""
    if math.isnan(row[col]):
        return "–"
    interval = "" if math.isnan(row[f"{col}_lo"]) else f" [{f.format(row[col + '_lo'])}, {f.format(row[col + '_hi'])}]"
    return f.format(row[col]) + interval


def paired_markdown(diffs: pd.DataFrame, method: str = "skillgate") -> str:
    """The paired differences as Markdown (percentage points, Student-t 95 % interval over shared seeds; the choice
    speed (on-policy) in logit per step where ``diffs`` has it), every method by its label."""
    speed = "speed" in diffs
    lines = [f"| {methods.label(method)} minus | seeds | success pp | oracle-read pp | misleading-read pp |"
             + (" choice speed (on-policy) |" if speed else ""), "|---|---:|---:|---:|---:|" + ("---:|" if speed else "")]
    for _, r in diffs.iterrows():
        cells = [_signed(r, c, "{:+.1f}") for c in ("success", "oracle_read", "misleading_read")]
        if speed:
            cells.append(_signed(r, "speed", "{:+.3f}"))
        lines.append(f"| {methods.label(r['baseline'])} | {int(r['seeds'])} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def search_markdown(study_dir: str | Path) -> str:
    """How each arm's setting was chosen (``selection.json``): the points searched, the one kept with its mean
    validation success over the search seeds, the values added at an edge, and whether the choice still sits at one."""
    selection = _read_json(Path(study_dir) / "selection.json")
    lines = ["| method | points searched | chosen | validation success % | grid extended by | choice at the edge |",
             "|---|---:|---|---:|---|---|"]
    for method, entry in selection.items():
        point = entry.get("point") or {entry["knob"]: entry["value"]}
        label = ",".join(f"{k}={float(v):g}" for k, v in point.items()) if entry.get("point") else f"{float(entry['value']):g}"
        chosen = ", ".join(f"{k} {float(v):g}" for k, v in point.items())
        extended = ", ".join(f"{float(v):g}" for v in entry.get("extended", [])) or "–"
        edge = "yes, after the last extension" if entry.get("at_edge") else "no"
        lines.append(f"| `{method}` | {len(entry['val_success'])} | {chosen} | {100 * entry['val_success'][label]:.1f} | "
                     f"{extended} | {edge} |")
    return "\n".join(lines) + "\n"


def curves_markdown(study_dir: str | Path) -> str:
    """Validation oracle-read and success (%) by step at each arm's chosen setting, mean over all its seeds."""
    val = validation_curves(study_dir)
    mean = val[val["chosen"]].groupby(["method", "step"], sort=False)[["oracle_read", "success"]].mean().mul(100)
    steps = sorted(mean.index.get_level_values("step").unique())
    lines = ["| method | seeds | " + " | ".join(f"oracle-read % at step {s}" if i == 0 else str(s) for i, s in enumerate(steps))
             + " | " + " | ".join(f"success % at step {s}" if i == 0 else str(s) for i, s in enumerate(steps)) + " |",
             "|---|---:|" + "---:|" * (2 * len(steps))]
    seeds = val[val["chosen"]].groupby("method", sort=False)["seed"].nunique()
    for method in methods.in_order(seeds.index):
        row = mean.loc[method].reindex(steps)
        lines.append(f"| `{method}` | {seeds[method]} | " + " | ".join(f"{v:.1f}" for v in row["oracle_read"]) + " | "
                     + " | ".join(f"{v:.1f}" for v in row["success"]) + " |")
    return "\n".join(lines) + "\n"


class StudyTables(NamedTuple):
    """A finished study read back: its tested runs, the table, the paired differences and both as Markdown."""

    tests: pd.DataFrame
    table: pd.DataFrame
    diffs: pd.DataFrame
    markdown: str


def study_tables(study_dir: str | Path, reference: pd.DataFrame | None = None, method: str = "skillgate") -> StudyTables:
    """The test-set table of a study (its supplements' arms in place: :func:`with_supplements`) with the choice speed
    as a column, ``method`` minus each other arm paired by seed, and their Markdown (beside ``reference``, the
    paper's numbers, where given)."""
    tests = with_choice_speed(with_supplements(test_results(study_dir), study_dir))
    table = summary_table(tests)
    diffs = paired_differences(tests, method, measures=("success", "oracle_read", "misleading_read", "speed"))
    return StudyTables(tests, table, diffs, table_markdown(table, reference) + "\n" + paired_markdown(diffs, method))


def write_tables(tables: StudyTables, out_dir: str | Path, stem: str) -> list[Path]:
    """``STEM.md`` (the Markdown), ``STEM.csv`` (the table) and ``STEM_paired.csv`` (the differences) in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / f"{stem}.md", out / f"{stem}.csv", out / f"{stem}_paired.csv"]
    written[0].write_text(tables.markdown)
    tables.table.to_csv(written[1], index=False, float_format="%.6g")  # enough digits that text read back rounds alike
    tables.diffs.to_csv(written[2], index=False, float_format="%.6g")
    return written


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
