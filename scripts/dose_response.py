"""SkillGate's gain against the starvation the audit measures, across regimes (a pilot, not the powered study).

For each regime, the runs of ``scripts/starvation_diagnosis.py --conditions outcome skillgate
skillgate_nofilter`` (``build/runs/dose/<regime>``) give the paired difference in final held-out
oracle-read and success, SkillGate minus outcome-only on the same seeds, with a bootstrap 95 %
interval over seeds; the regime's starvation is what the probe of the warm start measured
(``python -m skillgate_lib probe --regime R``: Value and the wrong-signed fraction of read
advantages, ``build/probes/<name>.json``). Writes ``figures/figS_dose_pilot.{png,pdf,csv}`` (figure 5 is the powered study's, drawn by notebook 04)
and prints the table::

    python scripts/dose_response.py --runs build/runs/dose --probes easy=build/probes/easy.json \\
        noisy=build/probes/noisy.json paper=build/probes/f0.15_a0.3.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from skillgate_lib import plots
from skillgate_lib.audit import bootstrap_mean

ARMS = {"skillgate": "SkillGate (reference: lambda 0.2, filter)", "skillgate_nofilter": "SkillGate without the filter"}


def final(run_dir: Path) -> dict:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in rows if r["split"] == "eval"][-1]
    seed = json.loads((run_dir / "config.json").read_text())["seed"]
    return {"seed": seed, "oracle_read": last["eval/oracle_read"], "success": last["eval/success"]}


def paired(runs: Path, regime: str, arm: str, rng: np.random.Generator, n_boot: int = 10_000) -> dict:
    def table(cond):
        return pd.DataFrame([final(d) for d in sorted((runs / regime / cond).iterdir()) if (d / "adapter").exists()]
                            ).set_index("seed")

    base, other = table("outcome"), table(arm)
    seeds = base.index.intersection(other.index)
    out = {"regime": regime, "arm": arm, "seeds": len(seeds)}
    for m in ("oracle_read", "success"):
        d = (other.loc[seeds, m] - base.loc[seeds, m]).to_numpy(float)
        mean, lo, hi = bootstrap_mean(d, np.ones(len(d)), n_boot, rng)
        out |= {f"{m}_diff": mean, f"{m}_lo": lo, f"{m}_hi": hi,
                f"{m}_outcome": base.loc[seeds, m].mean(), f"{m}_arm": other.loc[seeds, m].mean()}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=Path, default=Path("build/runs/dose"))
    p.add_argument("--probes", nargs="+", required=True, help="REGIME=PROBE_JSON, in the order to plot")
    p.add_argument("--out", type=Path, default=None, help="figure directory (default: figures/)")
    a = p.parse_args()
    rng = np.random.default_rng(0)
    probes = dict(x.split("=", 1) for x in a.probes)
    rows = []
    for regime, probe in probes.items():
        audit = json.loads(Path(probe).read_text())
        for arm in ARMS:
            rows.append({**paired(a.runs, regime, arm, rng), "probe_value": audit["value"],
                         "probe_sign_wrong_short": audit["sign_wrong_short"],
                         "probe_success": audit["success"]})
    df = pd.DataFrame(rows)
    plots.set_style()
    fig, axes = plt.subplots(1, 2, figsize=(plots.WIDTH, 4.0), layout="constrained", sharex=True)
    for ax, m, label in zip(axes, ("oracle_read", "success"), ("oracle-read", "success")):
        for k, (arm, name) in enumerate(ARMS.items()):
            sub = df[df["arm"] == arm]
            x = 100 * sub["probe_value"].to_numpy() + (k - 0.5) * 0.8
            y = 100 * sub[f"{m}_diff"].to_numpy()
            err = 100 * np.vstack([sub[f"{m}_diff"] - sub[f"{m}_lo"], sub[f"{m}_hi"] - sub[f"{m}_diff"]])
            ax.errorbar(x, y, yerr=err, fmt="o-", capsize=3, label=name,
                        color=plots.METHOD_COLORS["skillgate"] if arm == "skillgate" else "#9ecae1")
            if k == 0:
                for xi, r in zip(x, sub["regime"]):
                    ax.annotate(r, (xi, 1), xycoords=("data", "axes fraction"), xytext=(0, -12),
                                textcoords="offset points", ha="center", fontsize=9, color="0.3")
        ax.axhline(0, color="0.4", lw=0.8)
        ax.set_xlabel("audited Value of the oracle read (pp)\n(warm start, outcome-only; right = more starved)",
                      fontsize=9)
        ax.set_ylabel(f"$\\Delta$ held-out {label} (pp)")
        ax.set_title(f"SkillGate $-$ outcome-only: {label}", fontsize=11)
    axes[0].invert_xaxis()  # shared x: once inverts both; left to right = more starved
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=2, frameon=False)
    fig.suptitle("Gain over outcome-only GRPO by regime (8 paired seeds, 95 % bootstrap interval)", fontsize=12)
    plots.savefig("figS_dose_pilot", fig, data=df, out_dir=a.out)
    cols = ["regime", "arm", "seeds", "probe_value", "oracle_read_outcome", "oracle_read_arm", "oracle_read_diff",
            "oracle_read_lo", "oracle_read_hi", "success_outcome", "success_arm", "success_diff", "success_lo",
            "success_hi"]
    print((df[cols].set_index(["regime", "arm"]) * 1).round(3).to_markdown())


if __name__ == "__main__":
    main()
