"""The audit's figures: Share, Sign, Value and read behaviour by horizon, with the theory overlay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from skillgate_lib.audit.measures import AuditResult


def figures(result: AuditResult) -> dict[str, tuple[Any, pd.DataFrame]]:
    """``{stable name: (figure, the data drawn)}`` for ``audit_share/sign/value/reads`` and ``audit_summary``."""
    import matplotlib.pyplot as plt

    from skillgate_lib.plots import METHOD_COLORS

    b, cv = result.bins, result.curves
    xlabel = "horizon H (steps)" if result.horizon_kind == "steps" else "horizon (response tokens)"

    def below(ax, *axes):  # one legend under the panel, outside the data
        handles, labels = [], []
        for a in (ax, *axes):
            h, lab = a.get_legend_handles_labels()
            handles, labels = handles + h, labels + lab
        # one column: a legend wider than its panel makes constrained layout shrink the panel to nothing
        # (after a savefig at another dpi, the figure shown inline was squashed)
        ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=1, fontsize="small")

    def share(ax):
        ax.errorbar(b["h_mean"], 100 * b["share_median"], yerr=[100 * (b["share_median"] - b["share_q25"]),
                    100 * (b["share_q75"] - b["share_median"])], fmt="o", capsize=3, label="audited median (IQR)")
        if not cv.empty:
            ax.plot(cv["horizon"], 100 * cv["share"], color=METHOD_COLORS["theory"], ls="--", label="theory $k/L(H)$")
        title = f"Share (dilution {result.dilution:.1f}x)"
        if result.n_grad:
            ax.errorbar(b["h_mean"], 100 * b["gshare_median"], yerr=[100 * (b["gshare_median"] - b["gshare_q25"]),
                        100 * (b["gshare_q75"] - b["gshare_median"])], fmt="s", capsize=3,
                        label="Gradient Share, median (IQR)")
            ax.set_yscale("log")
            title += f", Gradient Share ({result.grad_dilution:.1f}x)"
        ax.set(xlabel=xlabel, ylabel="selector share (%)" if result.n_grad else "selector share of loss weight (%)",
               title=title)
        below(ax)

    def sign(ax):
        for col, lab in (("sign_wrong", r"wrong-signed | $A \neq 0$"), ("sign_negative", "$A < 0$"),
                         ("sign_zero", "$A = 0$")):
            ax.plot(b["h_mean"], b[col], "o-", label=lab)
        if not cv.empty:
            ax.plot(cv["horizon"], cv["sign_error"], color=METHOD_COLORS["theory"], ls="--", label="theory sign error")
        ax.set(xlabel=xlabel, ylabel="fraction of read actions", title="Sign", ylim=(0, 1))
        below(ax)

    def value(ax):
        ax.errorbar(b["h_mean"], 100 * b["value"], yerr=[100 * (b["value"] - b["value_lo"]),
                    100 * (b["value_hi"] - b["value"])], fmt="o", capsize=3, label="audited (95% bootstrap CI)")
        if not cv.empty:
            ax.plot(cv["horizon"], 100 * cv["value"], color=METHOD_COLORS["theory"], ls="--",
                    label=r"theory $q^H - s_{wrong}$")
        ax.axhline(0, color="0.5", lw=0.8)
        ov = result.overall
        title = (f"Value {100 * ov['value']:+.1f} pp [{100 * ov['value_lo']:+.1f}, {100 * ov['value_hi']:+.1f}]"
                 if result.categorised else "Value (needs skill categories: --tasks)")
        ax.set(xlabel=xlabel, ylabel="success: oracle read − other (pp)", title=title)
        below(ax)

    def reads(ax):
        ax.plot(b["h_mean"], b["oracle_read"], "o-", label="oracle read")
        ax.plot(b["h_mean"], b["misleading_read"], "o-", label="misleading read")
        ax.plot(b["h_mean"], b["success"], "o-", label="success")
        if not cv.empty:
            ax.plot(cv["horizon"], cv["success"], color=METHOD_COLORS["theory"], ls="--", label="theory success")
        ax2 = ax.twinx()
        ax2.plot(b["h_mean"], b["reads_per_trial"], "s--", color="0.4", label="reads / trial")
        ax2.set_ylabel("reads per trial")
        ax2.set_ylim(0, 1.2 * max(1.0, float(b["reads_per_trial"].max())))
        ax2.grid(False)
        ax2.spines["right"].set_visible(True)
        ax.set(xlabel=xlabel, ylabel="fraction of trials", title="Read behaviour", ylim=(0, 1))
        below(ax, ax2)

    table = result.summary_table()
    out = {}
    for name, draw in (("audit_share", share), ("audit_sign", sign), ("audit_value", value), ("audit_reads", reads)):
        fig, ax = plt.subplots(figsize=(5, 4.2), layout="constrained")
        draw(ax)
        out[name] = (fig, table)
    fig, axes = plt.subplots(2, 2, figsize=(8, 8.6), layout="constrained")  # reads at a notebook's width
    for ax, draw in zip(axes.flat, (share, sign, value, reads)):
        draw(ax)
    fig.suptitle(f"Selector credit audit: {Path(result.source).name} ({result.n_rows:,} trajectories)")
    out["audit_summary"] = (fig, table)
    return out


def shares_figure(results: dict[str, AuditResult]) -> tuple[Any, pd.DataFrame]:
    """Share (loss weight) and Gradient Share by horizon for several audited runs, side by side (log scale).

    Runs without gradient weights appear in the Share panel only. Returns ``(figure, the data drawn)``.
    """
    import matplotlib.pyplot as plt

    rows = [b.assign(run=name)[["run", "h_mean", "share_median", "gshare_median"]]
            for name, r in results.items() for b in (r.bins,)]
    data = pd.concat(rows, ignore_index=True)
    fig, axes = plt.subplots(1, 2, figsize=(9, 4), layout="constrained", sharey=True)
    styles = [("o", "-"), ("s", "--"), ("^", ":"), ("D", "-."), ("v", (0, (5, 1)))]  # runs of one format share a Share
    for (name, r), (marker, dash) in zip(results.items(), styles * len(results)):
        line, = axes[0].plot(r.bins["h_mean"], 100 * r.bins["share_median"], marker=marker, ls=dash, label=name)
        if r.n_grad:
            axes[1].plot(r.bins["h_mean"], 100 * r.bins["gshare_median"], marker=marker, ls=dash, color=line.get_color(),
                         label=name)
    axes[0].set(title="Share: the name's share of the loss weight", xlabel="horizon H (steps)",
                ylabel="median over rollouts (%)", yscale="log")
    axes[1].set(title="Gradient Share: its share of the logit-gradient norms", xlabel="horizon H (steps)", yscale="log")
    axes[0].legend(fontsize="small")
    return fig, data
