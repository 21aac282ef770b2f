"""The powered comparison's figures (notebook 04): the test-set table as intervals, the
validation curves that fixed the step count, and the dose-response across regimes.

Inputs are the tables of :mod:`skillgate_lib.report.study`; style, colours and ``savefig``
are :mod:`skillgate_lib.plots`'.
"""

from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import PercentFormatter

from skillgate_lib.methods import label as method_label
from skillgate_lib.plots import METHOD_COLORS, WIDTH, legend_below

_RATES = (("success", "success"), ("oracle_read", "oracle-read"))


def rates_and_differences(table: pd.DataFrame, diffs: pd.DataFrame, method: str = "skillgate") -> plt.Figure:
    """Left: each method's test-set success and oracle-read, mean and 95 % interval.
    Right: ``method`` minus each baseline on shared seeds, with its 95 % interval."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(WIDTH, 4.2), layout="constrained", sharey=True)
    names = list(table["method"])
    y = np.arange(len(names))[::-1]
    for k, (m, label) in enumerate(_RATES):
        err = np.vstack([table[m] - table[f"{m}_lo"], table[f"{m}_hi"] - table[m]])
        left.errorbar(table[m], y + (0.15 if k == 0 else -0.15), xerr=err, fmt="o" if k == 0 else "s", capsize=2,
                      color="0.2" if k == 0 else "0.6", label=label)
    left.set(yticks=y, yticklabels=[method_label(n) for n in names], xlabel="test set (%)", xlim=(-2, 102))
    left.set_title("rates, mean [95 % interval]", fontsize=11)
    pos = {n: yy for n, yy in zip(names, y)}
    for k, (m, label) in enumerate(_RATES):
        yy = np.array([pos[b] for b in diffs["baseline"]]) + (0.15 if k == 0 else -0.15)
        err = np.vstack([diffs[m] - diffs[f"{m}_lo"], diffs[f"{m}_hi"] - diffs[m]])
        right.errorbar(diffs[m], yy, xerr=err, fmt="o" if k == 0 else "s", capsize=2,
                       color="0.2" if k == 0 else "0.6")
    right.axvline(0, color=METHOD_COLORS.get(method, "C0"), lw=1)
    right.set(xlabel=f"{method_label(method)} minus the row (pp)")
    right.set_title("paired by seed, [95 % interval]", fontsize=11)
    legend_below(fig, [left], ncol=2)
    return fig


def _short_point(point: str) -> str:
    """A grid point as a legend entry: ``lr=0.000333,selector_coef=0.2`` -> ``lr 3.3e-04, λ 0.2``; a bare value as it is."""
    names = {"lr": "lr", "selector_coef": "λ"}
    parts = [p.split("=", 1) for p in point.split(",")]
    if len(parts) == 1 and len(parts[0]) == 1:
        return f"{float(point):.2g}"
    return ", ".join(f"{names.get(k, k)} {float(v):.2g}" for k, v in parts)


def validation_curves_figure(curves: pd.DataFrame, measure: str = "success") -> plt.Figure:
    """Validation ``measure`` by step per method: the chosen value solid, the others dashed (mean over the
    seeds in ``curves``: pass the search seeds only, so every value averages the same seeds)."""
    from skillgate_lib import methods as methods_lib

    methods = methods_lib.in_order(curves["method"].unique())
    cols = 2  # two panels a row: room for a legend a reader can read under each
    rows = int(np.ceil(len(methods) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(WIDTH, 4.4 * rows + 0.8), sharex=True, sharey=True,
                             layout="constrained", squeeze=False)
    for ax, m in zip(axes.flat, methods):
        sub = curves[curves["method"] == m]
        for point, part in sub.groupby("point", sort=False):
            chosen = bool(part["chosen"].iloc[0])
            mean = part.groupby("step")[measure].mean()
            ax.plot(mean.index, mean.values, ls="-" if chosen else "--", marker="o", ms=2.5,
                    color=METHOD_COLORS.get(m), alpha=1.0 if chosen else 0.5, lw=2.0 if chosen else 1.0,
                    label=_short_point(point) + (" (chosen)" if chosen else ""))
        ax.set_title(textwrap.fill(method_label(m), 40), fontsize=10)
        # one column, never wider than the panel (a wider legend collapses the panel under constrained layout)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=1, frameon=False,
                  handlelength=1.5)
        ax.yaxis.set_major_formatter(PercentFormatter(xmax=1, decimals=None))
    top = curves.groupby(["method", "point", "step"])[measure].mean().max()
    axes.flat[0].set_ylim(0, 1.15 * top + 0.005)  # shared by every panel
    for ax in axes.flat[len(methods):]:
        ax.remove()
    fig.supxlabel("GRPO step (legend: the setting of each line)")
    fig.supylabel(f"validation {measure.replace('_', '-')}")
    fig.suptitle("Validation curves of the search (mean over the search seeds; solid: the setting chosen)", fontsize=11)
    return fig


def dose_response_figure(dose: pd.DataFrame, x: str = "audit_signal", xlabel: str | None = None) -> plt.Figure:
    """SkillGate minus outcome-only (test set, paired seeds, 95 % interval) against a regime's audited starvation.

    ``x`` default: outcome-only's audited selector signal (Value x Share, in percent points x
    percent / 100), drawn on an inverted axis so that right is more starved."""
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH, 3.8), layout="constrained", sharex=True)
    for ax, (m, label) in zip(axes, _RATES[::-1]):
        err = np.vstack([dose[f"{m}_diff"] - dose[f"{m}_lo"], dose[f"{m}_hi"] - dose[f"{m}_diff"]])
        xs = dose[x] * (100 if x == "audit_signal" else 1)
        ax.errorbar(xs, dose[f"{m}_diff"], yerr=err, fmt="o", capsize=3, color=METHOD_COLORS.get("skillgate"))
        for xi, yi, r in zip(xs, dose[f"{m}_diff"], dose["regime"]):
            ax.annotate(r, (xi, yi), xytext=(6, 4), textcoords="offset points", fontsize=9, color="0.3")
        ax.axhline(0, color="0.4", lw=0.8)
        ax.set(ylabel=f"$\\Delta$ test {label} (pp)")
        ax.set_title(f"SkillGate $-$ outcome-only: {label}", fontsize=11)
    if x == "audit_signal":
        axes[0].invert_xaxis()  # shared x: inverts both
    fig.supxlabel(xlabel or "outcome-only's selector signal, audited Value x median Share (x 100)\n"
                  "(each regime's own outcome-only training logs; right = more starved)", fontsize=9)
    return fig
