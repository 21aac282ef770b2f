"""The rate study: how fast each arm learns the choice, per regime and optimizer, at its own best step size.

Starvation, in the theory, is a *ratio of selector signals*, so what it predicts is a rate:
how much faster SkillGate learns which skill to read than outcome-only GRPO. This module
fixes the measure and the protocol before the runs and runs them (reading them back is
:mod:`skillgate_lib.report.rates`).

**The measure** (:func:`run_speed`). Every run evaluates on ``eval_tasks`` (256) validation
instances every ``eval_every`` (5) steps and logs the on-policy oracle-read rate of its
training rollouts every step.

* primary: the least-squares slope of logit(validation oracle-read) over steps 0-25 (per step;
  a rate of 0 or 1 is clipped to half an instance from the edge before the logit);
* secondary: the step at which validation oracle-read first closes half of its step-0 gap to 1
  (linear between evaluations; censored at the last evaluation when never), and the slope of
  logit(on-policy oracle-read) over training steps 1-25.

**The protocol** (:class:`SpeedPlan`, written to ``<out>/plan.json`` before the first run;
a resumed study with another plan is refused):

1. *Search.* Each arm trains every value of the step-size grid (AdamW: learning rate; SGD:
   learning rate; normalised SGD: step length) on the search seeds.
2. *Selection.* Per arm, the value with the highest mean primary measure over the search
   seeds. A choice at an edge of the grid extends the grid one value beyond that edge (the
   grid's ratio) and repeats, up to ``max_extensions`` times per arm; ``selection.json``
   records every value's score and each extension.
3. *Seeds.* The chosen value on further seeds, to ``seeds`` per arm (the search seeds count).
4. *Test.* Every run at its chosen value, and the warm start once, on ``test_tasks`` test
   instances (``test.json``), for the record; nothing is selected on it.

Both arms get the same grid, budget, seeds and protocol (dynamic sampling, KL, 4 x 8 rollouts
a step); SkillGate's lambda is the reference's 0.2.

Command line::

    python -m skillgate_lib speed --regime paper_note8 --dry-run                 # the plan and its wall time
    python -m skillgate_lib speed --regime paper_f30 --dry-run --calibrate --workers 1 --threads 2   # ... timed here
    python -m skillgate_lib speed --regime paper_note8                           # run or resume it
    python -m skillgate_lib speed --regime paper_note8 --status                  # where it stands
    python -m skillgate_lib speed --regime paper_echo_f30 --optimizer nsgd       # the optimizer control
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from skillgate_lib import paths
from skillgate_lib.env import regimes
from skillgate_lib.report.rates import MEASURE_COLUMNS, MEASURES, measure_of, speed_measures, speed_run_name
from skillgate_lib.runs import preregister
from skillgate_lib.runs.protocol import (TIMINGS, check_plan, edge_extension, end_command, threads_per_worker,
                                         write_test_records)
from skillgate_lib.runs.train import TrainConfig

#: The warm start each regime of the study trains from (the RL warm start its probe audited).
MODELS = {"easy": "tiny", "paper": "tiny", "paper_echo_f30": "tiny-echo-one", "paper_note4": "tiny-note4",
          "paper_note8": "tiny-note8", "paper_note8_h68": "tiny-note8", "paper_f30": "smollm2-sft"}

#: The step-size grid each optimizer starts from (extended at an edge, see the module docstring).
#: AdamW: the kit's studies chose the lowest of {5e-3, 1e-2} at 100 steps, so the grid reaches
#: below; plain SGD diverged at 30 and was slow at 10 in a pilot; normalised SGD's step length
#: 0.06 and 0.18 both learnt in that pilot.
GRIDS = {"adamw": (1e-3, 3e-3, 1e-2), "sgd": (3.0, 10.0, 30.0), "nsgd": (0.06, 0.18, 0.54)}

#: Warm starts whose grid differs from :data:`GRIDS`. SmolLM2's LoRA (``smollm2-sft``): a 3-step timing run at the
#: tiny model's 5e-3 took the teacher-forced choice from 0.42 to 0.89 and left 3 of 8 evaluation reads invalid, so
#: its AdamW grid sits a decade lower (fixed before any of its study's runs).
MODEL_GRIDS = {"smollm2-sft": {"adamw": (1e-4, 3e-4, 1e-3)}}

@dataclass(frozen=True)
class SpeedPlan:
    """One regime x optimizer of the rate study (module docstring); its JSON is ``<out>/plan.json``."""

    regime: str
    model: str
    optimizer: str = "adamw"
    grid: tuple[float, ...] = GRIDS["adamw"]
    methods: tuple[str, ...] = ("outcome", "skillgate")
    search_seeds: tuple[int, ...] = (0, 1)
    seeds: int = 8
    steps: int = 30
    max_extensions: int = 2
    test_tasks: int = 512
    measure: str = MEASURES["choice"]
    settings: dict = field(default_factory=lambda: {
        "prompts_per_step": 4, "group_size": 8, "selector_coef": 0.2, "eval_every": 5, "eval_tasks": 256,
        "eval_split": "val", "log_train_every": 10, "checkpoint_every": 10})

    @property
    def name(self) -> str:
        return self.regime if self.optimizer == "adamw" else f"{self.regime}-{self.optimizer}"

    def to_json(self) -> dict:
        return json.loads(json.dumps(asdict(self)))

    def config(self, method: str, lr: float, seed: int, out_dir: Path, threads: int, device: str = "cpu") -> TrainConfig:
        return TrainConfig(method=method, seed=seed, steps=self.steps, regime=self.regime, model=self.model, lr=lr,
                           optimizer=self.optimizer, threads=threads, device=device,
                           run_dir=str(out_dir / speed_run_name(method, lr, seed)), **self.settings)


def plan_for(regime: str, optimizer: str = "adamw", seeds: int = 8) -> SpeedPlan:
    """The study of ``regime`` (a key of :data:`MODELS`) under ``optimizer`` (a key of :data:`GRIDS`)."""
    if regime not in MODELS:
        raise ValueError(f"regime: the rate study has no warm start for {regime!r}; choose one of {', '.join(MODELS)}")
    if optimizer not in GRIDS:
        raise ValueError(f"optimizer: choose one of {', '.join(GRIDS)}, got {optimizer!r}")
    regimes.get(regime)
    model = MODELS[regime]
    return SpeedPlan(regime, model, optimizer, MODEL_GRIDS.get(model, {}).get(optimizer, GRIDS[optimizer]), seeds=seeds)


# --------------------------------------------------------------------------- running

def _score(plan: SpeedPlan, out_dir: Path, method: str, lr: float) -> float:
    column = MEASURE_COLUMNS[measure_of(plan.to_json())]  # the plan's primary measure
    return float(np.mean([speed_measures(out_dir / speed_run_name(method, lr, s))[column] for s in plan.search_seeds]))


def run_speed(plan: SpeedPlan, out_dir: str | Path, workers: int = 2, progress: bool = True, device: str = "cpu",
              together: int = 8, threads: int | None = None) -> dict:
    """Run (or resume) ``plan`` under ``out_dir`` (module docstring); returns the selection. ``threads``: torch threads
    per worker (default: the cores split among the workers). On resume a finished run is skipped and an interrupted
    one continues from its last checkpoint, to the numbers it would have logged uninterrupted."""
    from skillgate_lib.runs import warm_eval
    from skillgate_lib.runs.compare import train_all

    out_dir = Path(out_dir)
    check_plan(plan, out_dir)
    threads = threads_per_worker(workers, threads)
    grids = {m: list(plan.grid) for m in plan.methods}
    extensions = {m: [] for m in plan.methods}
    while True:
        configs = [plan.config(m, v, s, out_dir, threads, device) for m in plan.methods for v in grids[m]
                   for s in plan.search_seeds]
        train_all(configs, workers, True, progress, f"{plan.name}: search", together, warm_eval.folder(out_dir))
        grew = False
        for m in plan.methods:
            scores = {v: _score(plan, out_dir, m, v) for v in grids[m]}
            best = max(grids[m], key=lambda v: (scores[v], -v))
            nxt = edge_extension(grids[m], best)
            if nxt is not None and len(extensions[m]) < plan.max_extensions:
                grids[m].append(nxt)
                extensions[m].append(nxt)
                grew = True
        if not grew:
            break
    chosen = {}
    for m in plan.methods:
        scores = {v: _score(plan, out_dir, m, v) for v in sorted(grids[m])}
        best = max(scores, key=lambda v: (scores[v], -v))
        chosen[m] = {"knob": "lr", "value": best, MEASURE_COLUMNS[measure_of(plan.to_json())]: {f"{v:g}": scores[v] for v in scores},
                     "extended": extensions[m], "at_edge": edge_extension(list(scores), best) is not None}
    (out_dir / "selection.json").write_text(json.dumps(chosen, indent=1) + "\n")
    first = max(plan.search_seeds) + 1
    further = list(range(first, first + plan.seeds - len(plan.search_seeds)))
    more = [plan.config(m, chosen[m]["value"], s, out_dir, threads, device) for m in plan.methods for s in further]
    train_all(more, workers, True, progress, f"{plan.name}: seeds", together, warm_eval.folder(out_dir))
    seeds = [*plan.search_seeds, *further]
    jobs = [(str(out_dir / speed_run_name(m, chosen[m]["value"], s)), plan.regime, plan.test_tasks, None, threads, device)
            for m in plan.methods for s in seeds]
    jobs.append((str(out_dir / "warmstart"), plan.regime, plan.test_tasks, plan.model, threads, device))
    write_test_records(jobs, workers, progress)
    return chosen


def estimate_speed_minutes(plan: SpeedPlan, workers: int, step_s: float, eval_s: float) -> float:
    """Wall time without extensions: ``step_s`` a GRPO step and ``eval_s`` an evaluation of 256 instances, one
    thread each, ``workers`` at once. The runs share their step-0 evaluation (:mod:`skillgate_lib.runs.warm_eval`):
    the first run of each worker computes it (they start together), the others read it."""
    s = plan.settings
    one_eval = eval_s * s["eval_tasks"] / 256
    runs = len(plan.methods) * (len(plan.grid) * len(plan.search_seeds) + plan.seeds - len(plan.search_seeds))
    tests = (len(plan.methods) * plan.seeds + 1) * eval_s * plan.test_tasks / 256
    train = runs * (plan.steps * step_s + plan.steps // s["eval_every"] * one_eval + 5) + min(workers, runs) * one_eval
    return (train + tests) / workers / 60


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m skillgate_lib speed", description=__doc__.splitlines()[0])
    p.add_argument("--regime", required=True, choices=list(MODELS), help="the regime (its warm start is fixed)")
    p.add_argument("--optimizer", default="adamw", choices=list(GRIDS), help="adamw (default), sgd or nsgd")
    p.add_argument("--seeds", type=int, default=8, help="seeds per arm at the choice (default: 8)")
    p.add_argument("--out-dir", type=Path, help="default: build/runs/speed/<regime>[-<optimizer>]")
    p.add_argument("--workers", type=int, default=2, help="processes at once (the cores are split among them)")
    p.add_argument("--threads", type=int, help="torch threads per worker (default: the cores split among the workers; "
                   "fewer leaves cores to other jobs, speed only: the numbers agree up to rounding)")
    p.add_argument("--together", type=int, default=8, help="runs trained together in one process (default: 8)")
    p.add_argument("--device", default="cpu", help="auto, cpu (default) or cuda")
    p.add_argument("--dry-run", action="store_true", help="print the plan and its estimated wall time, run nothing")
    p.add_argument("--calibrate", action="store_true",
                   help="estimate the wall time from a few steps and an evaluation timed here (the study's first run, "
                        "with --threads; a few minutes for a pretrained model) instead of the kit's table of timings")
    p.add_argument("--export", type=Path, metavar="DIR",
                   help="after the study, copy its plan, selection and each run's config, metrics and test record to DIR")
    p.add_argument("--status", action="store_true",
                   help="print where the study in --out-dir stands (each run's state, the work left, timed for the "
                        "--workers and --together given) and run nothing; safe beside the running study")
    p.add_argument("--eval-seconds", type=float, metavar="S",
                   help="with --status: seconds an evaluation of 256 instances takes here (default: the kit's table)")
    preregister.add_plan_flags(p)
    return p


def speed_main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    plan = plan_for(args.regime, args.optimizer, args.seeds)
    out = args.out_dir or paths.BUILD_DIR / "runs" / "speed" / plan.name
    step_s, eval_s = TIMINGS[plan.regime]
    if args.eval_seconds is not None and not args.status:
        p.error("--eval-seconds is read only with --status")
    if args.status:
        from skillgate_lib.runs.study_progress import progress_lines, study_progress

        try:
            table = study_progress(plan, out)
        except (FileNotFoundError, ValueError) as e:
            p.error(f"{e} (give the study's --out-dir and the arguments it was started with)")
        print(f"rate study {plan.name!r} in {out}:")
        print("\n".join(progress_lines(table, plan, args.eval_seconds or eval_s, args.workers, args.together)))
        source = ("--eval-seconds" if args.eval_seconds
                  else "the kit's table for this regime, protocol.TIMINGS; --eval-seconds S gives one timed here")
        print(f"(seconds an evaluation: {source})")
        return 0
    print(f"rate study {plan.name!r}: {' vs '.join(plan.methods)} from {plan.model}, {plan.optimizer} step sizes "
          f"{list(plan.grid)} on seeds {list(plan.search_seeds)}, then {plan.seeds} seeds at the choice; "
          f"{plan.steps} steps -> {out}")
    source = "the kit's timings for this regime (one thread a worker)"
    if args.calibrate:
        from skillgate_lib.runs.calibrate import calibrate

        threads = threads_per_worker(args.workers, args.threads)
        middle = plan.grid[len(plan.grid) // 2]
        # the run's folder is calibrate's own temporary one
        timed = calibrate(plan.config(plan.methods[0], middle, plan.search_seeds[0], out, threads, args.device))
        step_s, eval_s = timed["step_s"], timed["eval_s"]
        source = (f"timed here: {step_s:.1f} s a step (median of {len(timed['step_seconds'])}), {eval_s:.0f} s an "
                  f"evaluation of 256 instances, {threads} thread(s), one job")
    print(f"estimated wall time: {estimate_speed_minutes(plan, args.workers, step_s, eval_s):.0f} min with {args.workers} "
          f"workers, before any grid extension (on resume finished runs are skipped, interrupted ones continue from "
          f"their checkpoint); from {source}", flush=True)
    command = f"python -m skillgate_lib speed --regime {args.regime} --optimizer {args.optimizer} --export {args.export or out}"
    try:
        preregister.preregistration(plan.to_json(), out, args.export, args.dry_run, args.uncommitted_plan, command)
    except ValueError as e:
        p.error(str(e))
    if args.dry_run:
        return 0
    t0 = time.perf_counter()

    return end_command(run_speed(plan, out, args.workers, device=args.device, together=args.together,
                                 threads=args.threads), out, args.export, t0)


main = speed_main
