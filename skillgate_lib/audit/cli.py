"""Audit a GRPO run's logs for selector credit starvation: Share, Sign, Value by horizon.

``python -m skillgate_lib audit PATH ...``: the text report (:func:`report`) and, unless
``--no-figures``, the figures and the trend table written to ``--out``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from skillgate_lib import paths, readers
from skillgate_lib.audit.engine import FORMATS, is_inside
from skillgate_lib.audit.figures import figures
from skillgate_lib.audit.measures import AuditResult, run_audit
from skillgate_lib.logs import CATEGORIES, ArtifactError


def _fmt_table(df: pd.DataFrame) -> str:
    show = df.copy()
    for c in ("share_median", "share_q25", "share_q75", "gshare_median", "gshare_q25", "gshare_q75"):
        show[c] = show[c].map(lambda v: "nan" if pd.isna(v) else f"{100 * v:.2f}%")
    for c in ("ratio_share", "ratio_gshare"):
        show[c] = show[c].map(lambda v: "nan" if pd.isna(v) else f"{v:.3g}x")
    for c in ("sign_negative", "sign_wrong", "sign_zero", "oracle_read", "misleading_read", "success"):
        show[c] = show[c].map(lambda v: f"{v:.3f}")
    for c in ("value", "value_lo", "value_hi"):
        show[c] = show[c].map(lambda v: "nan" if pd.isna(v) else f"{100 * v:+.1f}")
    show["reads_per_trial"] = show["reads_per_trial"].map(lambda v: f"{v:.2f}")
    show = show.rename(columns={"value": "value_pp", "value_lo": "lo", "value_hi": "hi", "value_groups": "groups",
                                "share_median": "share_med", "misleading_read": "mislead_read",
                                "gshare_median": "gshare_med", "gshare_q25": "g_q25", "gshare_q75": "g_q75"})
    return show.to_string(index=False)


def categories_note(fmt: str) -> str:
    """Why Sign and Value are missing from an audit of a log without read categories, and what to pass."""
    need = ("pass --tasks META with the slate of each task: " + readers.tasks.EXPECTED if fmt in ("trl", "verl", "nemo")
            else f"the table needs a read_categories column (one of {', '.join(CATEGORIES)} per read)")
    return ("no skill categories: Share, read counts and advantage signs are reported; Sign (wrong-signed reads), "
            f"Value and the oracle/misleading read rates need them ({need})")


#: What the report says when a log holds no gradient weights.
GRADIENT_NOTE = ("no gradient weights (grad_weight_sel / grad_weight_all), so no Gradient Share: kit runs log them from "
                 "the sampling logits, and a run written before they existed gets them by re-running its command "
                 "(same seed, same rollouts); logs of other engines need the policy's per-token probabilities, "
                 "which the kit cannot recompute for them yet")


def report(result: AuditResult) -> str:
    """The CLI's text report: per-bin table, trends, dilution, theory fit and any skipped rows."""
    lines = [f"audit of {result.source} ({result.fmt}, {result.n_rows:,} trajectories, horizon = {result.horizon_kind})"]
    if not result.categorised:
        lines.append(categories_note(result.fmt))
    lines += ["", _fmt_table(result.summary_table()), "",
              f"dilution (median Share, shortest / longest bin): {result.dilution:.2f}x"]
    if result.n_grad:
        lines.append(f"dilution (median Gradient Share, shortest / longest bin): {result.grad_dilution:.2f}x "
                     f"({result.n_grad:,} of {result.n_rows:,} trajectories log gradient weights)")
    else:
        lines.append(GRADIENT_NOTE)
    lines += ["predicted selector-signal ratio SkillGate / outcome-only, (lambda / (1 + lambda)) / (Value x Share), "
              "averaged over the bins: "
              + ", ".join(f"{result.overall[c]:.3g}x from {name}" for c, name in
                          (("ratio_share", "Share"), ("ratio_gshare", "Gradient Share")) if pd.notna(result.overall[c])),
              "", "trends vs horizon:"]
    for r in result.trends.itertuples():
        lines.append(f"  {r.measure:<14} rho {r.rho:+.3f}  p {r.p_value:<8.2g} -> {r.verdict}")
    lines += ["", result.model_note]
    if result.problems.summary():
        lines += ["", result.problems.summary()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m skillgate_lib audit", description=__doc__.splitlines()[0])
    p.add_argument("path", type=Path, help="run directory, log directory or table file")
    p.add_argument("--format", default="auto", choices=FORMATS, help="log format (default: detect)")
    p.add_argument("--tasks", type=Path, help="task metadata (JSONL/JSON/CSV/Parquet): slate categories per task, "
                                              "needed for Sign and Value of TRL, verl and NeMo-RL logs")
    p.add_argument("--skip-bad", action="store_true", help="skip bad files and rows and report counts by reason")
    p.add_argument("--out", type=Path, help="figure directory (default <path>-audit beside PATH; build/audit/<name> "
                                            "for the kit's committed runs under data/)")
    p.add_argument("--split", default="train", help="train, eval or all (default train)")
    p.add_argument("--bins", type=int, default=8, help="maximum horizon bins (default 8)")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap replicates for Value (default 1000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tokenizer", help="Hugging Face tokenizer name or path (default: whitespace fallback)")
    p.add_argument("--read-pattern", action="append", help="regex with a 'name' group, repeatable (default: "
                                                           "<read>name</read> and ~/.claude/skills/<name>/SKILL.md)")
    p.add_argument("--reward-columns", help="TRL: comma-separated reward columns to sum (default: all numeric)")
    p.add_argument("--success-threshold", type=float, default=1.0, help="success = reward >= this, if not logged")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--memory-limit", default="512MB", help="DuckDB memory limit (default 512MB)")
    p.add_argument("--no-figures", action="store_true")
    args = p.parse_args(argv)
    # Default: beside the audited run (<run>-audit), so a user's run keeps its audit next to it whatever the cwd;
    # the kit's committed runs under data/ keep theirs in the build directory (data/ holds inputs only).
    source = args.path.resolve()
    out = args.out or (paths.BUILD_DIR / "audit" / source.name if is_inside(source, paths.DATA_DIR)
                       else source.parent / f"{source.name}-audit")
    if not args.no_figures and is_inside(out, args.path):
        print(f"audit: error: --out {out} lies inside the audited {args.path}; the audit never writes into its input",
              flush=True)
        return 2
    try:
        result = run_audit(
            args.path, fmt=args.format, tasks=args.tasks, skip_bad=args.skip_bad,
            split=None if args.split == "all" else args.split, n_bins=args.bins, n_boot=args.n_boot, seed=args.seed,
            tokenizer=args.tokenizer, read_patterns=tuple(args.read_pattern or readers.DEFAULT_READ_PATTERNS),
            reward_columns=args.reward_columns.split(",") if args.reward_columns else None,
            success_threshold=args.success_threshold, threads=args.threads, memory_limit=args.memory_limit)
    except ArtifactError as err:
        hint = isinstance(err, readers.BadInput) and not args.skip_bad
        print(f"audit: error: {err}" + ("\n(--skip-bad skips bad files and rows and counts them by reason)" if hint else ""),
              flush=True)
        return 1
    print(report(result), flush=True)
    if not args.no_figures:
        import matplotlib.pyplot as plt

        from skillgate_lib.plots import savefig

        for name, (fig, data) in figures(result).items():
            savefig(name, fig, data=data, out_dir=out)
            plt.close(fig)
        result.trends.to_csv(out / "audit_trends.csv", index=False)
        print(f"\nfigures: {out}", flush=True)
    return 0
