"""The rate studies' learning curves: each arm's validation measures by step at its chosen step size.

Two measures per evaluation (every 5 steps on 256 validation instances): the sampled oracle-read (did the
trial read the oracle skill at all, which moves with how many reads a trial makes) and the choice alone,
the teacher-forced P(oracle | slate) (:mod:`skillgate_lib.runs.choice`; logged by studies run since the
choice measure, nan before). The rate study's slopes are taken on these curves (:mod:`~skillgate_lib.report.rates`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from skillgate_lib import logs
from skillgate_lib.report.rates import SPEED_DIR, studies

#: Curve column -> axis label, in panel-row order.
CURVE_MEASURES = {"oracle_read": "validation oracle-read", "choice": "validation choice P(oracle | slate)"}


def curves(root: str | Path = SPEED_DIR, names: list[str] | None = None) -> pd.DataFrame:
    """One row per evaluation of every run at its arm's chosen step size: study, method, seed, step and
    each of :data:`CURVE_MEASURES` (``choice`` nan where the run did not log it). ``names``: only these studies."""
    rows = []
    for study_dir in studies(root):
        sel_path = study_dir / "selection.json"
        if not sel_path.exists() or (names is not None and study_dir.name not in names):
            continue
        for method, c in json.loads(sel_path.read_text()).items():
            for run in sorted(study_dir.glob(f"{method}-lr{float(c['value']):g}-seed*")):
                ev = logs.read_metrics(run).query("split == 'eval'")
                choice = ev["eval/choice"] if "eval/choice" in ev else pd.Series(np.nan, index=ev.index)
                rows += [{"study": study_dir.name, "method": method, "seed": int(run.name.rsplit("seed", 1)[1]),
                          "step": int(step), "oracle_read": float(read), "choice": float(ch)}
                         for step, read, ch in zip(ev["step"], ev["eval/oracle_read"], choice)]
    return pd.DataFrame(rows, columns=["study", "method", "seed", "step", *CURVE_MEASURES])


def curves_figure(curves: pd.DataFrame, names: list[str] | None = None, measures=tuple(CURVE_MEASURES)):
    """One column per study, one row per measure: each seed thin, the mean over seeds thick. A panel whose
    study did not log the measure says so instead of drawing nothing."""
    import matplotlib.pyplot as plt

    from skillgate_lib.methods import label as method_label
    from skillgate_lib.plots import METHOD_COLORS, WIDTH

    names = names or sorted(curves["study"].unique())
    fig, axes = plt.subplots(len(measures), len(names), figsize=(WIDTH * 1.35, 2.5 * len(measures)), sharex=True,
                             sharey="row", squeeze=False)
    for row, measure in zip(axes, measures):
        for ax, name in zip(row, names):
            c = curves[curves["study"] == name]
            if c[measure].isna().all():
                ax.text(0.5, 0.5, "not logged", transform=ax.transAxes, ha="center", va="center", fontsize=8, color="0.4")
            else:
                for method, g in c.groupby("method"):
                    color = METHOD_COLORS.get(method)
                    for _, s in g.groupby("seed"):
                        ax.plot(s["step"], s[measure], color=color, lw=0.5, alpha=0.35)
                    mean = g.groupby("step")[measure].mean()
                    ax.plot(mean.index, mean.values, color=color, lw=2, label=method_label(method))
            if measure == measures[0]:
                ax.set_title(name, fontsize=9)
            if measure == measures[-1]:
                ax.set_xlabel("step")
        row[0].set_ylabel(CURVE_MEASURES[measure], fontsize=8)
    handles = [h for ax in axes.flat for h in [ax.get_legend_handles_labels()] if h[0]]
    if handles:
        axes[0][0].legend(*handles[0], fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig
