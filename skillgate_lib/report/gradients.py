"""The generated tables and lines about what the update sees: Gradient Share of the committed audit runs,
the gradient proxy check, the regime probes, and the README verdict's line on the note regime.

Every number is read from committed files under ``data/runs/`` (:mod:`skillgate_lib.report.docs` renders
the blocks into the README and ``docs/results.md``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from skillgate_lib.report.markdown import interval_pp, markdown_table

#: The committed outcome-only audit runs (``data/runs/audit/<regime>-outcome``), in the order the record reads them.
AUDIT_RUNS = ("paper_note8", "paper_echo_f30", "paper_echo", "paper", "easy")


def gradient_share_table(data_dir: Path) -> str:
    """One row per committed audit run: Share and Gradient Share (medians) at the shortest and longest horizon with
    their dilutions, the wrong-signed fraction at both ends, Value with its bootstrap interval."""
    from skillgate_lib.audit import run_audit, side_by_side

    results = {r: run_audit(data_dir / "runs" / "audit" / f"{r}-outcome", split="train", n_boot=1000, seed=0)
               for r in AUDIT_RUNS if (data_dir / "runs" / "audit" / f"{r}-outcome").is_dir()}
    t = side_by_side(results)

    def pct(v: float, digits: int = 2) -> str:
        return "–" if pd.isna(v) else f"{100 * v:.{digits}f} %"

    rows = [[f"`{name}`", f"{int(r['trajectories']):,}", f"{pct(r['share_short'])} -> {pct(r['share_long'])}",
             f"{r['dilution']:.1f}x", f"{pct(r['gshare_short'])} -> {pct(r['gshare_long'])}",
             "–" if pd.isna(r["grad_dilution"]) else f"{r['grad_dilution']:.1f}x",
             f"{pct(r['sign_wrong_short'], 1)} -> {pct(r['sign_wrong_long'], 1)}",
             interval_pp(100 * r["value"], 100 * r["value_lo"], 100 * r["value_hi"])] for name, r in t.iterrows()]
    return markdown_table(["audit run (`<regime>-outcome`)", "rollouts", "Share, H = 1 -> 8", "dilution",
                      "Gradient Share, H = 1 -> 8", "dilution", "wrong-signed reads, H = 1 -> 8", "Value pp [95 % CI]"],
                     rows, "lrrrrrrr")


def gradient_proxy_table(data_dir: Path) -> str:
    """``scripts/gradient_proxy_check.py``'s summary: the logit proxy against the LoRA parameters' own gradients."""
    s = pd.read_csv(data_dir / "runs" / "diagnosis" / "gradient_proxy" / "summary.csv")
    rows = [[f"`{r['model']}` in `{r['regime']}`", f"{int(r['rollouts'])} / {int(r['tokens']):,}", f"{r['rank_corr']:.2f}",
             f"{r['name_mean_g']:.2f} / {r['other_mean_g']:.3f}",
             *(f"{100 * r[c]:.1f} %" for c in ("median_share_loss", "median_share_proxy", "median_share_pnorm",
                                                 "median_share_summed"))]
            for _, r in s.iterrows()]
    return markdown_table(["warm start, regime", "rollouts / tokens", "rank corr. g vs parameter-gradient norm",
                      "mean g: name / other", "name's share: loss weight", "logit proxy (Gradient Share)",
                      "sum of per-token parameter-gradient norms", "norm of the summed parameter gradient"],
                     rows, "lrrrrrrr")


def probes_table(data_dir: Path) -> str:
    """The committed probe summaries (``data/runs/diagnosis/probes/*.json``, written by ``probe --json``)."""
    rows = []
    for path in sorted((data_dir / "runs" / "diagnosis" / "probes").glob("*.json")):
        r = json.loads(path.read_text())
        knobs = (f"failure {r['step_failure']:g}, agreement {r['lookalike_agreement']:g}, note {r['step_note']}, "
                 f"echo {r['step_echo']}, H {min(r['horizons'])}-{max(r['horizons'])}")
        rows.append([f"`{path.stem}`", f"`{r['model']}`", knobs, f"{100 * r['success']:.1f} %", f"{100 * r['oracle_read']:.1f} %",
                     f"{100 * r['share_median_short']:.2f} % -> {100 * r['share_median_long']:.2f} % ({r['dilution']:.1f}x)",
                     f"{100 * r['gshare_median_short']:.2f} % -> {100 * r['gshare_median_long']:.2f} % ({r['grad_dilution']:.1f}x)",
                     f"{100 * r['sign_wrong_short']:.1f} % -> {100 * r['sign_wrong_long']:.1f} %",
                     interval_pp(100 * r["value"], 100 * r["value_lo"], 100 * r["value_hi"])])
    return markdown_table(["probe", "warm start", "knobs", "success", "oracle-read", "Share, shortest -> longest H",
                      "Gradient Share, shortest -> longest H", "wrong-signed reads", "Value pp [95 % CI]"], rows, "lllrrrrrr")
