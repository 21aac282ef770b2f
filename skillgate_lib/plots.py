"""One figure style, one ``savefig``, and the kit's figures.

Every figure is written as ``figures/<name>.png`` and ``figures/<name>.pdf`` under a
stable name; pass ``data=`` to also write ``figures/<name>.csv``, the numbers the
figure was drawn from (tests compare those against a regeneration).

Figures are sized to read at a notebook's width (about 900 px, 8 inches at the style's
110 dpi): legends shared and outside the axes, every axis labelled, methods named and
coloured by the registry (:mod:`skillgate_lib.methods`). A function here returns its
figure and never shows it; a notebook shows each figure once, at the end of its cell.
"""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.colors import Normalize, TwoSlopeNorm
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter, PercentFormatter

from skillgate_lib import methods, paths

#: Colours by method (read from :data:`skillgate_lib.methods.METHODS`, so a method looks the same
#: everywhere), plus the theory's curves.
METHOD_COLORS = methods.colors(theory="#2ca02c")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def set_style() -> None:
    """Apply the kit's one plotting style (idempotent)."""
    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind")
    plt.rcParams.update(
        {
            "figure.dpi": 110,
            "savefig.dpi": 150,
            "savefig.bbox": "tight",
            "axes.spines.top": False,
            "axes.spines.right": False,
            "legend.frameon": False,
            "pdf.fonttype": 42,
        }
    )


def savefig(
    name: str,
    fig: plt.Figure | None = None,
    data: pd.DataFrame | None = None,
    out_dir: str | Path | None = None,
) -> dict[str, Path]:
    """Write ``<name>.png`` and ``<name>.pdf`` (and ``<name>.csv`` if ``data``) to ``figures/``.

    ``name`` is a stable identifier such as ``"fig1_teaser"``; it must not carry a
    suffix or a directory. Returns the written paths by suffix.
    """
    if not _NAME.match(name) or name.endswith((".png", ".pdf", ".csv")):
        raise ValueError(f"figure name must be a bare identifier like 'fig1_teaser', got {name!r}")
    fig = fig if fig is not None else plt.gcf()
    out = Path(out_dir) if out_dir is not None else paths.FIGURES_DIR
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for suffix in ("png", "pdf"):
        path = out / f"{name}.{suffix}"
        metadata = {"CreationDate": None} if suffix == "pdf" else {"Software": None}
        fig.savefig(path, metadata=metadata)
        written[suffix] = path
    if data is not None:
        path = out / f"{name}.csv"
        data.to_csv(path, index=False, float_format="%.6g")
        written["csv"] = path
    return written


set_style()



#: Width of every figure in inches: about 900 px in a notebook at the style's 110 dpi.
WIDTH = 8.0


def legend_below(fig: plt.Figure, axes, ncol: int = 4) -> None:
    """One legend for all ``axes`` (each label once), centred under them, outside the data."""
    handles, labels = {}, []
    for ax in np.atleast_1d(axes).flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in handles:
                handles[lab] = h
                labels.append(lab)
    fig.legend([handles[lab] for lab in labels], labels, loc="outside lower center", ncol=min(ncol, len(labels)))


def _fraction_axis(ax: plt.Axes) -> None:
    """A 0-100 % axis for a rate stored as a fraction."""
    ax.set_ylim(-0.03, 1.03)
    ax.yaxis.set_major_formatter(PercentFormatter(xmax=1, decimals=0))


# ---------------------------------------------------------------------------- the theory (notebook 01)

#: Theory series -> (legend label, colour, marker).
THEORY_SERIES = {
    "outcome": ("broadcast GRPO", METHOD_COLORS["outcome"], "o"),
    "outcome_std": ("broadcast GRPO, std-normalised (Monte Carlo only)", METHOD_COLORS["outcome"], "^"),
    "skillgate": ("SkillGate", METHOD_COLORS["skillgate"], "s"),
    "environment": ("either method (a property of the task)", METHOD_COLORS["theory"], "o"),
}

#: Theory figures: name -> (quantity, {series: column of closed_forms / simulate}, y label, log scale, title).
THEORY_FIGURES = {
    "theory_share": ("share", {"outcome": "share", "skillgate": "share_skillgate"},
                     "selector share of the loss weight", True,
                     "Share: the selector tokens' part of the loss weight"),
    "theory_zero_credit": ("zero_credit", {"outcome": "zero_credit", "skillgate": "zero_credit_skillgate"},
                           r"P($A_i = 0$ | oracle read)", True, "Zero credit: an oracle read gets no gradient"),
    "theory_sign_error": ("sign_error", {"outcome": "sign_error", "skillgate": "sign_error_skillgate"},
                          r"P(wrong sign | $A_i \neq 0$)", False, "Sign: reads credited with the wrong sign"),
    "theory_value": ("value", {"environment": "value"}, r"$q^H - s_{wrong}$", False,
                     "Value: success after an oracle read minus after another"),
    "theory_selector_signal": ("selector_signal",
                               {"outcome": "selector_signal", "outcome_std": "selector_signal_std",
                                "skillgate": "selector_signal_skillgate"},
                               "advantage gap × share", True, "Selector signal: how hard the choice is pushed"),
}


def theory_data(theory: pd.DataFrame, sim: pd.DataFrame, name: str) -> pd.DataFrame:
    """The long table behind theory figure ``name``: per horizon and series, the closed form
    (NaN where there is none), the Monte Carlo estimate and its standard error.

    ``theory`` is :func:`skillgate_lib.theory.closed_forms`, ``sim`` :func:`skillgate_lib.theory.simulate`.
    """
    quantity, columns, *_ = THEORY_FIGURES[name]
    return pd.concat(
        [pd.DataFrame({"horizon": sim["horizon"], "quantity": quantity, "method": series,
                       "closed_form": theory[col] if col in theory else np.nan,
                       "monte_carlo": sim[col], "monte_carlo_se": sim[f"{col}_se"]})
         for series, col in columns.items()],
        ignore_index=True,
    )


def _one_two_five(ax: plt.Axes, values: np.ndarray, percent: bool) -> None:
    """Log axis from the 1-2-5 tick below the data to the one above it, every tick labelled
    (decades only when the data span more than two)."""
    lo, hi = float(values.min()), float(values.max())
    subs = (1, 2, 5) if hi / lo < 200 else (1,)
    ticks = np.array([m * 10.0 ** e for e in range(-8, 3) for m in subs])
    ax.set_ylim(ticks[ticks <= lo / 1.25].max(), ticks[ticks >= hi * 1.05].min())  # room for the error bars below
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{100 * v:g} %" if percent else f"{v:g}"))


def theory_panel(ax: plt.Axes, data: pd.DataFrame, name: str, short_title: bool = False) -> None:
    """Draw :func:`theory_data` on ``ax``: closed forms as lines, Monte Carlo as open markers with
    ±4 SE bars; a series whose closed form does not change with H is labelled with its value.
    ``short_title``: the quantity's name only (for a panel of a grid)."""
    _, _, ylabel, logy, heading = THEORY_FIGURES[name]
    percent = data["quantity"].iloc[0] == "share"
    for series, d in data.groupby("method", sort=False):
        label, color, marker = THEORY_SERIES[series]
        closed = d["closed_form"].to_numpy(float)
        if np.isfinite(closed).all():
            ax.plot(d["horizon"], closed, color=color, label=label)
            label = None
            if np.ptp(closed) == 0 and closed[0] > 0:
                ax.annotate(f"{100 * closed[0]:.1f} %" if percent else f"{closed[0]:.3g}",
                            (d["horizon"].iloc[len(d) // 2], closed[0]), textcoords="offset points", xytext=(0, 6),
                            ha="center", color=color, fontsize="small")
        ax.errorbar(d["horizon"], d["monte_carlo"], yerr=4 * d["monte_carlo_se"], fmt=marker, ms=5, mfc="none",
                    color=color, label=label)
    ax.set(xlabel="horizon $H$ (execution steps)", ylabel=ylabel)
    ax.set_title(data["quantity"].iloc[0].replace("_", " ").capitalize() if short_title else heading,
                 fontsize="medium")
    if logy:
        ax.set_yscale("log")
        positive = data[["closed_form", "monte_carlo"]].to_numpy(float).ravel()
        _one_two_five(ax, positive[np.isfinite(positive) & (positive > 0)], percent)
    elif percent:
        ax.yaxis.set_major_formatter(PercentFormatter(xmax=1))


def _theory_key(ax: plt.Axes) -> None:
    """Legend entries for the drawing convention: line = closed form, open marker = Monte Carlo."""
    ax.plot([], [], color="0.3", label="closed form")
    ax.errorbar([], [], yerr=[], fmt="o", mfc="none", color="0.3", label=r"Monte Carlo, $\pm 4$ SE")


def theory_figure(theory: pd.DataFrame, sim: pd.DataFrame, name: str) -> tuple[plt.Figure, pd.DataFrame]:
    """One theory figure and the data it draws (see :data:`THEORY_FIGURES`)."""
    data = theory_data(theory, sim, name)
    fig, ax = plt.subplots(figsize=(WIDTH * 0.75, 4.0), layout="constrained")
    theory_panel(ax, data, name)
    _theory_key(ax)
    legend_below(fig, ax, ncol=2)
    return fig, data


def theory_summary(panels: dict[str, pd.DataFrame]) -> plt.Figure:
    """Four theory panels (``{figure name: theory_data}``) in a 2 x 2 grid with one legend."""
    fig, axes = plt.subplots(2, 2, figsize=(WIDTH, 7.0), layout="constrained")
    for ax, (name, data) in zip(axes.flat, panels.items()):
        theory_panel(ax, data, name, short_title=True)
    _theory_key(axes.flat[0])
    fig.suptitle("Selector credit starvation in closed form and simulation")
    legend_below(fig, axes, ncol=3)
    return fig


# ---------------------------------------------------------------------------- a comparison's runs (03, 04)

#: Evaluation measures of a run's metrics: column -> y label (rates are fractions).
EVAL_MEASURES = {
    "eval/success": "held-out success",
    "eval/oracle_read": "oracle-read rate",
    "eval/misleading_read": "misleading-read rate",
    "eval/reads": "reads per trial",
}


#: Line dashes and markers by a method's position in a figure, so that coinciding lines stay apart.
_DASHES = ("-", "--", "-.", ":")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def learning_curves_figure(curves: pd.DataFrame, measures=tuple(EVAL_MEASURES)) -> plt.Figure:
    """One panel per measure, two per row: mean over seeds by GRPO step for each method, the seed
    range shaded, one legend under the panels.

    ``curves`` has columns method, seed, step and the measures (``results.learning_curves``).
    """
    rows = int(np.ceil(len(measures) / 2))
    order = {m: i for i, m in enumerate(methods.METHODS)}
    fig, axes = plt.subplots(rows, 2, figsize=(WIDTH, 3.0 * rows + 0.9), sharex=True, layout="constrained",
                             squeeze=False)
    shown = sorted(curves["method"].unique(), key=lambda m: order.get(m, len(order)))
    for ax, measure in zip(axes.flat, measures):
        for i, method in enumerate(shown):
            stats = curves[curves["method"] == method].groupby("step")[measure].agg(["mean", "min", "max"])
            color = METHOD_COLORS.get(method)
            # clip_on=False: a method that stays at 0 (skill-free RL reads nothing) stays visible on the axis;
            # each method its own dash and marker, so that two methods on the same values both show
            ax.plot(stats.index, stats["mean"], marker=_MARKERS[i % len(_MARKERS)], ms=4, mfc="none",
                    ls=_DASHES[i % len(_DASHES)], label=methods.label(method), color=color, clip_on=False, zorder=3)
            ax.fill_between(stats.index, stats["min"], stats["max"], alpha=0.15, color=color, lw=0)
        ax.set(ylabel=EVAL_MEASURES.get(measure, measure))
        if measure == "eval/reads":
            ax.set_ylim(bottom=0)
        else:
            _fraction_axis(ax)
    for ax in axes[-1]:
        ax.set_xlabel("GRPO step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers, also in a 2-step run
    for ax in axes.flat[len(measures):]:
        ax.remove()
    fig.suptitle("Held-out evaluation during GRPO (mean over seeds; band: seed range)")
    legend_below(fig, axes.flat[: len(measures)], ncol=4)
    return fig


def by_horizon_figure(df: pd.DataFrame) -> plt.Figure:
    """One panel per measure of ``comparison.by_horizon``: mean ± seed sd by horizon for every method,
    methods shifted slightly along H so their bars do not overlap; one legend under the panels."""
    measures = sorted(dict.fromkeys(df["measure"]), key=lambda m: m != "success")  # success first
    names = list(dict.fromkeys(df["method"]))
    shift = dict(zip(names, np.linspace(-0.24, 0.24, len(names)))) if len(names) > 1 else {names[0]: 0.0}
    fig, axes = plt.subplots(1, len(measures), figsize=(WIDTH, 4.2), layout="constrained", squeeze=False)
    for ax, measure in zip(axes[0], measures):
        for method, sub in df[df["measure"] == measure].groupby("method", sort=False):
            ax.errorbar(sub["horizon"] + shift[method], sub["mean"], yerr=sub["sd"], marker="o", ms=3.5, lw=1.3,
                        elinewidth=0.8, capsize=0, label=methods.label(method), color=METHOD_COLORS.get(method),
                        clip_on=False, zorder=3)
        ax.set(xlabel="horizon $H$ (execution steps)", ylabel=f"held-out {measure.replace('_', '-')} rate"
               if measure != "success" else "held-out success")
        ax.set_xticks(sorted(df["horizon"].unique()))
        _fraction_axis(ax)
    fig.suptitle("Held-out rates by horizon after GRPO: mean ± sd over seeds")
    legend_below(fig, axes, ncol=4)
    return fig


def token_credit(df: pd.DataFrame, title: str = "", per_line: int = 8) -> plt.Figure:
    """One trajectory's tokens as boxes, one panel per method (``report.channel_tokens``): colour
    is the token's credit (advantage × loss weight; blue pushes the token up, red down, on one
    scale for both panels), grey tokens carry no loss, a black outline marks the skill name."""
    names = list(dict.fromkeys(df["method"]))
    lines = int(np.ceil((int(df["position"].max()) + 1) / per_line))
    fig, axes = plt.subplots(len(names) + 1, 1, figsize=(WIDTH, 0.36 * lines * len(names) + 2.2), layout="constrained",
                             height_ratios=[lines] * len(names) + [0.55])
    vmax = max(1e-9, float(df.loc[df["weight"] != 0, "signal"].abs().max()))
    norm, cmap = TwoSlopeNorm(0.0, -vmax, vmax), plt.get_cmap("RdBu")
    for ax, method in zip(axes, names):
        for _, r in df[df["method"] == method].iterrows():
            x, y = r["position"] % per_line, -(r["position"] // per_line)
            shade = norm(r["signal"])
            color = "#e6e6e6" if r["weight"] == 0 else cmap(shade)
            ax.add_patch(Rectangle((x + 0.02, y - 0.9), 0.96, 0.82, facecolor=color,
                                   edgecolor="black" if r["role"] == "selector" else "none",
                                   linewidth=2.2 if r["role"] == "selector" else 0))
            label = r["token"] if len(r["token"]) <= 10 else r["token"][:9] + "…"
            dark = r["weight"] != 0 and abs(shade - 0.5) > 0.3  # white text on the deep colours
            ax.text(x + 0.5, y - 0.49, label, ha="center", va="center", fontsize=9, color="white" if dark else "black")
        ax.set(xlim=(0, per_line), ylim=(-lines, 0.02))
        ax.set_title(methods.label(method), loc="left", fontsize="medium")
        ax.axis("off")
    bar = fig.colorbar(plt.cm.ScalarMappable(Normalize(-vmax, vmax), cmap), cax=axes[-1], orientation="horizontal")
    bar.set_ticks([-vmax, 0, vmax], labels=["pushed down", "0", "pushed up"])
    bar.set_label("credit of the token: advantage × loss weight (one scale for both panels)")
    keys = [Patch(facecolor="#e6e6e6", label="no loss (text the environment inserted; SkillGate: the read tags)"),
            Patch(facecolor="white", edgecolor="black", linewidth=2.2, label="skill name (selector tokens)")]
    axes[0].legend(handles=keys, loc="lower left", bbox_to_anchor=(0, 1.12), ncol=2, fontsize="small", handlelength=1.2)
    if title:
        fig.suptitle(title)
    return fig
