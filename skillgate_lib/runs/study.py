"""The powered comparison ("study"): equal search on validation, more seeds at the choice, the test set.

The protocol is fixed before the runs it judges and written to ``<out>/plan.json``; a
study resumed with another plan is refused.

1. **Search.** Every method trains each point of its grid on the search seeds: the values of
   its searched knob (``paper``: SkillGate over lambda, each baseline over its learning rate),
   times the values of any knob searched jointly with it (``paper_note8``: SkillGate's lambda
   beside the learning rate every arm searches).
2. **Selection.** Per method, the point with the best mean final *validation* success over
   the search seeds (ties: the first listed, the reference default). A plan with ``extend``
   grows a grid whose choice sits at an edge by one value beyond it (the grid's end ratio)
   and searches again, up to ``extend`` times per method. Written to ``<out>/selection.json``
   with every point's score (and each extension).
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
    python -m skillgate_lib study --plan paper_note8 --dry-run                              # the table in the note regime
    python -m skillgate_lib study --plan sweep --regime easy --from data/runs/study/paper --out-dir ...

Runs train in groups of ``--together`` (default 8) in each worker, their rollouts decoded in
one batch (:mod:`skillgate_lib.runs.multirun`: the same numbers up to the rounding of the sampling
logits); ``--together 1`` trains each run alone, as before.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from skillgate_lib import logs, paths
from skillgate_lib import methods as methods_lib
from skillgate_lib.runs import preregister, warm_eval
from skillgate_lib.runs.compare import train_all
from skillgate_lib.runs.protocol import (TIMINGS, check_plan, edge_extension, end_command, threads_per_worker,
                                         write_test_records)
from skillgate_lib.runs.train import TrainConfig


@dataclass(frozen=True)
class Arm:
    """One method of a study: the knob it searches, its values, and its seed count at the choice."""

    method: str
    knob: str
    values: tuple[float, ...]
    seeds: int
    also: tuple[tuple[str, tuple[float, ...]], ...] = ()
    """Knobs searched jointly with ``knob``, as ``(name, values)`` pairs: the grid is every combination."""

    def points(self, values: list[float] | tuple[float, ...] | None = None) -> list[dict[str, float]]:
        """The grid: one ``{knob: value, ...}`` per combination (``values``: the searched knob's, default its own)."""
        knobs = [(self.knob, tuple(self.values if values is None else values)), *self.also]
        return [dict(zip([k for k, _ in knobs], combo)) for combo in itertools.product(*(v for _, v in knobs))]


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
    extend: int = 0
    """Times a method's searched knob may grow beyond an edge its choice sits on (0: a fixed grid)."""

    def to_json(self) -> dict:
        """The plan as ``plan.json`` holds it; fields at their defaults that older plans lack (``extend``, an arm's
        ``also``) are left out, so that a study planned before them reads back the same."""
        out = json.loads(json.dumps(dataclasses.asdict(self)))
        if not self.extend:
            del out["extend"]
        for arm in out["arms"]:
            if not arm["also"]:
                del arm["also"]
        return out

    def arm(self, method: str) -> Arm:
        return next(a for a in self.arms if a.method == method)

    def config(self, arm: Arm, point: float | dict, seed: int, out_dir: Path, threads: int,
               device: str = "auto") -> TrainConfig:
        """The :class:`TrainConfig` of one run at ``point`` (a value of the arm's knob, or a point of its grid):
        ``out_dir/<study_run_name>`` (``device``: where it runs, not part of the plan)."""
        settings = {**self.settings, **as_point(arm, point)}
        return TrainConfig(method=arm.method, seed=seed, steps=self.steps, regime=self.regime, model=self.model,
                           threads=threads, device=device, run_dir=str(out_dir / study_run_name(arm, point, seed)),
                           **settings)


def as_point(arm: Arm, point: float | dict) -> dict[str, float]:
    return dict(point) if isinstance(point, dict) else {arm.knob: point}


def study_run_name(arm: Arm, point: float | dict, seed: int) -> str:
    """``<method>-<knob><value>[-<knob2><value2>...]-seed<seed>``, the searched knob first."""
    point = as_point(arm, point)
    knobs = [arm.knob, *(k for k in point if k != arm.knob)]
    return f"{arm.method}-" + "-".join(f"{k}{point[k]:g}" for k in knobs) + f"-seed{seed}"


def point_label(arm: Arm, point: dict) -> str:
    """A point's key in ``selection.json``: its value alone for a one-knob arm, ``knob=value,...`` otherwise."""
    return f"{point[arm.knob]:g}" if not arm.also else ",".join(f"{k}={v:g}" for k, v in point.items())


#: Learning rates every baseline searches; SkillGate searches lambda at the shared lr (5e-3).
BASELINE_LRS = (5e-3, 1e-2)
#: SkillGate's lambda values: the reference's 0.2, and 1.0.
LAMBDAS = (0.2, 1.0)


def paper_plan() -> Plan:
    """The paper's table in the ``paper`` regime: every trainable method of the comparison."""
    arms = [Arm("skillgate", "selector_coef", LAMBDAS, 8), Arm("outcome", "lr", BASELINE_LRS, 8)]
    arms += [Arm(m, "lr", BASELINE_LRS, 5) for m in ("utility", "selection_bc", "skill_free", "masked_exec", "shaped")]
    return Plan("paper", "paper", tuple(arms))


#: The learning rates every arm of the ``paper_note8`` table searches: below the ``paper`` study's choices
#: (every arm there chose the lowest of {5e-3, 1e-2}), and the rate study's choice in this regime (3e-3) inside.
NOTE8_LRS = (1e-3, 3e-3, 1e-2)


def note8_plan() -> Plan:
    """The paper's table in ``paper_note8``, the regime whose audit finds starvation and where SkillGate learns the
    choice faster (the rate study): the paper's RL rows, ``masked_exec``, ``shaped`` and ``skillgate_exec_read``;
    every arm the same learning-rate grid (extended at an edge), SkillGate and its ablation also lambda; 8 seeds."""
    sg = {"also": (("selector_coef", LAMBDAS),)}
    arms = [Arm(m, "lr", NOTE8_LRS, 8, **sg) for m in ("skillgate", "skillgate_exec_read")]
    arms += [Arm(m, "lr", NOTE8_LRS, 8)
             for m in ("outcome", "utility", "selection_bc", "skill_free", "masked_exec", "shaped")]
    settings = {"prompts_per_step": 4, "group_size": 8, "eval_every": 25, "eval_tasks": 256, "eval_split": "val",
                "log_train_every": 10}
    return Plan("paper_note8", "paper_note8", tuple(arms), search_seeds=(0, 1), model="tiny-note8",
                settings=settings, extend=2)


def note8_edge_plan() -> Plan:
    """A supplement to :func:`note8_plan`, planned after its results: ``selection_bc`` chose the lowest learning rate
    (1.11e-4) after the two extensions that plan allows, with its validation oracle-read still rising at step 100.
    The same settings and seeds, the grid around that choice and one value below it, one more extension allowed."""
    base = note8_plan()
    return Plan("paper_note8-edge", base.regime, (Arm("selection_bc", "lr", (3.33e-4, 1.11e-4, 3.7e-5), 8),),
                search_seeds=base.search_seeds, model=base.model, settings=base.settings, extend=1)


#: The lambda grid of :func:`note8_lambda_plan`: the table's {0.2, 1} and two values below its low edge.
NOTE8_LAMBDAS = (0.05, 0.1, 0.2, 1.0)


def note8_lambda_plan() -> Plan:
    """A supplement to :func:`note8_plan`, planned after its results: SkillGate and ``skillgate_exec_read`` chose
    lambda 0.2, the low edge of {0.2, 1}, and that plan never extends lambda. Lambda searched like the learning
    rate: the grid :data:`NOTE8_LAMBDAS` at the learning rate both chose (1e-3, interior), a choice at an edge
    extended by one value (the grid's end ratio), 8 seeds at the choice, the same settings and search seeds."""
    base = note8_plan()
    arms = tuple(Arm(m, "selector_coef", NOTE8_LAMBDAS, 8) for m in ("skillgate", "skillgate_exec_read"))
    return Plan("paper_note8-lambda", base.regime, arms, search_seeds=base.search_seeds, model=base.model,
                settings={**base.settings, "lr": 1e-3}, extend=1)


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


def select(plan: Plan, out_dir: Path, grids: dict[str, list[float]] | None = None) -> dict:
    """Per method, the point of its grid with the best mean final validation success over the search seeds (ties:
    the first point). ``grids``: each method's values of its searched knob, when extended beyond the plan's."""
    chosen = {}
    for arm in plan.arms:
        points = arm.points((grids or {}).get(arm.method))
        scores = [sum(_final_val(out_dir / study_run_name(arm, p, s)) for s in plan.search_seeds) / len(plan.search_seeds)
                  for p in points]
        best = points[max(range(len(points)), key=lambda i: (scores[i], -i))]
        entry = {"knob": arm.knob, "value": best[arm.knob]}
        if arm.also:
            entry["point"] = best
        entry["val_success"] = {point_label(arm, p): sc for p, sc in zip(points, scores)}
        chosen[arm.method] = entry
    return chosen


def chosen_point(arm: Arm, entry: dict) -> dict[str, float]:
    """The point a ``selection.json`` entry chose (its ``point``, or its one knob's ``value``)."""
    return dict(entry.get("point") or {arm.knob: entry["value"]})


def runs_at_chosen_point(plan: Plan, out_dir: Path, chosen: dict) -> list[Path]:
    """Every run at each method's chosen point: the search seeds and the further ones."""
    out = []
    for arm in plan.arms:
        point = chosen_point(arm, chosen[arm.method])
        out += [out_dir / study_run_name(arm, point, s) for s in _seeds(plan, arm)]
    return out


def _seeds(plan: Plan, arm: Arm) -> list[int]:
    first = max(plan.search_seeds) + 1
    return [*plan.search_seeds[: arm.seeds], *range(first, first + max(0, arm.seeds - len(plan.search_seeds)))]


def n_runs(plan: Plan) -> int:
    """Training runs of a plan: every point on the search seeds, then the chosen point on the further seeds
    (before any extension of a grid)."""
    return sum(_runs_of(plan, a) for a in plan.arms)


def _runs_of(plan: Plan, arm: Arm) -> int:
    return len(arm.points()) * len(plan.search_seeds) + max(0, arm.seeds - len(plan.search_seeds))


def estimate_study_minutes(plan: Plan, workers: int, step_s: dict[str, float] | None = None) -> float:
    """Wall time of the whole plan from seconds per GRPO step by method (one thread each, ``workers`` at once).

    ``step_s`` default: measured on this kind of machine in ``paper`` (``time/step_s`` of the
    committed study's runs, 4 x 8 rollouts, two runs at once on 2 cores; 0.8 s for the methods
    not named), scaled to the plan's regime by the rate study's timings of a step and an
    evaluation there (:data:`skillgate_lib.runs.protocol.TIMINGS`); evaluations at about 4 s per
    256 trials in ``paper``, plus a few seconds to start each run. The runs share their step-0 evaluation
    (:mod:`skillgate_lib.runs.warm_eval`): each worker's first run computes it.
    """
    step_s = step_s or {"selection_bc": 0.3, "skill_free": 1.1, "masked_exec": 0.5, "utility": 0.6}
    step_scale, eval_scale = (t / p for t, p in zip(TIMINGS.get(plan.regime, TIMINGS["paper"]), TIMINGS["paper"]))
    eval_s = 4 * eval_scale
    one_eval = eval_s * plan.settings["eval_tasks"] / 256
    evals = plan.steps // plan.settings["eval_every"] * one_eval + 5
    runs = sum(_runs_of(plan, a) for a in plan.arms)
    train = sum(_runs_of(plan, a) * (plan.steps * step_s.get(a.method, 0.8) * step_scale + evals) for a in plan.arms)
    train += min(workers, runs) * one_eval
    tests = (sum(a.seeds for a in plan.arms) + 1) * (eval_s * plan.test_tasks / 256 + 5)
    return (train + tests) / workers / 60


#: Runs trained together in one worker by default (:mod:`skillgate_lib.runs.multirun`); 1 is the runner before it.
TOGETHER = 8


def run_study(plan: Plan, out_dir: str | Path, workers: int = 2, progress: bool = True, device: str = "auto",
              together: int = TOGETHER) -> dict:
    """Run (or resume) ``plan`` under ``out_dir``; returns the selection. Finished runs and tests are skipped;
    an interrupted run continues from its last checkpoint.

    ``together``: runs trained together in one worker (:func:`skillgate_lib.runs.multirun.train_together`: the same
    numbers up to the rounding of the sampling logits); 1 trains each run alone, as before.
    """
    out_dir = Path(out_dir)
    check_plan(plan, out_dir)
    threads = threads_per_worker(workers)
    chosen = search(plan, out_dir, threads, workers, progress, device, together)
    sel = out_dir / "selection.json"
    if sel.exists() and json.loads(sel.read_text()) != json.loads(json.dumps(chosen)):
        raise ValueError(f"{sel}: differs from what the search runs now select; were runs changed by hand?")
    sel.write_text(json.dumps(chosen, indent=1) + "\n")
    more = [plan.config(a, chosen_point(a, chosen[a.method]), s, out_dir, threads, device)
            for a in plan.arms for s in _seeds(plan, a) if s not in plan.search_seeds]
    train_all(more, workers, True, progress, f"{plan.name}: seeds", together, warm_eval.folder(out_dir))
    jobs = [(str(p), plan.regime, plan.test_tasks, None, threads, device)
            for p in runs_at_chosen_point(plan, out_dir, chosen)]
    jobs.append((str(out_dir / "warmstart"), plan.regime, plan.test_tasks, plan.model, threads, device))
    write_test_records(jobs, workers, progress)
    return chosen


def search(plan: Plan, out_dir: Path, threads: int, workers: int, progress: bool, device: str, together: int) -> dict:
    """Train every point of every grid on the search seeds and select; with ``plan.extend``, grow each grid whose
    choice sits at an edge and search again (the module docstring). Returns the selection."""
    grids = {a.method: list(a.values) for a in plan.arms}
    extended = {a.method: [] for a in plan.arms}
    while True:
        configs = [plan.config(a, p, s, out_dir, threads, device) for a in plan.arms
                   for p in a.points(grids[a.method]) for s in plan.search_seeds]
        train_all(configs, workers, True, progress, f"{plan.name}: search", together, warm_eval.folder(out_dir))
        chosen = select(plan, out_dir, grids)
        grew = False
        for a in plan.arms:
            nxt = edge_extension(grids[a.method], chosen[a.method]["value"])
            if nxt is not None and len(extended[a.method]) < plan.extend:
                grids[a.method].append(nxt)
                extended[a.method].append(nxt)
                grew = True
        if not grew:
            break
    if plan.extend:
        for a in plan.arms:
            chosen[a.method]["extended"] = extended[a.method]
            chosen[a.method]["at_edge"] = edge_extension(grids[a.method], chosen[a.method]["value"]) is not None
    return chosen


PLANS = {"paper": paper_plan, "paper_note8": note8_plan, "paper_note8-edge": note8_edge_plan,
         "paper_note8-lambda": note8_lambda_plan}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m skillgate_lib study", description=__doc__.splitlines()[0])
    p.add_argument("--plan", choices=[*PLANS, "sweep"], default="paper",
                   help="paper: the table in the paper regime; paper_note8: the table where the audit finds "
                        "starvation; paper_note8-edge: selection BC's grid below that table's edge; paper_note8-lambda: "
                        "SkillGate's lambda below that table's edge; sweep: outcome vs SkillGate in --regime at the values the study in --from chose")
    p.add_argument("--regime", help="the sweep's regime (skillgate_lib.env.regimes)")
    p.add_argument("--from", dest="source", type=Path, help="a finished study whose selection.json the sweep uses")
    p.add_argument("--seeds", type=int, default=8, help="seeds per method of a sweep (default: 8)")
    p.add_argument("--model", default="tiny", help="the warm start a sweep trains from (default: tiny)")
    p.add_argument("--out-dir", type=Path, help="default: build/runs/study/<plan name>")
    p.add_argument("--workers", type=int, default=2, help="runs at once (the cores are split among them)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and its estimated wall time, run nothing")
    p.add_argument("--export", type=Path, metavar="DIR",
                   help="after the study, copy its plan, selection and each run's config, metrics and test record to DIR")
    p.add_argument("--device", default="auto", help="where the runs train: auto (CUDA when present), cpu or cuda")
    p.add_argument("--together", type=int, default=TOGETHER,
                   help=f"runs trained together in one worker, their rollouts decoded in one batch (default: {TOGETHER}; "
                        "1: each run alone, the runner before batching)")
    preregister.add_plan_flags(p)
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
        also = "".join(f" x {k} in {list(v)}" for k, v in a.also)
        print(f"  {a.method:<19} {a.knob} in {list(a.values)}{also}, {a.seeds} seeds at the choice")
    if plan.extend:
        print(f"  a choice at an edge of a grid extends it by one value, up to {plan.extend} times")
    print(f"estimated wall time: {estimate_study_minutes(plan, args.workers):.0f} min with {args.workers} workers "
          "(on resume finished runs are skipped and interrupted ones continue from their checkpoint)", flush=True)
    command = f"python -m skillgate_lib study --plan {args.plan} --export {args.export or out}"
    try:
        preregister.preregistration(plan.to_json(), out, args.export, args.dry_run, args.uncommitted_plan, command)
    except ValueError as e:
        p.error(str(e))
    if args.dry_run:
        return 0
    for m in (a.method for a in plan.arms):
        methods_lib.get(m)
    t0 = time.perf_counter()
    if args.together < 1:
        p.error(f"--together must be >= 1, got {args.together}")
    chosen = run_study(plan, out, args.workers, device=args.device, together=args.together)
    return end_command(chosen, out, args.export, t0)


main = study_main
