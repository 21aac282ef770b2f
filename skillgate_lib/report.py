"""The numbers behind notebook 04: the results table, success by horizon, the channel picture.

Everything here reads committed run artifacts (``data/runs/compare/<method>-seed<s>/``)
and returns DataFrames; :mod:`skillgate_lib.plots` draws them.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from skillgate_lib import credit as credit_lib
from skillgate_lib import logs

#: The paper's headline table (9B model, DeepExperience/SkillGate), in percent.
REFERENCE = pd.DataFrame(
    [("SFT (RL init)", 40.8, 37.9, 61.8), ("Selection BC", 44.7, 71.4, 31.4), ("Skill-free RL", 46.0, 35.4, 55.0),
     ("outcome-only RL", 47.0, 54.3, 69.6), ("Skill1-style utility credit", 44.7, 53.5, 45.5),
     ("SkillGate", 53.2, 83.9, 21.8)],
    columns=["method", "success", "oracle_read", "misleading_read"],
)
#: Display order of the kit's methods.
ORDER = ("sft", "outcome", "masked_exec", "shaped", "selection_bc", "skillgate")


def runs(root: str | Path) -> list[Path]:
    """Run directories under ``root`` (each with a ``config.json``), sorted by name."""
    found = sorted(p for p in Path(root).iterdir() if (p / "config.json").exists())
    if not found:
        raise FileNotFoundError(f"{root}: no run directories with a config.json")
    return found


def final_eval_trajectories(root: str | Path) -> pd.DataFrame:
    """Eval trajectories of every run at step 0 (labelled ``sft``) and at its last step (its method)."""
    frames = []
    for run in runs(root):
        config = logs.read_config(run)
        ev = logs.read_run(run, split="eval")
        last = ev["step"].max()
        frames.append(ev[ev["step"] == 0].assign(method="sft", seed=config["seed"], run=run.name))
        frames.append(ev[ev["step"] == last].assign(method=config["credit"], seed=config["seed"], run=run.name))
    df = pd.concat(frames, ignore_index=True)
    df["oracle_read"] = df["read_categories"].map(lambda c: "oracle" in c)
    df["misleading_read"] = df["read_categories"].map(lambda c: "misleading" in c)
    df["reads"] = df["read_categories"].map(len)
    # Every run's step-0 evaluation is the same warm start: keep one copy per seed.
    sft = df[df["method"] == "sft"].drop_duplicates(["seed", "task_id", "rollout"])
    return pd.concat([sft, df[df["method"] != "sft"]], ignore_index=True)


def results_table(traj: pd.DataFrame) -> pd.DataFrame:
    """The paper-shaped table: method x domain success, overall, oracle-read, misleading-read, reads per trial.

    Percentages; ``±`` columns are the standard deviation over seeds of the per-seed value.
    """
    per_seed = traj.groupby(["method", "seed"]).agg(
        success=("success", "mean"), oracle_read=("oracle_read", "mean"),
        misleading_read=("misleading_read", "mean"), reads=("reads", "mean"))
    by_domain = traj.groupby(["method", "seed", "domain"])["success"].mean().unstack("domain")
    per_seed = per_seed.join(by_domain)
    pct = [c for c in per_seed.columns if c != "reads"]
    per_seed[pct] = per_seed[pct] * 100
    mean = per_seed.groupby("method").mean()
    std = per_seed.groupby("method").std(ddof=1).fillna(0.0)
    seeds = per_seed.groupby("method").size().rename("seeds")
    domains = sorted(by_domain.columns)
    cols = domains + ["success", "oracle_read", "misleading_read", "reads"]
    out = mean[cols].round(1)
    for c in ("success", "oracle_read", "misleading_read", "reads"):
        out[f"{c}_sd"] = std[c].round(1 if c != "reads" else 2)
    out["reads"] = mean["reads"].round(2)
    out = out.join(seeds)
    return out.reindex([m for m in ORDER if m in out.index]).reset_index()


def success_by_horizon(traj: pd.DataFrame, methods=("sft", "outcome", "skillgate")) -> pd.DataFrame:
    """Held-out success by horizon H: mean and seed spread for each method."""
    sub = traj[traj["method"].isin(methods)]
    per_seed = sub.groupby(["method", "seed", "horizon"])["success"].mean().reset_index()
    return (per_seed.groupby(["method", "horizon"])["success"]
            .agg(mean="mean", sd=lambda x: x.std(ddof=1) if len(x) > 1 else 0.0, seeds="size").reset_index())


def _inputs(sample: dict) -> credit_lib.CreditInputs:
    B = len(sample["tokens"])
    T = max(len(t) for t in sample["tokens"])
    mask = torch.zeros(B, T, dtype=torch.bool)
    for i, m in enumerate(sample["policy_mask"]):
        mask[i, : len(m)] = torch.tensor(m, dtype=torch.bool)
    return credit_lib.CreditInputs(
        rewards=torch.tensor(sample["rewards"], dtype=torch.float64), group=torch.zeros(B, dtype=torch.long),
        response_mask=mask, reads=[[credit_lib.ReadSpan(**r) for r in rs] for rs in sample["reads"]])


def pick_sample(samples: list[dict]) -> tuple[dict, int]:
    """A group and trajectory that shows starvation best: a single oracle read that *failed*
    while a group-mate succeeded (broadcast GRPO pushes that correct choice down); else a lucky
    non-oracle success; else any trajectory with a read."""
    def find(cond):
        for s in samples:
            for i, rs in enumerate(s["reads"]):
                if cond(s, i, rs):
                    return s, i
        return None

    return (find(lambda s, i, rs: len(rs) == 1 and rs[0]["category"] == "oracle" and s["rewards"][i] == 0
                 and max(s["rewards"]) > 0)
            or find(lambda s, i, rs: rs and rs[0]["category"] != "oracle" and s["rewards"][i] > 0 and min(s["rewards"]) == 0)
            or find(lambda s, i, rs: bool(rs))
            or (samples[0], 0))


def channel_tokens(sample: dict, index: int, methods=("outcome", "skillgate"),
                   cfg: credit_lib.CreditConfig | None = None) -> pd.DataFrame:
    """Per-token credit of one trajectory under each method, recomputed with :mod:`skillgate_lib.credit`.

    Columns: method, position, token, role (``selector`` / ``read call`` / ``execution`` /
    ``environment``), advantage, weight, signal = advantage x weight x (policy tokens).
    """
    inputs = _inputs(sample)
    sel = credit_lib.selector_mask(inputs)[index]
    call = credit_lib.read_call_mask(inputs)[index]
    tokens = sample["tokens"][index]
    policy = inputs.response_mask[index]
    rows = []
    for method in methods:
        c = credit_lib.assign(method, inputs, cfg)
        scale = float(inputs.response_mask.sum())
        for t, tok in enumerate(tokens):
            role = ("environment" if not policy[t] else "selector" if sel[t] else "read call" if call[t] else "execution")
            rows.append(dict(method=method, position=t, token=tok, role=role, advantage=float(c.advantages[index, t]),
                             weight=float(c.weights[index, t]), signal=float(c.advantages[index, t] * c.weights[index, t]) * scale))
    return pd.DataFrame(rows)


def plot_channel_tokens(df: pd.DataFrame, per_line: int = 16) -> plt.Figure:
    """Tokens as coloured boxes, one panel per method: blue pushed up, red pushed down, grey no loss;
    a thick outline marks the selector (skill-name) tokens."""
    methods = list(dict.fromkeys(df["method"]))
    n = int(df["position"].max()) + 1
    lines = int(np.ceil(n / per_line))
    fig, axes = plt.subplots(len(methods), 1, figsize=(per_line * 0.78, 0.42 * lines * len(methods) + 0.9))
    vmax = max(1e-9, df.loc[df["role"] != "environment", "signal"].abs().max())
    cmap = plt.get_cmap("RdBu")
    for ax, method in zip(np.atleast_1d(axes), methods):
        sub = df[df["method"] == method]
        for _, r in sub.iterrows():
            x, y = r["position"] % per_line, -(r["position"] // per_line)
            color = "#e6e6e6" if r["weight"] == 0 else cmap(0.5 + 0.5 * r["signal"] / vmax)
            ax.add_patch(plt.Rectangle((x, y - 0.8), 0.96, 0.8, facecolor=color,
                                       edgecolor="black" if r["role"] == "selector" else "none",
                                       linewidth=2.0 if r["role"] == "selector" else 0))
            label = r["token"] if len(r["token"]) <= 9 else r["token"][:8] + "…"
            ax.text(x + 0.48, y - 0.4, label, ha="center", va="center", fontsize=6)
        ax.set(xlim=(0, per_line), ylim=(-lines, 0.05), title=f"{method}: per-token credit (advantage x loss weight)")
        ax.axis("off")
    fig.tight_layout()
    return fig


def plot_success_by_horizon(df: pd.DataFrame) -> plt.Figure:
    from skillgate_lib.plots import METHOD_COLORS

    fig, ax = plt.subplots(figsize=(5.2, 3.4))
    for method, sub in df.groupby("method", sort=False):
        ax.errorbar(sub["horizon"], sub["mean"], yerr=sub["sd"], marker="o", ms=4, capsize=3, label=method,
                    color=METHOD_COLORS.get(method))
    ax.set(xlabel="horizon H (execution steps)", ylabel="held-out success", ylim=(-0.02, 1.02))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
