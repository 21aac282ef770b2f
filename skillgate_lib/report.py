"""The numbers behind notebook 04: the results table, success by horizon, the channel picture
(drawn by :mod:`skillgate_lib.plots`); and the generated text of the README and docs/results.md.

Everything here reads committed run artifacts (``data/runs/compare/``, the runs at each
method's selected learning rate, through :mod:`skillgate_lib.results`) and returns
DataFrames; it imports no trainer. Rows are in the method registry's order and
carry the paper's row where the registry names one (:mod:`skillgate_lib.methods`).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pandas as pd
import torch

from skillgate_lib import credit as credit_lib
from skillgate_lib import methods, paths

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


# ---------------------------------------------------------------------------- generated text for the documents
#
# The README's verdict and the tables of docs/results.md are written from committed files
# (figures/*.csv, which `make figures` draws from data/runs/, and data/runs/diagnosis/), never
# typed: each sits between the markers below, and `make figures` rewrites every one of them
# (`python -m skillgate_lib.report README.md docs/results.md`; `--check` fails on a stale one).

_BLOCK = re.compile(r"(<!-- generated: (?P<name>[a-z0-9_]+) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)
_LEADING_NUMBER = re.compile(r"^\s*([+-]?\d+(?:\.\d+)?)")

#: The regimes compared outside the powered study: diagnosis folder -> (regime, warm start, committed audit run).
DIAGNOSED = {"paper_echo": ("paper_echo", "tiny-echo", "paper_echo-outcome"),
             "paper_echo_f30": ("paper_echo_f30", "tiny-echo-one", "paper_echo_f30-outcome"),
             "paper_echo_h68": ("paper_echo_h68", "tiny-echo-one", None)}

#: Conditions of the `paper` diagnosis (data/runs/diagnosis/summary.csv) in the order the record reads them.
DIAGNOSIS_CONDITIONS = {
    "outcome": "outcome-only GRPO (reference protocol)", "outcome_nofilter": "outcome-only, no dynamic sampling",
    "skillgate": "SkillGate as the reference defines it (lambda 0.2, active-read sharing, filter)",
    "skillgate_nofilter": "SkillGate without the filter", "tokenmean": "SkillGate, token-mean selector, no filter",
    "lambda0.5": "SkillGate, lambda 0.5", "lambda1": "SkillGate, lambda 1", "lambda2": "SkillGate, lambda 2",
    "selector_only": "selector channel alone (lambda 1)", "selector_only_nofilter": "selector channel alone, no filter",
    "selection_bc": "selection BC (supervised fine-tune of the read call)"}


def leading_number(cell) -> float:
    """The estimate of a table cell written as ``"98.0 [96.9, 98.7]"`` (or a bare number)."""
    if isinstance(cell, (int, float)):
        return float(cell)
    match = _LEADING_NUMBER.match(str(cell))
    if match is None:
        raise ValueError(f"no number at the start of table cell {cell!r}")
    return float(match.group(1))


def markdown_table(header: list[str], rows: list[list[str]], align: str) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def interval_pp(mean: float, lo: float, hi: float) -> str:
    return f"{mean:+.1f} [{lo:+.1f}, {hi:+.1f}]"


def diagnosis_table(summary_csv: Path, conditions: dict[str, str] | None = None) -> str:
    """A diagnosis ``summary.csv`` as Markdown: its cells as the script wrote them (a mean and its 95 % interval)."""
    df = pd.read_csv(summary_csv, dtype=str, keep_default_na=False).set_index("condition")
    order = [c for c in (conditions or {}) if c in df.index] + [c for c in df.index if c not in (conditions or {})]
    return markdown_table(["condition", *df.columns], [[(conditions or {}).get(c, f"`{c}`"), *(v if "nan" not in v else "–" for v in df.loc[c])] for c in order],
                     "l" + "r" * len(df.columns))


def _outcome_oracle_read_path(regime_dir: Path) -> tuple[float, float]:
    """Outcome-only's held-out oracle-read (eval split, mean over seeds) at its first and last evaluation, in %."""
    from skillgate_lib import study_report

    curves = study_report.validation_curves(regime_dir)
    mean = curves[curves["chosen"] & (curves["method"] == "outcome")].groupby("step")["oracle_read"].mean() * 100
    return float(mean.iloc[0]), float(mean.iloc[-1])


def starvation_against_gain(figures_dir: Path, data_dir: Path) -> str:
    """Every regime with an outcome-only vs SkillGate comparison: the audited starvation of outcome-only's
    training logs, outcome-only's held-out oracle-read from step 0 to the end, SkillGate minus outcome-only."""
    from skillgate_lib.audit import run_audit

    rows = []
    dose = pd.read_csv(figures_dir / "fig5_dose_response.csv")
    for _, r in dose.iterrows():
        start, end = _outcome_oracle_read_path(data_dir / "runs" / "study" / r["regime"])
        model = json.loads((next((data_dir / "runs" / "study" / r["regime"]).glob("outcome-*/config.json"))).read_text())["model"]
        rows.append([f"`{r['regime']}` (`{model}`)", int(r["seeds"]), "its outcome runs (mean)", f"{100 * r['audit_value']:+.1f}",
                     f"{100 * r['audit_sign_wrong']:.1f} %", f"{100 * r['audit_share_median']:.2f} %",
                     f"{start:.0f} % -> {end:.0f} %", interval_pp(r["oracle_read_diff"], r["oracle_read_lo"], r["oracle_read_hi"]),
                     interval_pp(r["success_diff"], r["success_lo"], r["success_hi"])])
    for folder, (regime, model, audit_run) in DIAGNOSED.items():
        d = data_dir / "runs" / "diagnosis" / folder
        summary = pd.read_csv(d / "summary.csv", dtype=str, keep_default_na=False).set_index("condition")
        curves = pd.read_csv(d / "oracle_read_curves.csv")
        audited = ["–"] * 4
        if audit_run is not None:
            ov = run_audit(data_dir / "runs" / "audit" / audit_run, split="train", n_boot=1000, seed=0).overall
            audited = [f"`{audit_run}` (40 steps)", f"{100 * ov['value']:+.1f}", f"{100 * ov['sign_wrong']:.1f} %",
                       f"{100 * ov['share_median']:.2f} %"]
        sg = summary.loc["skillgate"]
        rows.append([f"`{regime}` (`{model}`)", summary.loc["outcome", "seeds"], *audited,
                     f"{100 * curves['outcome'].iloc[0]:.0f} % -> {100 * curves['outcome'].iloc[-1]:.0f} %",
                     sg["oracle_read - outcome (pp)"], sg["success - outcome (pp)"]])
    return markdown_table(["regime (warm start)", "seeds", "audited in", "Value pp", "wrong-signed reads", "median Share",
                      "outcome-only oracle-read, start -> end", "SkillGate minus outcome: oracle-read pp", "success pp"],
                     rows, "lrlrrrrrr")


def dose_response_table(figures_dir: Path) -> str:
    """Figure 5's numbers (``fig5_dose_response.csv``) as Markdown."""
    dose = pd.read_csv(figures_dir / "fig5_dose_response.csv")
    rows = [[f"`{r['regime']}`", int(r["seeds"]), f"{100 * r['audit_value']:+.1f} pp", f"{100 * r['audit_sign_wrong']:.1f} %",
             f"{100 * r['audit_zero_credit']:.0f} %", f"{100 * r['audit_share_median']:.1f} %", f"{100 * r['audit_signal']:.1f}",
             f"{r['success_outcome']:.1f} % / {r['oracle_read_outcome']:.1f} %",
             interval_pp(r["oracle_read_diff"], r["oracle_read_lo"], r["oracle_read_hi"]), interval_pp(r["success_diff"], r["success_lo"], r["success_hi"])]
            for _, r in dose.iterrows()]
    return markdown_table(["regime", "seeds", "audited Value", "wrong-signed reads", "reads with zero credit", "median Share",
                      "Value x Share (x 100)", "outcome success / oracle-read", "SkillGate minus outcome: oracle-read pp",
                      "success pp"], rows, "lrrrrrrrrr")


def verdict(figures_dir: Path, data_dir: Path) -> str:
    """The README's verdict, at most 8 lines, every number read from ``figures/`` and ``data/runs/diagnosis/``."""
    from skillgate_lib.gradient_report import note_regime_sentence

    diffs = pd.read_csv(figures_dir / "fig6_test_intervals.csv").set_index("baseline").loc["outcome"]
    dose = pd.read_csv(figures_dir / "fig5_dose_response.csv")
    f30 = pd.read_csv(data_dir / "runs" / "diagnosis" / "paper_echo_f30" / "summary.csv", dtype=str).set_index("condition")
    success = list(dose["success_diff"]) + [leading_number(pd.read_csv(data_dir / "runs" / "diagnosis" / d / "summary.csv",
                                                                       dtype=str).set_index("condition")
                                                           .loc["skillgate", "success - outcome (pp)"]) for d in DIAGNOSED]
    above = sum(s > 0 for s in success)
    success_claim = (f"in none of the {len(success)} regimes compared does it succeed more "
                     f"(differences {min(success):+.1f} to {max(success):+.1f} pp)" if above == 0 else
                     f"it succeeds more in {above} of the {len(success)} regimes compared")
    return (f"**The paper's headline table is not reproduced at kit scale.** In the `paper` regime, where the audit\n"
            f"finds the selector starved, SkillGate reads the right skill more often than outcome-only GRPO (oracle-read\n"
            f"{interval_pp(diffs['oracle_read'], diffs['oracle_read_lo'], diffs['oracle_read_hi'])} pp on the test set, "
            f"{int(diffs['seeds'])} paired seeds) but succeeds less ({interval_pp(diffs['success'], diffs['success_lo'], diffs['success_hi'])} pp);\n"
            f"{success_claim}. Where the audit shows\n"
            f"Share, Sign and Value at the paper's order (`paper_echo_f30`), outcome-only GRPO learns the choice anyway\n"
            f"(oracle-read {leading_number(f30.loc['outcome', 'test/oracle_read']):.1f} % on the test set; "
            f"SkillGate {leading_number(f30.loc['skillgate', 'test/oracle_read']):.1f} %, reached sooner).\n"
            + note_regime_sentence(data_dir))


def generated_blocks(figures_dir: Path = paths.FIGURES_DIR, data_dir: Path = paths.DATA_DIR) -> dict:
    """Every generated block by name: a function of no argument that returns its Markdown."""
    from skillgate_lib import gradient_report

    diagnosis = data_dir / "runs" / "diagnosis"
    return {
        "verdict": lambda: verdict(figures_dir, data_dir),
        "study_table": lambda: (figures_dir / "results_table.md").read_text(),
        "quick_table": lambda: (figures_dir / "results_table_quick.md").read_text(),
        "dose_response": lambda: dose_response_table(figures_dir),
        "starvation_against_gain": lambda: starvation_against_gain(figures_dir, data_dir),
        "gradient_share": lambda: gradient_report.gradient_share_table(data_dir),
        "gradient_proxy": lambda: gradient_report.gradient_proxy_table(data_dir),
        "probes": lambda: gradient_report.probes_table(data_dir),
        "diagnosis_paper": lambda: diagnosis_table(diagnosis / "summary.csv", DIAGNOSIS_CONDITIONS),
        **{f"diagnosis_{d.replace('-', '_')}": (lambda d=d: diagnosis_table(diagnosis / d / "summary.csv"))
           for d in ("read-stop", *DIAGNOSED)},
    }


def refresh_document(path: Path, blocks: dict | None = None) -> tuple[str, str]:
    """``path``'s text as it is and with every generated block rewritten; an unknown block name is an error."""
    blocks = generated_blocks() if blocks is None else blocks
    text = Path(path).read_text()

    def render(match: re.Match) -> str:
        name = match.group("name")
        if name not in blocks:
            line = text[: match.start()].count("\n") + 1
            raise ValueError(f"{path}:{line}: unknown generated block {name!r}; known: {', '.join(sorted(blocks))}")
        return match.group(1) + blocks[name]() + match.group(4)

    return text, _BLOCK.sub(render, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m skillgate_lib.report",
                                     description="Rewrite the generated blocks of Markdown documents from committed files.")
    parser.add_argument("documents", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block is stale")
    args = parser.parse_args(argv)
    stale = []
    for doc in args.documents:
        old, new = refresh_document(doc)
        if old != new:
            stale.append(doc)
            if not args.check:
                doc.write_text(new)
    verb = "stale" if args.check else "rewritten"
    print(f"generated blocks {verb}: {', '.join(map(str, stale)) or 'none'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
