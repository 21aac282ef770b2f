"""Audit a GRPO run's logs for selector credit starvation: Share, Sign, Value by horizon.

``python -m skillgate_lib audit PATH ...``: the text report (:func:`~skillgate_lib.audit.printout.report`)
and, unless ``--no-figures``, the figures and the trend table written to ``--out``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from skillgate_lib import paths, readers
from skillgate_lib.audit.engine import FORMATS, is_inside
from skillgate_lib.audit.figures import figures
from skillgate_lib.audit.measures import run_audit
from skillgate_lib.audit.printout import GRADIENT_NOTE, categories_note, report
from skillgate_lib.audit.stats import ALPHA
from skillgate_lib.logs import ArtifactError

__all__ = ["GRADIENT_NOTE", "categories_note", "main", "report"]


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
    p.add_argument("--alpha", type=float, default=ALPHA, help="trend test level: a measure worsens or improves "
                                                              f"only where p <= alpha (default {ALPHA:g})")
    p.add_argument("--tokenizer", help="Hugging Face tokenizer name or path (default: whitespace fallback)")
    p.add_argument("--read-pattern", action="append", help="regex with a 'name' group, repeatable (default: "
                                                           "<read>name</read> and ~/.claude/skills/<name>/SKILL.md)")
    p.add_argument("--reward-columns", help="TRL: comma-separated reward columns to sum (default: all numeric)")
    p.add_argument("--success-threshold", type=float, default=1.0, help="success = reward >= this, if not logged")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--memory-limit", default="512MB", help="DuckDB memory limit (default 512MB)")
    p.add_argument("--no-figures", action="store_true")
    p.add_argument("--rescore", metavar="MODEL", help="give a TRL or verl log its gradient weights (Gradient Share): "
                   "MODEL (the policy that sampled it: an embedded name, smollm2-sft, a Hugging Face id or path) re-reads "
                   "each rollout's prompt and response, one forward each; its tokenizer is the audit's")
    p.add_argument("--predict", action="store_true", help="after the audit, the lookahead from a kit run's own "
                   "config (its model, regime, lr and rollout shape): python -m skillgate_lib predict --run PATH")
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
    if args.predict and not (args.path / "config.json").exists():  # before the audit: fail fast
        print(f"audit: error: --predict needs a kit run (its config.json); {args.path} has none", flush=True)
        return 2
    rescore = None
    if args.rescore:
        from skillgate_lib.audit.rescore import Rescorer

        try:
            rescore = Rescorer(args.rescore, threads=args.threads)
        except (OSError, ValueError, ModuleNotFoundError) as err:
            print(f"audit: error: --rescore {args.rescore}: {err}", flush=True)
            return 2
    try:
        result = run_audit(
            args.path, fmt=args.format, tasks=args.tasks, skip_bad=args.skip_bad,
            split=None if args.split == "all" else args.split, n_bins=args.bins, n_boot=args.n_boot, seed=args.seed,
            tokenizer=args.tokenizer, read_patterns=tuple(args.read_pattern or readers.DEFAULT_READ_PATTERNS),
            reward_columns=args.reward_columns.split(",") if args.reward_columns else None,
            success_threshold=args.success_threshold, threads=args.threads, memory_limit=args.memory_limit,
            alpha=args.alpha, rescore=rescore)
    except ArtifactError as err:
        hint = isinstance(err, readers.BadInput) and not args.skip_bad
        print(f"audit: error: {err}" + ("\n(--skip-bad skips bad files and rows and counts them by reason)" if hint else ""),
              flush=True)
        return 1
    if rescore is not None:
        rescore.close()
        if rescore.rows == 0:
            print(f"audit: note: --rescore {args.rescore} scored no rollout: only TRL and verl logs are re-read from "
                  "their text (a kit run logs its gradient weights itself)", flush=True)
    print(report(result), flush=True)
    if not args.no_figures:
        import matplotlib.pyplot as plt

        from skillgate_lib.plots import savefig

        for name, (fig, data) in figures(result).items():
            savefig(name, fig, data=data, out_dir=out)
            plt.close(fig)
        result.trends.to_csv(out / "audit_trends.csv", index=False)
        print(f"\nfigures: {out}", flush=True)
    if args.predict:
        from skillgate_lib.runs.predict import predict_main

        print("\nlookahead (python -m skillgate_lib predict --run PATH):", flush=True)
        return predict_main(["--run", str(args.path), "--out", str(out / "predict.json")])
    return 0
