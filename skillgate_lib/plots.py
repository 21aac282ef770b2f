"""One figure style and one ``savefig`` for every notebook.

Every figure is written as ``figures/<name>.png`` and ``figures/<name>.pdf`` under a
stable name; pass ``data=`` to also write ``figures/<name>.csv``, the numbers the
figure was drawn from (tests compare those against a regeneration).
"""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

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


def learning_curves(curves: pd.DataFrame, measures=("eval/success", "eval/oracle_read", "eval/misleading_read"),
                    titles=("held-out success", "oracle-read rate", "misleading-read rate")) -> plt.Figure:
    """One panel per measure: mean over seeds by step for each method, with the seed range shaded.

    ``curves`` has columns method, seed, step and the measures (see ``train.learning_curves``).
    """
    fig, axes = plt.subplots(1, len(measures), figsize=(4.2 * len(measures), 3.4), sharex=True)
    for ax, measure, title in zip(axes, measures, titles):
        for method, sub in curves.groupby("method", sort=False):
            stats = sub.groupby("step")[measure].agg(["mean", "min", "max"])
            color = METHOD_COLORS.get(method)
            ax.plot(stats.index, stats["mean"], marker="o", ms=3, label=method, color=color)
            ax.fill_between(stats.index, stats["min"], stats["max"], alpha=0.15, color=color)
        ax.set(title=title, xlabel="GRPO step")
        if curves[measure].max() <= 1:  # rates share a 0-1 axis; counts (reads per trial) keep their own
            ax.set_ylim(-0.02, 1.02)
        else:
            ax.set_ylim(bottom=0)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig
