"""Notebook 06's pieces: a pretrained warm start's gates, its probe beside the tiny model's, and where its rate
study and the study's prediction stand.

Everything here reads committed files: the warm start's directory (``data/models/<model>/``: ``gates.json``,
``train_log.jsonl``), the probe summaries (``data/runs/diagnosis/probes/*.json``), the study's directory
(``data/runs/speed/<study>/``) and its prediction (``data/runs/predict/<study>.json``). A study that has a plan and
no runs yet is a state this module reports, not an error.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

#: Token types of the warm start's teacher-forced log, in the order the figure draws them.
TOKEN_TYPES = ("name", "rationale", "value", "format")


def gates(model_dir: str | Path) -> pd.DataFrame:
    """The warm start's gate evaluation (``gates.json``, written by ``evaluate --json``) against the kit's gates
    (:data:`~skillgate_lib.policy.lora_warmstart.GATES`): measure, value, range, met. The evaluation's command and
    wall time are in ``.attrs``."""
    from skillgate_lib.policy.lora_warmstart import gate_rows

    path = Path(model_dir) / "gates.json"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no gate evaluation; write it with python -m skillgate_lib evaluate --json "
                                f"--out {path}")
    rec = json.loads(path.read_text())
    try:
        rows = gate_rows(rec["summary"])
    except KeyError as err:
        raise ValueError(f"{path}: field {err.args[0]!r} missing from its summary") from None
    table = pd.DataFrame(rows, columns=["measure", "value", "gate", "met"])
    table.attrs.update({k: rec.get(k) for k in ("command", "seconds", "regime", "tasks", "split")})
    return table


def warmstart_log(model_dir: str | Path) -> pd.DataFrame:
    """The warm start's training log (``train_log.jsonl``) long by token type: step, split (``train`` or
    ``heldout``), token type, teacher-forced accuracy and mean 1 - p(y). ``.attrs["batch_size"]``: demonstrations
    a step (``warmstart_config.json``), where recorded."""
    path = Path(model_dir) / "train_log.jsonl"
    rows = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}, line {i}: not JSON ({err.msg})") from None
        split = r.get("split", "train")
        pre = "heldout/" if split == "heldout" else ""
        try:
            rows += [{"step": int(r["step"]), "split": split, "token": t, "accuracy": float(r[f"{pre}acc/{t}"]),
                      "uncertainty": float(r[f"{pre}uncertainty/{t}"])} for t in TOKEN_TYPES if f"{pre}acc/{t}" in r]
        except KeyError as err:
            raise ValueError(f"{path}, line {i}: field {err.args[0]!r} missing") from None
    log = pd.DataFrame(rows, columns=["step", "split", "token", "accuracy", "uncertainty"])
    config = Path(model_dir) / "warmstart_config.json"
    log.attrs["batch_size"] = json.loads(config.read_text()).get("batch_size") if config.exists() else None
    return log


def warmstart_figure(log: pd.DataFrame):
    """Teacher-forced accuracy per token type over the warm start's steps (lines), and on held-out demonstrations
    after training (markers at the last step)."""
    import matplotlib.pyplot as plt

    from skillgate_lib.plots import WIDTH

    fig, ax = plt.subplots(figsize=(WIDTH * 0.6, 3.0))
    colors = dict(zip(TOKEN_TYPES, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    for token, g in log.groupby("token", sort=False):
        train, held = g[g["split"] == "train"], g[g["split"] == "heldout"]
        ax.plot(train["step"], train["accuracy"], color=colors[token], lw=1.5, label=token)
        ax.plot(held["step"], held["accuracy"], "o", color=colors[token], mfc="white")
    batch = log.attrs.get("batch_size")
    ax.set_xlabel(f"warm-start step ({batch} demonstrations each)" if batch else "warm-start step")
    ax.set_ylabel("teacher-forced accuracy")
    ax.set_ylim(0, 1.02)
    ax.legend(title="token type (o: held out)", fontsize=7, title_fontsize=7, loc="lower right", ncol=2)
    fig.tight_layout()
    return fig


def probes(probes_dir: str | Path) -> pd.DataFrame:
    """One row per probe summary (``probe --json``), indexed by the file's stem: model, regime, per-step failure,
    horizons, success and Value (with its interval) in the probe's rollouts, and the name's Share, Gradient Share
    and wrong-signed fraction at the shortest and the longest horizons (medians over groups)."""
    from skillgate_lib.report.regime_choice import load

    files = sorted(Path(probes_dir).glob("*.json"))
    if not files:
        raise FileNotFoundError(f"{probes_dir}: no probe summaries (*.json)")
    t = load(files)
    t["horizons"] = [f"{min(h)}-{max(h)}" for h in t["horizons"]]
    t.index.name = "probe"
    cols = ["model", "regime", "step_failure", "horizons", "success", "value", "value_lo", "value_hi",
            "share_median_short", "share_median_long", "gshare_median_short", "gshare_median_long",
            "sign_wrong_short", "sign_wrong_long"]
    return t[cols].sort_values(["model", "gshare_median_long"])


def dilution(table: pd.DataFrame, model: str, tiny: str, regime: str = "paper",
             notes: tuple[str, ...] = ("paper_note4", "paper_note8", "paper_note8_h68")) -> dict:
    """The name's Gradient Share at the longest horizons (``gshare_median_long``) of ``model`` against ``tiny``'s in
    the same ``regime`` (one probe each, at the regime's own settings), and against ``tiny``'s note warm starts in
    ``notes``: each value, the ratio tiny / model, the range over the note probes, and the distance on a log scale
    (natural log) to the nearest end of that range and to the tiny probe of ``regime``."""
    def one(m: str, r: str) -> pd.Series:
        rows = table[(table["model"] == m) & (table["regime"] == r)]
        if len(rows) != 1:
            raise ValueError(f"expected one probe of {m!r} in {r!r}, found {len(rows)}: {list(rows.index)}")
        return rows.iloc[0]

    ours, theirs = one(model, regime), one(tiny, regime)
    note = table[table["model"].str.startswith(tiny) & table["regime"].isin(notes)]["gshare_median_long"]
    if note.empty:
        raise ValueError(f"no probe of a {tiny!r} note warm start in {', '.join(notes)}")
    g, t = float(ours["gshare_median_long"]), float(theirs["gshare_median_long"])
    lo, hi = float(note.min()), float(note.max())
    to_notes = np.log(g / hi) if g > hi else np.log(lo / g) if g < lo else 0.0
    return {"model": g, "tiny": t, "ratio": t / g, "note_min": lo, "note_max": hi,
            "probes": {"model": ours.name, "tiny": theirs.name, "notes": list(note.index)},
            "log_to_notes": float(to_notes), "log_to_tiny": float(abs(np.log(t / g)))}


def probe_figure(table: pd.DataFrame, model: str):
    """Each probe on one row, ``model``'s highlighted: the name's Gradient Share (log scale; filled: the longest
    horizons, hollow: the shortest), the wrong-signed fraction at the longest horizons, and Value with its 95 %
    interval."""
    import matplotlib.pyplot as plt

    from skillgate_lib.plots import WIDTH

    t = table.iloc[::-1]
    y = np.arange(len(t))
    hot = (t["model"] == model).to_numpy()
    color = np.where(hot, "#d62728", "0.35")
    fig, axes = plt.subplots(1, 3, figsize=(WIDTH, 0.32 * len(t) + 1.4), sharey=True)
    ax = axes[0]
    ax.scatter(t["gshare_median_long"], y, c=color, zorder=3, label="longest horizons")
    ax.scatter(t["gshare_median_short"], y, facecolors="white", edgecolors=color, zorder=3, label="shortest horizons")
    ax.set_xscale("log")
    ax.set_xlabel("Gradient Share\nof the name", fontsize=9)
    axes[1].scatter(t["sign_wrong_long"], y, c=color, zorder=3)
    axes[1].set_xlabel("wrong-signed fraction,\nlongest horizons", fontsize=9)
    axes[1].set_xlim(0, 1)
    axes[2].errorbar(t["value"], y, xerr=[t["value"] - t["value_lo"], t["value_hi"] - t["value"]], fmt="none",
                     ecolor="0.6", zorder=2)
    axes[2].scatter(t["value"], y, c=color, zorder=3)
    axes[2].axvline(0, color="0.5", lw=0.8)
    axes[2].set_xlabel("Value: success reading\nthe oracle - another", fontsize=9)
    axes[0].set_yticks(y)
    axes[0].set_yticklabels([f"{i} ({m})" for i, m in zip(t.index, t["model"])], fontsize=7)
    for label, h in zip(axes[0].get_yticklabels(), hot):
        label.set_color("#d62728" if h else "0.2")
    fig.tight_layout()
    fig.legend(*ax.get_legend_handles_labels(), loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2, fontsize=8)
    return fig


def study_state(speed_root: str | Path, study: str) -> dict:
    """Where a rate study stands: its plan (None if there is none), how many runs it holds, and whether its search
    has chosen (``selection.json``). ``state`` is ``"no plan"``, ``"planned"`` (a plan, no runs), ``"searching"``
    (runs, no selection) or ``"run"``."""
    d = Path(speed_root) / study
    plan = json.loads((d / "plan.json").read_text()) if (d / "plan.json").exists() else None
    runs = sorted(p.name for p in d.glob("*-lr*-seed*") if p.is_dir()) if d.is_dir() else []
    selected = (d / "selection.json").exists()
    state = "no plan" if plan is None else "run" if selected else "searching" if runs else "planned"
    return {"study": study, "state": state, "plan": plan, "runs": len(runs), "selected": selected}


def plan_table(plan: dict) -> pd.DataFrame:
    """A study's plan as a two-column table (what, value), the settings flattened."""
    flat = {k: v for k, v in plan.items() if k != "settings"}
    flat.update(plan.get("settings", {}))
    return pd.DataFrame({"value": [", ".join(map(str, v)) if isinstance(v, list) else str(v) for v in flat.values()]},
                        index=pd.Index(list(flat), name="plan"))


def prediction(predict_root: str | Path, study: str) -> pd.DataFrame:
    """The committed lookahead for ``study`` (``<predict_root>/<study>.json``), one row per K (each arm's mean change
    in logit(choice) and the ratio, with intervals); empty where none is committed."""
    from skillgate_lib.report import lookahead

    preds = lookahead.predictions(predict_root)
    return preds[preds["study"] == study].reset_index(drop=True) if not preds.empty else preds


def _interval(v: float, lo: float, hi: float, f: str) -> str:
    """``v [lo, hi]`` in format ``f``, the interval left out where it could not be computed (fewer than 3 pairs)."""
    said = format(v, f)
    return said + (f" [{format(lo, f)}, {format(hi, f)}]" if math.isfinite(lo) and math.isfinite(hi) else " (no interval)")


def _side(lo: float, hi: float) -> str:
    return "above 0" if lo > 0 else "below 0" if hi < 0 else "covering 0"


def study_sentence(table: pd.DataFrame, endpoints: pd.DataFrame, pre: pd.DataFrame) -> str:
    """The README verdict's sentence on each pretrained model's rate study (the rows of ``table``, a
    :func:`skillgate_lib.report.rates.rate_table`, whose ``pretrained`` is set). How SkillGate's speed of learning
    the choice compares: where outcome-only learns the choice, the ratio with its BCa interval and the word both
    tests give (:func:`skillgate_lib.report.rates.faster_word`); elsewhere the paired slope difference and the side
    of 0 its interval lies on. The lookahead committed before the study's runs, against it (``pre``,
    :func:`skillgate_lib.report.lookahead.preregistered`). Where the arms end after the last step (``endpoints``,
    :func:`skillgate_lib.report.rate_endpoints.endpoint_table`): SkillGate minus outcome-only in validation success and
    oracle-read, paired t-intervals, each with the side of 0 it lies on. Empty while no pretrained study has run."""
    from skillgate_lib.report.rates import faster_word

    if "pretrained" not in table:
        return ""
    pre = pre.set_index("study") if len(pre) else pd.DataFrame()
    out = []
    for r in table[table["pretrained"].astype(bool)].sort_values("study").itertuples():
        text = f"On the pretrained `{r.model}` (`{r.study}`, {r.seeds} seed pairs), "
        if r.outcome_learns:
            text += (f"SkillGate is {faster_word(r)} than outcome-only GRPO at learning the choice "
                     f"({_interval(r.ratio, r.ratio_lo, r.ratio_hi, '.2f')}x")
        else:
            text += (f"outcome-only GRPO is not shown to learn the choice, so there is no ratio (SkillGate minus "
                     f"outcome-only: {_interval(r.diff, r.diff_lo, r.diff_hi, '+.3f')} logit/step, "
                     f"{_side(r.diff_lo, r.diff_hi)}")
        if r.study in pre.index:
            p = pre.loc[r.study]
            text += (f"; the lookahead preregistered "
                     f"{_interval(p['predicted'], p['predicted_lo'], p['predicted_hi'], '.2f')}"
                     + (f", the observation {'inside' if p['inside'] else 'outside'} it" if r.outcome_learns else ""))
        else:
            text += "; no prediction committed before its runs"
        ends = endpoints[endpoints["study"] == r.study].set_index("endpoint") if len(endpoints) else pd.DataFrame()
        said = [f"{word} {_interval(e['diff'], e['diff_lo'], e['diff_hi'], '+.1f')} pp ({_side(e['diff_lo'], e['diff_hi'])})"
                for label, word in (("validation success", "success"), ("validation oracle-read", "oracle-read"))
                if label in ends.index for e in [ends.loc[label]]]
        text += ")" + (f"; after the last step, SkillGate minus outcome-only in validation: {', '.join(said)}"
                       if said else "") + "."
        out.append(text)
    return " ".join(out)
