"""The powered comparison ("study"): equal search on validation, more seeds at the choice, the test set.

The protocol is fixed before the runs it judges and written to ``<out>/plan.json``; a
study resumed with another plan is refused.

1. **Search.** Every method trains each value of its one searched knob on the search
   seeds, the same number of values for every method: SkillGate over lambda (its own
   knob), each baseline over its learning rate.
2. **Selection.** Per method, the value with the best mean final *validation* success over
   the search seeds (ties: the first listed, the reference default). Written to
   ``<out>/selection.json`` with every value's score.
3. **Seeds.** The chosen value on further seeds, up to the method's count (8 for outcome-only
   and SkillGate, 5 for the others in the ``paper`` plan).
4. **Test.** Every run at the chosen value, and the warm start once, on the test set
   (distinct instances apart from the validation set; nothing is selected on it):
   ``<run>/test.json``, ``<out>/warmstart/test.json``.

The reported seeds include the search seeds, whose runs helped choose the value; every
method has the same number of values and search seeds, so that selection acts alike on all.
Reading a study back (tables, paired differences) is :mod:`skillgate_lib.report.study`.

Command line::

    python -m skillgate_lib study --plan paper --out-dir build/runs/study/paper --dry-run   # the plan and its wall time
    python -m skillgate_lib study --plan paper --out-dir build/runs/study/paper             # run or resume it
    python -m skillgate_lib study --plan sweep --regime easy --from data/runs/study/paper --out-dir ...

Runs train in groups of ``--together`` (default 8) in each worker, their rollouts decoded in
one batch (:mod:`skillgate_lib.runs.multirun`: the same numbers up to the rounding of the sampling
logits); ``--together 1`` trains each run alone, as before.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import dataclasses
import json
import multiprocessing as mp
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from skillgate_lib import logs, paths
from skillgate_lib import methods as methods_lib
from skillgate_lib.notebooks import progress_bar
from skillgate_lib.runs.compare import train_all
from skillgate_lib.runs.train import TrainConfig


@dataclass(frozen=True)
class Arm:
    """One method of a study: the knob it searches, its values, and its seed count at the choice."""

    method: str
    knob: str
    values: tuple[float, ...]
    seeds: int


@dataclass(frozen=True)
class Plan:
    """A study's protocol (module docstring); its JSON is ``<out>/plan.json``."""

    name: str
    regime: str
    arms: tuple[Arm, ...]
    search_seeds: tuple[int, ...] = (0, 1, 2)
    steps: int = 100
    test_tasks: int = 1024
    model: str = "tiny"
    settings: dict = field(default_factory=lambda: {
        "prompts_per_step": 4, "group_size": 8, "lr": 5e-3, "eval_every": 25, "eval_tasks": 256,
        "eval_split": "val", "log_train_every": 10})
    """TrainConfig fields every run shares (a searched knob overrides its own)."""

    def to_json(self) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(self)))

    def arm(self, method: str) -> Arm:
        return next(a for a in self.arms if a.method == method)

    def config(self, arm: Arm, value: float, seed: int, out_dir: Path, threads: int, device: str = "auto") -> TrainConfig:
        """The :class:`TrainConfig` of one run: ``out_dir/<method>-<knob><value>-seed<seed>`` (``device``: where it runs,
        not part of the plan)."""
        settings = {**self.settings, arm.knob: value}
        return TrainConfig(method=arm.method, seed=seed, steps=self.steps, regime=self.regime, model=self.model,
                           threads=threads, device=device, run_dir=str(out_dir / run_name(arm, value, seed)), **settings)


def run_name(arm: Arm, value: float, seed: int) -> str:
    return f"{arm.method}-{arm.knob}{value:g}-seed{seed}"


#: Learning rates every baseline searches; SkillGate searches lambda at the shared lr (5e-3).
BASELINE_LRS = (5e-3, 1e-2)
#: SkillGate's lambda values: the reference's 0.2, and 1.0.
LAMBDAS = (0.2, 1.0)


def paper_plan() -> Plan:
    """The paper's table in the ``paper`` regime: every trainable method of the comparison."""
    arms = [Arm("skillgate", "selector_coef", LAMBDAS, 8), Arm("outcome", "lr", BASELINE_LRS, 8)]
    arms += [Arm(m, "lr", BASELINE_LRS, 5) for m in ("utility", "selection_bc", "skill_free", "masked_exec", "shaped")]
    return Plan("paper", "paper", tuple(arms))


def sweep_plan(regime: str, selection: dict, seeds: int = 8, model: str = "tiny") -> Plan:
    """Outcome-only vs SkillGate in another regime (or from another warm start ``model``), each at the
    value a finished study chose (no new search)."""
    arms = tuple(Arm(m, selection[m]["knob"], (selection[m]["value"],), seeds) for m in ("skillgate", "outcome"))
    settings = {**Plan.__dataclass_fields__["settings"].default_factory(), "eval_every": 50}  # nothing to select on
    name = f"sweep-{regime}" + (f"-{model}" if model != "tiny" else "")
    return Plan(name, regime, arms, search_seeds=tuple(range(seeds)), model=model, settings=settings)


#: The sweeps the kit reports beside the paper study, by the directory name they are written to:
#: ``(regime, warm start)``. ``paper-lookup`` is the paper regime from the warm start that looks
#: values up in the body (``tiny-lookup``) instead of recalling the library's tables.
SWEEPS = {"easy": ("easy", "tiny"), "noisy": ("noisy", "tiny"), "paper-lookup": ("paper", "tiny-lookup")}


def named_sweep(name: str, selection: dict, seeds: int = 8) -> Plan:
    """The sweep :data:`SWEEPS` names, at the values of a finished study's ``selection``."""
    if name not in SWEEPS:
        raise ValueError(f"unknown sweep {name!r}; choose one of {', '.join(SWEEPS)}")
    regime, model = SWEEPS[name]
    return sweep_plan(regime, selection, seeds, model)


# --------------------------------------------------------------------------- running

def _final_val(run_dir: Path) -> float:
    ev = logs.read_metrics(run_dir).query("split == 'eval'").sort_values("step")
    return float(ev["eval/success"].iloc[-1])


def select(plan: Plan, out_dir: Path) -> dict:
    """Per method, the value with the best mean final validation success over the search seeds."""
    chosen = {}
    for arm in plan.arms:
        scores = {v: sum(_final_val(out_dir / run_name(arm, v, s)) for s in plan.search_seeds) / len(plan.search_seeds)
                  for v in arm.values}
        best = max(arm.values, key=lambda v: (scores[v], -arm.values.index(v)))
        chosen[arm.method] = {"knob": arm.knob, "value": best, "val_success": {f"{v:g}": scores[v] for v in arm.values}}
    return chosen


def selected_runs(plan: Plan, out_dir: Path, chosen: dict) -> list[Path]:
    """Every run at each method's chosen value: the search seeds and the further ones."""
    out = []
    for arm in plan.arms:
        value = chosen[arm.method]["value"]
        out += [out_dir / run_name(arm, value, s) for s in _seeds(plan, arm)]
    return out


def _seeds(plan: Plan, arm: Arm) -> list[int]:
    first = max(plan.search_seeds) + 1
    return [*plan.search_seeds[: arm.seeds], *range(first, first + max(0, arm.seeds - len(plan.search_seeds)))]


def evaluate_on_test(run_dir: str | Path, regime: str, n: int, model: str | None = None, threads: int = 1,
                     device: str = "auto") -> dict:
    """A run's final adapter (or ``model`` alone) on ``n`` test instances of ``regime``: the ``test.json`` record."""
    import torch

    from skillgate_lib.env import regimes
    from skillgate_lib.policy import devices
    from skillgate_lib.policy.models import load_policy
    from skillgate_lib.runs.evaluate import evaluate, load_adapter, summarize

    torch.set_num_threads(threads)
    if model is None:
        policy, tokenizer, config = load_adapter(run_dir)
        temperature = float(config.get("temperature", 1.0))
    else:
        (policy, tokenizer), temperature = load_policy(model), 1.0
    r = regimes.get(regime)
    t0 = time.perf_counter()
    policy = policy.to(devices.resolve(device))
    summary = summarize(evaluate(policy, tokenizer, r.env(), n, r.max_new_tokens, temperature=temperature, split="test"),
                        prefix="test")
    return {"split": "test", "tasks": n, "regime": regime, "seconds": time.perf_counter() - t0, **summary}


def _test_eval(run_dir: str, regime: str, n: int, model: str | None, threads: int, device: str = "auto") -> None:
    """:func:`evaluate_on_test`, written atomically to ``run_dir/test.json``."""
    record = evaluate_on_test(run_dir, regime, n, model, threads, device)
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    logs.atomic_write_bytes(Path(run_dir) / "test.json", (json.dumps(record, indent=1) + "\n").encode())


def write_test_records(jobs: list[tuple], workers: int, progress: bool) -> None:
    todo = [j for j in jobs if not (Path(j[0]) / "test.json").exists()]
    if not todo:
        return
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(_test_eval, *j) for j in todo]
        for fut in progress_bar(cf.as_completed(futures), total=len(futures), desc="test set", disable=not progress):
            fut.result()


def check_plan(plan, out_dir: Path) -> None:
    """Write ``plan.json`` (``plan.to_json()``) on the first call; afterwards refuse any other plan (the protocol is
    fixed up front)."""
    path = out_dir / "plan.json"
    if path.exists():
        old = json.loads(path.read_text())
        if old != plan.to_json():
            diff = sorted(k for k in {*old, *plan.to_json()} if old.get(k) != plan.to_json().get(k))
            raise ValueError(f"{path}: the study was started with another plan (fields {', '.join(diff)} differ); "
                             "a plan is fixed before its runs: choose another --out-dir")
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plan.to_json(), indent=1) + "\n")


def n_runs(plan: Plan) -> int:
    """Training runs of a plan: every value on the search seeds, then the chosen value on the further seeds."""
    return sum(_runs_of(plan, a) for a in plan.arms)


def _runs_of(plan: Plan, arm: Arm) -> int:
    return len(arm.values) * len(plan.search_seeds) + max(0, arm.seeds - len(plan.search_seeds))


def estimate_minutes(plan: Plan, workers: int, step_s: dict[str, float] | None = None) -> float:
    """Wall time of the whole plan from seconds per GRPO step by method (one thread each, ``workers`` at once).

    ``step_s`` default: measured on this kind of machine (``time/step_s`` of the committed
    study's runs, 4 x 8 rollouts, two runs at once on 2 cores; 0.8 s for the methods not
    named); evaluations at about 4 s per 256 trials, plus a few seconds to start each run.
    """
    step_s = step_s or {"selection_bc": 0.3, "skill_free": 1.1, "masked_exec": 0.5, "utility": 0.6}
    evals = (plan.steps // plan.settings["eval_every"] + 1) * 4 * plan.settings["eval_tasks"] / 256 + 5
    train = sum(_runs_of(plan, a) * (plan.steps * step_s.get(a.method, 0.8) + evals) for a in plan.arms)
    tests = (sum(a.seeds for a in plan.arms) + 1) * (4 * plan.test_tasks / 256 + 5)
    return (train + tests) / workers / 60


#: Runs trained together in one worker by default (:mod:`skillgate_lib.runs.multirun`); 1 is the runner before it.
TOGETHER = 8


def run_study(plan: Plan, out_dir: str | Path, workers: int = 2, progress: bool = True, device: str = "auto",
              together: int = TOGETHER) -> dict:
    """Run (or resume) ``plan`` under ``out_dir``; returns the selection. Finished runs and tests are skipped.

    ``together``: runs trained together in one worker (:func:`skillgate_lib.runs.multirun.train_together`: the same
    numbers up to the rounding of the sampling logits); 1 trains each run alone, as before.
    """
    out_dir = Path(out_dir)
    check_plan(plan, out_dir)
    threads = max(1, (os.cpu_count() or 2) // workers)
    search = [plan.config(a, v, s, out_dir, threads, device) for a in plan.arms for v in a.values for s in plan.search_seeds]
    train_all(search, workers, False, progress, f"{plan.name}: search", together)
    chosen = select(plan, out_dir)
    sel = out_dir / "selection.json"
    if sel.exists() and json.loads(sel.read_text()) != json.loads(json.dumps(chosen)):
        raise ValueError(f"{sel}: differs from what the search runs now select; were runs changed by hand?")
    sel.write_text(json.dumps(chosen, indent=1) + "\n")
    more = [plan.config(a, chosen[a.method]["value"], s, out_dir, threads, device)
            for a in plan.arms for s in _seeds(plan, a) if s not in plan.search_seeds]
    train_all(more, workers, False, progress, f"{plan.name}: seeds", together)
    jobs = [(str(p), plan.regime, plan.test_tasks, None, threads, device) for p in selected_runs(plan, out_dir, chosen)]
    jobs.append((str(out_dir / "warmstart"), plan.regime, plan.test_tasks, plan.model, threads, device))
    write_test_records(jobs, workers, progress)
    return chosen


PLANS = {"paper": paper_plan}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m skillgate_lib study", description=__doc__.splitlines()[0])
    p.add_argument("--plan", choices=[*PLANS, "sweep"], default="paper",
                   help="paper: the table in the paper regime; sweep: outcome vs SkillGate in --regime at the "
                        "values the study in --from chose")
    p.add_argument("--regime", help="the sweep's regime (skillgate_lib.env.regimes)")
    p.add_argument("--from", dest="source", type=Path, help="a finished study whose selection.json the sweep uses")
    p.add_argument("--seeds", type=int, default=8, help="seeds per method of a sweep (default: 8)")
    p.add_argument("--model", default="tiny", help="the warm start a sweep trains from (default: tiny)")
    p.add_argument("--out-dir", type=Path, help="default: build/runs/study/<plan name>")
    p.add_argument("--workers", type=int, default=2, help="runs at once (the cores are split among them)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and its estimated wall time, run nothing")
    p.add_argument("--device", default="auto", help="where the runs train: auto (CUDA when present), cpu or cuda")
    p.add_argument("--together", type=int, default=TOGETHER,
                   help=f"runs trained together in one worker, their rollouts decoded in one batch (default: {TOGETHER}; "
                        "1: each run alone, the runner before batching)")
    return p


def study_main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if args.plan == "sweep":
        if not args.regime or not args.source:
            p.error("--plan sweep needs --regime and --from (a finished study's directory)")
        sel = args.source / "selection.json"
        if not sel.exists():
            p.error(f"{sel}: not found; finish that study's search first")
        plan = sweep_plan(args.regime, json.loads(sel.read_text()), args.seeds, args.model)
    else:
        plan = PLANS[args.plan]()
    out = args.out_dir or paths.BUILD_DIR / "runs" / "study" / plan.name
    print(f"study {plan.name!r} in regime {plan.regime!r}: {n_runs(plan)} runs of {plan.steps} steps, "
          f"{sum(a.seeds for a in plan.arms) + 1} test evaluations of {plan.test_tasks} instances -> {out}")
    for a in plan.arms:
        print(f"  {a.method:<13} {a.knob} in {list(a.values)}, {a.seeds} seeds at the choice")
    print(f"estimated wall time: {estimate_minutes(plan, args.workers):.0f} min with {args.workers} workers "
          "(finished runs are skipped on resume)", flush=True)
    if args.dry_run:
        return 0
    for m in (a.method for a in plan.arms):
        methods_lib.get(m)
    t0 = time.perf_counter()
    if args.together < 1:
        p.error(f"--together must be >= 1, got {args.together}")
    chosen = run_study(plan, out, args.workers, device=args.device, together=args.together)
    print(json.dumps(chosen, indent=1))
    print(f"wall time {(time.perf_counter() - t0) / 60:.1f} min")
    return 0


main = study_main
