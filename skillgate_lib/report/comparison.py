"""The comparison read back: the results table, success by horizon, the channel picture (drawn by
:mod:`skillgate_lib.plots`).

Everything here reads committed run artifacts (``data/runs/compare/``, the runs at each
method's selected learning rate, through :mod:`skillgate_lib.report.results`) and returns
DataFrames; it imports no trainer. Rows are in the method registry's order and
carry the paper's row where the registry names one (:mod:`skillgate_lib.methods`).
"""

from __future__ import annotations

import pandas as pd
import torch

from skillgate_lib import credit as credit_lib
from skillgate_lib import methods

#: The paper's headline table (9B model, DeepExperience/SkillGate), in percent.
REFERENCE = pd.DataFrame(
    [("SFT (RL init)", 40.8, 37.9, 61.8), ("Selection BC", 44.7, 71.4, 31.4), ("Skill-free RL", 46.0, 35.4, 55.0),
     ("outcome-only RL", 47.0, 54.3, 69.6), ("Skill1-style utility credit", 44.7, 53.5, 45.5),
     ("SkillGate", 53.2, 83.9, 21.8)],
    columns=["method", "success", "oracle_read", "misleading_read"],
)


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
    return out.reindex(methods.in_order(out.index)).reset_index()


def by_horizon(traj: pd.DataFrame, measures=("success", "oracle_read")) -> pd.DataFrame:
    """Held-out rates by horizon H per method: mean over seeds, seed sd and seed count (long form)."""
    per_seed = traj.groupby(["method", "seed", "horizon"])[list(measures)].mean().reset_index()
    long = per_seed.melt(id_vars=["method", "seed", "horizon"], var_name="measure", value_name="value")
    out = (long.groupby(["measure", "method", "horizon"])["value"]
           .agg(mean="mean", sd=lambda x: x.std(ddof=1) if len(x) > 1 else 0.0, seeds="size").reset_index())
    order = {m: i for i, m in enumerate(methods.METHODS)}
    return out.sort_values(["measure", "method", "horizon"], key=lambda c: c.map(order) if c.name == "method" else c,
                           ignore_index=True)


def gain_by_horizon(traj: pd.DataFrame, method: str, baseline: str) -> pd.DataFrame:
    """Per horizon: success of ``method`` minus ``baseline`` (percentage points), mean and sd over paired seeds."""
    per_seed = traj[traj["method"].isin([method, baseline])].groupby(["method", "seed", "horizon"])["success"].mean()
    wide = per_seed.unstack("method")
    if method not in wide or baseline not in wide:
        raise ValueError(f"gain_by_horizon: need runs of both {method!r} and {baseline!r}, found {sorted(wide.columns)}")
    diff = ((wide[method] - wide[baseline]) * 100).dropna().reset_index(name="gain_pp")
    return (diff.groupby("horizon")["gain_pp"]
            .agg(mean="mean", sd=lambda x: x.std(ddof=1) if len(x) > 1 else 0.0, seeds="size").round(1).reset_index())


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
    """A group and trajectory that shows starvation best (the shortest of each kind): a single oracle read that *failed*
    while a group-mate succeeded, credited by SkillGate's selector channel (broadcast GRPO pushes
    that correct choice down, SkillGate up); else a read
    that SkillGate's selector channel credits (nonzero selector advantage); else a lucky
    non-oracle success; else any trajectory with a read."""
    def find(cond):  # the shortest matching trajectory: a clean failure, not one that ran to the length cap
        hits = [(len(s["tokens"][i]), k, i) for k, s in enumerate(samples) for i, rs in enumerate(s["reads"])
                if cond(s, i, rs)]
        if not hits:
            return None
        _, k, i = min(hits)
        return samples[k], i

    def credited(s, i, rs):
        return bool(rs) and any(a != 0 for a in credit_lib.selector_advantages(_inputs(s))[i])

    return (find(lambda s, i, rs: len(rs) == 1 and rs[0]["category"] == "oracle" and s["rewards"][i] == 0
                 and max(s["rewards"]) > 0 and credited(s, i, rs))
            or find(credited)
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


def results_markdown(table: pd.DataFrame) -> str:
    """The results table as Markdown: kit rows (mean +- sd over seeds) beside the paper's numbers.

    A row is labelled with its registry label and name (:mod:`skillgate_lib.methods`); the
    paper's numbers are those of the row the registry says the method stands for.
    """
    ref = REFERENCE.set_index("method")
    lines = ["| method | seeds | success % | oracle read % | misleading read % | reads / trial | "
             "paper: success | paper: oracle read | paper: misleading read |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for _, r in table.iterrows():
        m = methods.METHODS.get(r["method"])
        paper = ref.loc[m.paper_row] if m is not None and m.paper_row is not None else None
        label = f"{m.label} (`{m.name}`)" if m is not None else r["method"]
        cells = [f"{r[c]:.1f} ± {r[c + '_sd']:.1f}" for c in ("success", "oracle_read", "misleading_read")]
        cells.append(f"{r['reads']:.2f} ± {r['reads_sd']:.2f}")
        ref_cells = [f"{paper[c]:.1f}" for c in ("success", "oracle_read", "misleading_read")] if paper is not None else ["–"] * 3
        lines.append(f"| {label} | {int(r['seeds'])} | " + " | ".join(cells + ref_cells) + " |")
    return "\n".join(lines) + "\n"
