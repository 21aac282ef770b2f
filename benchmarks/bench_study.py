"""A study's runs per hour: trained together (``study --together K``) against one run per worker, side by side.

    python benchmarks/bench_study.py [--steps 3] [--runs 8] [--workers 2] [--together 8] [--repeats 1]
                                     [--out FILE]

Both arms train the same ``--runs`` runs of the ``paper`` study's search (methods, values and
seeds in the plan's order, the plan's settings: 4 prompts x 8 rollouts, 256 validation tasks
per evaluation, at the start and the end here) for ``--steps`` steps, each into a fresh
directory, through the study's own runner (:func:`skillgate_lib.runs.compare.train_all`): ``workers``
spawned processes, the cores split among them.

* ``alone``: one run per process at a time (``--together 1``, the runner before batching);
* ``together``: the runs dealt into ``workers`` groups trained by
  :func:`skillgate_lib.runs.multirun.train_together`.

The arms alternate (``alone, together``, then ``together, alone``, ...) so that both see the
same load; runs per hour are ``runs / wall time``, medians over ``--repeats``. Besides the
wall times it reads each arm's runs back: the median ``time/step_s`` and ``time/generate_s``
of their steps (in the ``together`` arm the wall times of the shared batch, ``runs_per_group``
runs), and whether the two
arms wrote the same numbers (every metric but the times, within ``1e-4``). Writes ``--out``
(JSON, default ``build/bench/study.json``) and prints the ratio last.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from skillgate_lib import logs, paths
from skillgate_lib.runs import study
from skillgate_lib.runs.compare import train_all

OUT = paths.BUILD_DIR / "bench" / "study.json"
TARGET = 3.0


def configs(n: int, steps: int, out_dir: Path, threads: int) -> list:
    """The first ``n`` runs of the paper study's search, ``steps`` steps each, written under ``out_dir``."""
    plan = study.paper_plan()
    plan = study.Plan(plan.name, plan.regime, plan.arms, plan.search_seeds, steps, plan.test_tasks, plan.model,
                      {**plan.settings, "eval_every": max(steps, 1)})
    cfgs = [plan.config(a, v, s, out_dir, threads, device="cpu") for s in plan.search_seeds for a in plan.arms
            for v in a.values]
    if n > len(cfgs):
        raise ValueError(f"--runs: the paper study's search has {len(cfgs)} runs, asked for {n}")
    return cfgs[:n]


def _arm(cfgs: list, workers: int, together: int) -> float:
    t0 = time.perf_counter()
    train_all(cfgs, workers, False, False, "bench", together)
    return time.perf_counter() - t0


def _times(cfgs: list) -> dict:
    rows = [logs.read_metrics(c.run_dir).query("split == 'train'") for c in cfgs]
    step = np.concatenate([r["time/step_s"].to_numpy() for r in rows])
    gen = np.concatenate([r["time/generate_s"].dropna().to_numpy() for r in rows if "time/generate_s" in r])
    return {"median_step_s": float(np.median(step)), "median_generate_s": float(np.median(gen)) if len(gen) else None}


def _max_difference(a: list, b: list) -> float:
    """The largest difference between two arms' metrics (every numeric column but the times)."""
    worst = 0.0
    for ca, cb in zip(a, b):
        ma, mb = logs.read_metrics(ca.run_dir), logs.read_metrics(cb.run_dir)
        cols = [c for c in ma.columns if not c.startswith("time/") and ma[c].dtype.kind in "fi" and c in mb]
        if len(ma) != len(mb):
            return float("inf")
        worst = max(worst, float(np.nanmax(np.abs(ma[cols].to_numpy(float) - mb[cols].to_numpy(float)), initial=0.0)))
    return worst


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3, help="GRPO steps per run (default: 3)")
    p.add_argument("--runs", type=int, default=8, help="runs per arm (default: 8)")
    p.add_argument("--workers", type=int, default=2, help="worker processes of both arms (default: 2)")
    p.add_argument("--together", type=int, default=study.TOGETHER, help=f"runs per group (default: {study.TOGETHER})")
    p.add_argument("--repeats", type=int, default=1, help="alternating repetitions of both arms (default: 1)")
    p.add_argument("--out", type=Path, default=OUT, help=f"JSON record (default: {OUT})")
    args = p.parse_args(argv)
    for name in ("steps", "runs", "workers", "together", "repeats"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    threads = max(1, (os.cpu_count() or 2) // args.workers)
    walls: dict[str, list[float]] = {"alone": [], "together": []}
    times: dict[str, dict] = {}
    difference = None
    made: dict[str, list] = {}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench_study_") as tmp:
        for rep in range(args.repeats):
            order = ("alone", "together") if rep % 2 == 0 else ("together", "alone")
            made = {}
            for arm in order:
                out_dir = Path(tmp) / f"{arm}-{rep}"
                made[arm] = configs(args.runs, args.steps, out_dir, threads)
                walls[arm].append(_arm(made[arm], args.workers, 1 if arm == "alone" else args.together))
                print(f"repeat {rep}: {arm:<8} {walls[arm][-1]:7.1f} s", flush=True)
            if rep == 0:
                times = {arm: _times(made[arm]) for arm in made}
                difference = _max_difference(made["alone"], made["together"])
            for arm in made:
                shutil.rmtree(Path(tmp) / f"{arm}-{rep}")
    per_hour = {arm: args.runs / statistics.median(w) * 3600 for arm, w in walls.items()}
    ratio = per_hour["together"] / per_hour["alone"]
    record = {
        "bench": "study", "steps": args.steps, "runs": args.runs, "workers": args.workers, "threads_per_worker": threads,
        "together": args.together, "repeats": args.repeats, "cpu_count": os.cpu_count(),
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "settings": {k: getattr(made["alone"][0], k) for k in study.paper_plan().settings},
        "regime": study.paper_plan().regime, "methods": [c.method for c in made["alone"]],
        "runs_per_group": -(-args.runs // max(args.workers, -(-args.runs // args.together))),
        "wall_s": walls, "runs_per_hour": per_hour, "arm_times": times,
        "max_metric_difference": difference, "ratio_together_over_alone": ratio, "target": TARGET,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"runs per hour: alone {per_hour['alone']:.0f}, together {per_hour['together']:.0f}; "
          f"largest metric difference {difference:.2g}; load average {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f}")
    print(f"ratio together / alone: {ratio:.2f}x (target {TARGET:g}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
