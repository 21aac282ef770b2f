"""Where a rate study stands: each planned run's state, and the work left, read from the study's folder alone.

    python -m skillgate_lib speed --regime paper_f30 --workers 1 --together 1 \
        --out-dir data/runs/in_progress/speed/paper_f30 --status --eval-seconds 620

(the time left assumes the ``--workers`` and ``--together`` given, the ones the study runs with)

A study of a pretrained model runs for days, across machines. This reads what the study has written (``plan.json``,
checked equal to the plan asked for; ``selection.json``; per run ``metrics.jsonl``, ``adapter/`` and ``test.json``;
the warm start's ``warmstart/test.json``) and writes nothing, so it is safe to call beside the running study.
A run is *finished* once its adapter is saved (what :mod:`skillgate_lib.runs.compare` skips on resume) or, in an
exported study (no adapters), once it has logged its last step; *started* once it has logged a step (a run whose
machine went back shows the steps it logged, some of which it trains again from its checkpoint); else *not started*.
Runs at the chosen step size on the further seeds are known only once the search has chosen (``selection.json``);
until then they are listed per arm, step size unknown. A grid extension appears when its runs do.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from skillgate_lib.report.rates import speed_run_name
from skillgate_lib.runs.protocol import plan_fields_differing

_RUN = re.compile(r"^(?P<method>\w+)-lr(?P<lr>[0-9.e+-]+)-seed(?P<seed>\d+)$")


def run_state(run_dir: str | Path, steps_planned: int | None = None) -> dict:
    """One run's state from its folder: ``state``, the last training ``step`` logged, the evaluations logged after
    step 0 (``evals``), whether its test record is written (``test``), and its logged seconds a step (the wall time
    of the batch it trained in, shared by runs trained together). ``steps_planned``: a run that has logged that many
    steps is finished even without an adapter (an exported study)."""
    run_dir = Path(run_dir)
    steps, evals, seconds = [], 0, []
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line being written as this reads
            if row.get("split") == "eval":
                evals += row.get("step", 0) > 0
            elif "step" in row:
                steps.append(row["step"])
                if "time/step_s" in row:
                    seconds.append(row["time/step_s"])
    last = max(steps, default=0)
    finished = (run_dir / "adapter" / "adapter_config.json").exists() or (steps_planned and last >= steps_planned)
    return {"state": "finished" if finished else "started" if steps else "not started",
            "step": last, "evals": evals, "test": (run_dir / "test.json").exists(),
            "step_seconds": seconds}


def study_progress(plan, out_dir: str | Path) -> pd.DataFrame:
    """One row per planned run of ``plan`` (a :class:`skillgate_lib.runs.speed.SpeedPlan`) under ``out_dir``:
    ``phase`` (search or seeds), ``method``, ``lr`` (nan where the search has not chosen yet), ``seed``, ``run`` and
    :func:`run_state`'s fields."""
    out_dir = Path(out_dir)
    path = out_dir / "plan.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no study there")
    if diff := plan_fields_differing(path, plan):
        raise ValueError(f"{path}: the study there has another plan (fields {', '.join(diff)} differ from the one "
                         "asked for: check --regime, --optimizer and --seeds)")
    grid = {m: list(plan.grid) for m in plan.methods}
    for d in sorted(p for p in out_dir.iterdir() if p.is_dir()) if out_dir.is_dir() else []:
        m = _RUN.match(d.name)
        extension = m and m["method"] in grid and float(m["lr"]) not in grid[m["method"]]
        if extension and int(m["seed"]) in plan.search_seeds:
            grid[m["method"]].append(float(m["lr"]))  # an extension of the grid, once its runs exist
    rows = [("search", m, v, s) for m in plan.methods for v in grid[m] for s in plan.search_seeds]
    selection = out_dir / "selection.json"
    try:
        chosen = json.loads(selection.read_text()) if selection.exists() else {}
    except json.JSONDecodeError:  # being written as this reads
        chosen = {}
    first = max(plan.search_seeds) + 1
    further = range(first, first + plan.seeds - len(plan.search_seeds))
    rows += [("seeds", m, chosen[m]["value"] if m in chosen else np.nan, s) for m in plan.methods for s in further]
    out = []
    for phase, method, lr, seed in rows:
        run = speed_run_name(method, lr, seed) if np.isfinite(lr) else f"{method}-lr?-seed{seed}"
        out.append({"phase": phase, "method": method, "lr": lr, "seed": seed, "run": run,
                    **run_state(out_dir / run, plan.steps)})
    table = pd.DataFrame(out)
    table.attrs["warm_test"] = (out_dir / "warmstart" / "test.json").exists()
    return table


def progress_lines(table: pd.DataFrame, plan, eval_s: float, workers: int = 1, together: int = 1) -> list[str]:
    """The study's progress in words: runs per state and phase, the run(s) started, steps and evaluations logged, and
    the work left, timed from the median logged step (robust to pauses; a step of ``together`` runs trained at once)
    over ``workers`` processes, and ``eval_s`` seconds an evaluation of 256 instances (no evaluation time is logged; the
    caller says where it comes from)."""
    s = plan.settings
    lines = []
    for phase, part in table.groupby("phase", sort=False):
        counts = part["state"].value_counts()
        said = ", ".join(f"{counts[k]} {k}" for k in ("finished", "started", "not started") if k in counts)
        lines.append(f"{phase}: {len(part)} runs: {said}")
    for r in table[table["state"] == "started"].itertuples():
        lines.append(f"  started: {r.run}, step {r.step} of {plan.steps} logged")
    if not table["lr"].notna().all():
        lines.append("  the further seeds' step size is chosen when the search ends (selection.json)")
    evals_per_run = plan.steps // s["eval_every"]
    steps_done, evals_done = int(table["step"].sum()), int(table["evals"].sum())
    total = len(table) * plan.steps
    steps_left = total - steps_done
    evals_left = len(table) * evals_per_run - evals_done
    # test records: the runs at the chosen step size, and the warm start once, all written after the last run
    tests_left = len(plan.methods) * plan.seeds - int(table["test"].sum()) + (not table.attrs.get("warm_test", False))
    seconds = [x for xs in table["step_seconds"] for x in xs]
    step_s = float(np.median(seconds)) if seconds else float("nan")
    lines.append(f"logged: {steps_done} of {total} steps, {evals_done} of {len(table) * evals_per_run} evaluations "
                 f"({100 * steps_done / total:.0f} %, before any further grid extension)")
    left_h = (steps_left * step_s / max(together, 1) + evals_left * eval_s * s["eval_tasks"] / 256
              + tests_left * eval_s * plan.test_tasks / 256) / workers / 3600
    lines.append(f"left: {steps_left} steps at the median logged {step_s:.0f} s ({together} run(s) a step), "
                 f"{evals_left} evaluations and {tests_left} test records at {eval_s:.0f} s per 256 instances, "
                 f"{workers} worker(s): about {left_h:.1f} h"
                 if seconds else f"left: {steps_left} steps, {evals_left} evaluations, {tests_left} test records "
                                 "(no step timed yet)")
    return lines
