"""Does this machine and environment compute what a study's shared step-0 evaluation holds, to the bit?

    python scripts/step0_check.py data/runs/in_progress/speed/paper_f30              # the first 16 prompts
    python scripts/step0_check.py data/runs/in_progress/speed/paper_f30 --prompts 64

A rate study of a pretrained model runs for days, across checkouts and fresh installs, and its runs are comparable
only if every one of them computes as the first did. Its runs share one step-0 evaluation (``step0_eval/``,
:mod:`skillgate_lib.runs.warm_eval`), read back only under the same code, package versions, chip and settings. This
recomputes the part of it that needs no sampling, the teacher-forced P(oracle | slate) on the first ``--prompts``
validation prompts, with the settings a run of the study recorded (its ``config.json``; the warm start with fresh
LoRA, as every run starts), and compares it with what the cached evaluation holds. Run it before the study goes on
in a new checkout or environment: equal to the bit says this environment computes what the earlier one did (a
forward pass through the model, its tokenizer and the LoRA wrapper; sampling draws from the same logits); a
difference says a run here would not reproduce the study's numbers. It compares with the cached file whatever its
key (a version change moves the key; this says whether it moves the numbers). Loads the model once (about a minute
for SmolLM2 on 2 cores, plus several seconds a prompt) and writes only under a temporary folder. Exits 0 when equal,
1 when not, 2 where the study has no run or no step-0 evaluation to compare with.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch


def cached_choice(study: Path, cache: Path | None = None) -> tuple[Path, np.ndarray]:
    """The step-0 evaluation's file in ``study`` (``cache`` where given, else the only one there) and its choice
    probabilities."""
    from skillgate_lib.runs import warm_eval

    if cache is None:
        found = sorted(warm_eval.folder(study).glob("*.pt"))
        if len(found) != 1:
            raise ValueError(f"{warm_eval.folder(study)}: {len(found)} step-0 evaluations there; name one with --cache"
                             if found else f"{warm_eval.folder(study)}: no step-0 evaluation to compare with")
        cache = found[0]
    return cache, np.asarray(torch.load(cache, weights_only=False)["choice"])


def run_config(study: Path, run: str | None = None):
    """The :class:`TrainConfig` a run of ``study`` recorded (``run``, else the first with a ``config.json``), writing
    into a temporary folder; fields the code has no longer are left out."""
    from skillgate_lib.runs.train import TrainConfig

    runs = [study / run] if run else sorted(d for d in study.iterdir() if (d / "config.json").is_file())
    if not runs or not (runs[0] / "config.json").is_file():
        raise ValueError(f"{study}: no run with a config.json" + (f" named {run}" if run else ""))
    record = json.loads((runs[0] / "config.json").read_text())
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    return TrainConfig(**{k: v for k, v in record.items() if k in fields})


def recompute(cfg, prompts: int) -> np.ndarray:
    """P(oracle | slate) on the first ``prompts`` validation prompts of ``cfg``'s evaluation, from the warm start with
    fresh LoRA, computed as a run computes its step-0 evaluation (:meth:`TrainingRun.choice_probs`)."""
    from skillgate_lib.runs.train import TrainingRun, heldout_pairs

    with tempfile.TemporaryDirectory() as tmp:
        run = TrainingRun(dataclasses.replace(cfg, run_dir=str(Path(tmp) / "run"), report_to=[]))
        run._choice_pairs = heldout_pairs(run.eval_env, cfg.eval_tasks, cfg.eval_split)[:prompts]
        return run.choice_probs()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("study", type=Path, help="a study's folder (speed --out-dir): plan.json, runs, step0_eval/")
    ap.add_argument("--prompts", type=int, default=16, help="how many of the first validation prompts (default 16)")
    ap.add_argument("--run", help="the run whose config.json gives the settings (default: the first)")
    ap.add_argument("--cache", type=Path, help="the step-0 evaluation's file (default: the only one in step0_eval/)")
    args = ap.parse_args(argv)
    try:
        path, cached = cached_choice(args.study, args.cache)
        cfg = run_config(args.study, args.run)
    except (OSError, ValueError) as err:
        print(f"step0_check: {err}", file=sys.stderr)
        return 2
    n = min(args.prompts, len(cached))
    now = recompute(cfg, n)
    diff = np.abs(now - cached[:n])
    equal = bool(np.array_equal(now, cached[:n]))
    print(f"{path}: the first {n} prompts' P(oracle | slate), cached vs recomputed here: "
          + ("equal to the bit" if equal else f"{int((diff > 0).sum())} differ, by up to {diff.max():.3g}"))
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
