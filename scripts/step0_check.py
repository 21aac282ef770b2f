"""Does this machine and environment compute what a study's shared step-0 evaluation holds, to the bit?

    python scripts/step0_check.py data/runs/in_progress/speed/paper_f30              # the choice, first 16 prompts
    python scripts/step0_check.py data/runs/in_progress/speed/paper_f30 --prompts 64
    python scripts/step0_check.py data/runs/in_progress/speed/paper_f30 --sampled    # also the sampled trials

A rate study of a pretrained model runs for days, across checkouts and fresh installs, and its runs are comparable
only if every one of them computes as the first did. Its runs share one step-0 evaluation (``step0_eval/``,
:mod:`skillgate_lib.runs.warm_eval`), read back only under the same code, package versions, chip and settings. This
recomputes it here with the settings a run of the study recorded (its ``config.json``; the warm start with fresh
LoRA, as every run starts) and compares it with the cached file, whatever its key (a version change moves the key;
this says whether it moves the numbers):

* always, the teacher-forced P(oracle | slate) on the first ``--prompts`` validation prompts (rounded up to whole
  batches of :data:`BATCH`, as the evaluation computes them): the model's forward pass, its tokenizer and the LoRA
  wrapper;
* with ``--sampled``, the whole sampled evaluation as well, every trial's tokens and sampling log-probabilities: the
  decoding path (key/value cache, batched sampling), which the teacher-forced pass does not run. As long as the
  evaluation itself (about 10 min for SmolLM2 on 2 cores).

Run it in a new checkout or environment, after ``make install`` and before the study goes on: equal says a run here
computes what the earlier ones did, on the paths checked; a difference says it would not, and the versions the run
recorded are printed beside this environment's. Loads the model once (about a minute for SmolLM2 on 2 cores) and
writes only under a temporary folder. Exits 0 when equal, 1 when not, 2 where there is nothing to compare with.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import numpy as np
import torch

BATCH = 4  # prompts a forward of the choice measure holds (skillgate_lib.runs.choice.oracle_choice's default)


def cached(study: Path, cache: Path | None = None) -> tuple[Path, list, np.ndarray]:
    """The step-0 evaluation's file in ``study`` (``cache`` where given, else the only one there), its episodes and
    its choice probabilities."""
    from skillgate_lib.runs import warm_eval

    if not study.is_dir():
        raise ValueError(f"{study}: no such folder")
    if cache is None:
        found = sorted(warm_eval.folder(study).glob("*.pt"))
        if len(found) != 1:
            raise ValueError(f"{warm_eval.folder(study)}: {len(found)} step-0 evaluations there; name one with --cache"
                             if found else f"{warm_eval.folder(study)}: no step-0 evaluation to compare with")
        cache = found[0]
    try:
        saved = torch.load(cache, weights_only=False)
        return cache, saved["episodes"], np.asarray(saved["choice"])
    except Exception as err:  # noqa: BLE001 - any unreadable file gets the same message
        raise ValueError(f"{cache}: not a readable step-0 evaluation ({type(err).__name__}: {err})") from None


def run_record(study: Path, run: str | None = None) -> tuple[Path, dict]:
    """The ``config.json`` of a run of ``study`` (``run``, else the first that has one) and its record."""
    runs = [study / run] if run else sorted(d for d in study.iterdir() if (d / "config.json").is_file())
    if not runs or not (runs[0] / "config.json").is_file():
        raise ValueError(f"{study}: no run with a config.json" + (f" named {run}" if run else ""))
    path = runs[0] / "config.json"
    try:
        return path, json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not JSON ({err})") from None


def fresh_run(record: dict, run_dir: Path):
    """A :class:`TrainingRun` at step 0 (the warm start, fresh LoRA) with the settings of ``record``; fields the code
    no longer has are left out."""
    from skillgate_lib.runs.train import TrainConfig, TrainingRun

    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    cfg = TrainConfig(**{k: v for k, v in record.items() if k in fields})
    return TrainingRun(dataclasses.replace(cfg, run_dir=str(run_dir), report_to=[]))


def choice_now(run, prompts: int) -> np.ndarray:
    """P(oracle | slate) on the first ``prompts`` validation prompts, computed as a run's evaluation computes it
    (:meth:`TrainingRun.choice_probs`: the same prompts, batches and autocast)."""
    from skillgate_lib.policy import devices
    from skillgate_lib.runs.choice import oracle_choice
    from skillgate_lib.runs.evaluate import heldout_pairs

    cfg = run.cfg
    pairs = heldout_pairs(run.eval_env, cfg.eval_tasks, cfg.eval_split)[:prompts]
    with devices.autocast(next(run.model.parameters()).device, cfg.bf16):
        return oracle_choice(run.model, run.tokenizer, run.eval_env, pairs, batch=BATCH)


def trials_differing(old: list, new: list) -> int:
    """How many sampled trials differ in their tokens or sampling log-probabilities (a count mismatch: all)."""
    if len(old) != len(new):
        return max(len(old), len(new))
    return sum(a.response_ids != b.response_ids or a.sample_logps != b.sample_logps for a, b in zip(old, new))


def version_lines(record: dict) -> list[str]:
    """The package versions ``record`` holds that differ from this environment's."""
    out = []
    for dist, then in sorted(record.get("versions", {}).items()):
        try:
            now = metadata.version(dist)
        except metadata.PackageNotFoundError:
            now = None
        if dist != "python" and now != then:
            out.append(f"  {dist}: {then} in the run, {now} here")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("study", type=Path, help="a study's folder (speed --out-dir): its runs and step0_eval/")
    ap.add_argument("--prompts", type=int, default=16,
                    help=f"how many of the first validation prompts' choice to recompute, rounded up to a multiple of "
                         f"{BATCH} (default 16)")
    ap.add_argument("--sampled", action="store_true", help="also recompute and compare the sampled evaluation")
    ap.add_argument("--run", help="the run whose config.json gives the settings (default: the first)")
    ap.add_argument("--cache", type=Path, help="the step-0 evaluation's file (default: the only one in step0_eval/)")
    args = ap.parse_args(argv)
    if args.prompts < 1:
        ap.error("--prompts must be at least 1")
    try:
        path, episodes, choice = cached(args.study, args.cache)
        config, record = run_record(args.study, args.run)
    except (OSError, ValueError) as err:
        print(f"step0_check: {err}", file=sys.stderr)
        return 2
    n = min(BATCH * math.ceil(args.prompts / BATCH), len(choice))
    with tempfile.TemporaryDirectory() as tmp:
        run = fresh_run(record, Path(tmp) / "run")
        now = choice_now(run, n)
        differ = trials_differing(episodes, run.evaluate()) if args.sampled else 0
    diff = np.abs(now - choice[:n])
    equal = bool(np.array_equal(now, choice[:n])) and not differ
    print(f"{path}, settings of {config}:")
    print(f"  the first {n} prompts' P(oracle | slate): "
          + ("equal to the bit" if not diff.any() else f"{int((diff > 0).sum())} differ, by up to {diff.max():.3g}"))
    if args.sampled:
        print(f"  the sampled evaluation's {len(episodes)} trials: "
              + (f"{differ} differ in their tokens or sampling log-probabilities" if differ else "equal to the bit"))
    if not equal:
        print("\n".join(version_lines(record) or ["  every package version the run recorded is the same here"]))
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
