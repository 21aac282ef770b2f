"""Why the selector channel starves at kit scale: SkillGate's construction taken apart, one knob at a time.

Every condition trains the same budget from the committed warm start in one regime, on the
same seeds, and is judged on the same held-out instances. Conditions (``--conditions``):

  outcome              outcome-only GRPO (dynamic sampling + refill, KL 3e-5: the reference protocol)
  outcome_nofilter     the same without dynamic sampling (the control for skillgate_nofilter)
  skillgate            SkillGate as the reference defines it (lambda 0.2, active-read sharing, filter)
  skillgate_nofilter   the same without the all-equal-group filter (and no refill)
  tokenmean            lambda averaged over every name token, no filter (the kit's earlier SkillGate)
  lambda0.5/1/2        SkillGate at lambda 0.5, 1, 2
  selector_only        the selector channel alone (execution weight 0), lambda 1
  selector_only_nofilter  the same without the filter
  selection_bc         the reference's supervised fine-tune of the oracle's read call (no RL)
  opener               SkillGate with each read's opener in the selector channel (skillgate_opener):
                       the read/stop decision, which the reference partition leaves without credit

Usage::

    python scripts/starvation_diagnosis.py --regime paper --seeds 0 1 2 3 --out build/runs/diagnosis
    python scripts/starvation_diagnosis.py --out build/runs/diagnosis --summary   # the table, from the runs
    python scripts/starvation_diagnosis.py --model tiny-lookup --steps 100 --eval-every 25 \
        --conditions outcome skillgate opener --out build/runs/read-stop          # the read/stop drift

Runs resume; the table (mean and 95 % Student-t interval over seeds of the final held-out
success / oracle-read / reads per trial, and the paired difference to outcome) is written to
``OUT/summary.csv`` and printed as Markdown, with every run's final numbers in
``OUT/final_table.csv`` and the mean held-out oracle-read by step in ``OUT/oracle_read_curves.csv``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from skillgate_lib.audit import t_interval
from skillgate_lib.report.study import rate_interval

CONDITIONS: dict[str, tuple[str, dict]] = {
    "outcome": ("outcome", {}),
    "outcome_nofilter": ("outcome", {"filter_groups": False}),
    "skillgate": ("skillgate", {}),
    "skillgate_nofilter": ("skillgate", {"filter_groups": False}),
    "tokenmean": ("skillgate_tokenmean", {"filter_groups": False}),
    "lambda0.5": ("skillgate", {"selector_coef": 0.5}),
    "lambda1": ("skillgate", {"selector_coef": 1.0}),
    "lambda2": ("skillgate", {"selector_coef": 2.0}),
    "selector_only": ("selector_only", {"selector_coef": 1.0}),
    "selector_only_nofilter": ("selector_only", {"selector_coef": 1.0, "filter_groups": False}),
    "selection_bc": ("selection_bc", {}),
    "opener": ("skillgate_opener", {}),
}
MEASURES = ("eval/success", "eval/oracle_read", "eval/misleading_read", "eval/reads", "eval/zero_read", "eval/last_oracle")


def run(out: Path, conditions, seeds, workers: int, **shared) -> None:
    from skillgate_lib.runs.compare import compare

    for name in conditions:
        method, extra = CONDITIONS[name]
        print(f"== {name}: {method} {extra}", flush=True)
        compare(methods=[method], seeds=tuple(seeds), out_dir=out / name, workers=workers, resume=True,
                progress=False, **shared, **extra)


def evaluate_runs_on_test(out: Path, regime: str, n: int, workers: int) -> None:
    """Every finished run's final adapter on ``n`` test instances (``test.json``), apart from the held-out ``eval`` pool."""
    from skillgate_lib.runs.protocol import write_test_records

    runs = sorted(str(p.parent) for p in out.glob("*/*/adapter"))
    write_test_records([(r, regime, n, None, max(1, 2 // workers)) for r in runs], workers, progress=False)


def final_table(out: Path) -> pd.DataFrame:
    """One row per (condition, seed): the final held-out measures and the training-side starvation counts."""
    rows = []
    for cond_dir in sorted(p for p in out.iterdir() if p.is_dir()):
        for run_dir in sorted(cond_dir.iterdir()):
            if not (run_dir / "adapter").exists():
                continue
            lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
            ev = [x for x in lines if x["split"] == "eval"]
            tr = [x for x in lines if x["split"] == "train"]
            cfg = json.loads((run_dir / "config.json").read_text())
            row = {"condition": cond_dir.name, "seed": cfg["seed"], "start_" + "eval/oracle_read": ev[0]["eval/oracle_read"],
                   **{m: ev[-1][m] for m in MEASURES}}
            sampled = sum(x.get("groups/sampled", 0) for x in tr)
            row["kept_frac"] = sum(x.get("groups/kept", 0) for x in tr) / sampled if sampled else float("nan")
            active = sum(x.get("reads/selector_active", 0) for x in tr)
            row["active_reads_filtered_frac"] = (sum(x.get("reads/selector_active_filtered", 0) for x in tr) / active
                                                 if active else float("nan"))
            row["zero_read_frac"] = float(np.mean([x.get("train/zero_read", float("nan")) for x in tr]))
            row["zero_read_last"] = float(np.mean([x.get("train/zero_read", float("nan")) for x in tr[-5:]]))
            row["train_reads_last"] = float(np.mean([x["train/reads"] for x in tr[-5:]])) if tr and "train/reads" in tr[-1] else float("nan")
            if (run_dir / "test.json").exists():
                test = json.loads((run_dir / "test.json").read_text())
                row.update({m.replace("eval/", "test/"): test[m.replace("eval/", "test/")] for m in MEASURES})
            rows.append(row)
    return pd.DataFrame(rows)


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per condition over seeds of ``final_table``: each rate's mean and 95 % BCa interval over seeds (inside
    [0, 100] %), differences paired by seed with a Student-t interval, on the test set when every run has one."""
    pre = "test/" if "test/success" in df.columns and df["test/success"].notna().all() else "eval/"
    base = df[df["condition"] == "outcome"].set_index("seed")
    rows = []
    for cond, sub in df.groupby("condition", sort=False):
        r = {"condition": cond, "seeds": len(sub)}
        for m in ("success", "oracle_read", "reads", "zero_read"):
            if pre + m not in sub.columns:  # a table written before the measure existed
                continue
            x = sub[pre + m].to_numpy(float)
            _, lo, hi = rate_interval(x)  # a rate: its interval stays in [0, 100] %
            r[pre + m] = f"{100 * x.mean():.1f} [{100 * lo:.1f}, {100 * hi:.1f}]" if m != "reads" else f"{x.mean():.2f}"
        r["runs reading < 0.05 a trial"] = int((sub[pre + "reads"] < 0.05).sum())
        for m in ("oracle_read", "success"):
            if cond != "outcome" and len(base):
                paired = (sub.set_index("seed")[pre + m] - base[pre + m]).dropna().to_numpy(float)
                _, lo, hi = t_interval(paired)
                r[f"{m} - outcome (pp)"] = f"{100 * paired.mean():+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]"
        for col, label, digits in (("kept_frac", "kept groups", 0),
                                   ("active_reads_filtered_frac", "active reads in all-equal groups", 0),
                                   ("zero_read_last", "train zero-read, last 5 steps", 1)):
            if col in sub.columns:  # absent from tables written before the count existed
                r[label] = f"{100 * sub[col].mean():.{digits}f} %"
        rows.append(r)
    return pd.DataFrame(rows)


def curves(out: Path, measure: str = "eval/oracle_read") -> pd.DataFrame:
    """Mean ``measure`` over seeds at every evaluation step, one column per condition (how fast each learns)."""
    rows = []
    for run_dir in sorted(out.glob("*/*/metrics.jsonl")):
        for x in map(json.loads, run_dir.read_text().splitlines()):
            if x["split"] == "eval":
                rows.append({"condition": run_dir.parent.parent.name, "step": x["step"], measure: x[measure]})
    return pd.DataFrame(rows).pivot_table(index="step", columns="condition", values=measure, aggfunc="mean")


def train_curves(out: Path, measure: str = "train/zero_read") -> pd.DataFrame:
    """``measure`` of the training rollouts at every step, one row per (condition, seed, step)."""
    rows = []
    for path in sorted(out.glob("*/*/metrics.jsonl")):
        seed = json.loads((path.parent / "config.json").read_text())["seed"]
        for x in map(json.loads, path.read_text().splitlines()):
            if x["split"] == "train" and measure in x:
                rows.append({"condition": path.parent.parent.name, "seed": seed, "step": x["step"], measure: x[measure]})
    return pd.DataFrame(rows)


def read_stop_figure(out: Path, name: str, window: int = 5) -> None:
    """Per condition, each seed's share of training trials that made no read (rolling mean over ``window``
    steps): the read/stop drift, seed by seed, where a mean would hide the one seed that stops reading."""
    import matplotlib.pyplot as plt

    from skillgate_lib.plots import savefig

    df = train_curves(out)
    conds = sorted(dict.fromkeys(df["condition"]), key=lambda c: (list(CONDITIONS).index(c) if c in CONDITIONS else 99, c))
    fig, axes = plt.subplots(1, len(conds), figsize=(3.4 * len(conds), 2.8), sharey=True, squeeze=False)
    for ax, cond in zip(axes[0], conds):
        for seed, sub in df[df["condition"] == cond].groupby("seed"):
            ax.plot(sub["step"], sub["train/zero_read"].rolling(window, min_periods=1).mean(), lw=1.2, label=f"seed {seed}")
        ax.set(title=cond, xlabel="GRPO step", ylim=(-0.03, 1.03))
    axes[0][0].set_ylabel(f"trials with no read\n(rolling mean, {window} steps)")
    axes[0][-1].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    savefig(name, fig, data=df)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("build/runs/diagnosis"))
    p.add_argument("--regime", default="paper")
    p.add_argument("--model", default="tiny", help="the warm start every condition trains from (default: tiny)")
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--conditions", nargs="+", default=list(CONDITIONS), choices=list(CONDITIONS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--prompts-per-step", type=int, default=4)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--eval-tasks", type=int, default=256)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--test-tasks", type=int, default=0,
                   help="also evaluate every final adapter on this many test instances (test.json); the table then "
                        "reports the test set")
    p.add_argument("--summary", action="store_true", help="only print the table from the runs in --out")
    p.add_argument("--read-stop-figure", metavar="NAME",
                   help="also draw each seed's zero-read share of training trials to figures/NAME.png")
    a = p.parse_args()
    if not a.summary:
        run(a.out, a.conditions, a.seeds, a.workers, regime=a.regime, steps=a.steps, prompts_per_step=a.prompts_per_step,
            lr=a.lr, eval_tasks=a.eval_tasks, eval_every=a.eval_every, log_train_every=1, model=a.model)
        if a.test_tasks:
            evaluate_runs_on_test(a.out, a.regime, a.test_tasks, a.workers)
    runs = any(a.out.glob("*/*/adapter"))
    final = final_table(a.out) if runs else pd.read_csv(a.out / "final_table.csv")  # a committed table, no runs
    if runs:
        final.to_csv(a.out / "final_table.csv", index=False)
    if "lr" in final.columns and (a.out / "search.csv").exists():  # an lr search: report each arm at its chosen lr
        chosen = pd.read_csv(a.out / "search.csv").query("chosen")[["condition", "lr"]]
        final = final.merge(chosen, on=["condition", "lr"])
    table = summary(final)
    table.to_csv(a.out / "summary.csv", index=False)
    print(table.to_markdown(index=False))
    if not runs:  # the curves and the figure need the runs themselves
        return
    oracle = curves(a.out)
    oracle.to_csv(a.out / "oracle_read_curves.csv")
    print("\nheld-out oracle-read by step (mean over seeds):\n" + (100 * oracle).round(1).to_markdown())
    if a.read_stop_figure:
        read_stop_figure(a.out, a.read_stop_figure)


if __name__ == "__main__":
    main()
