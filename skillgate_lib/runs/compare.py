"""The comparison driver: every method x seed with the same budget, in worker processes.

A *method* is an entry of :data:`skillgate_lib.methods.METHODS`: the credit assigner it
trains with and its other settings (``skill_free``: outcome-only GRPO with no slate in the
prompt and reads disabled, what RL does without skills). Reading the runs back (which
evaluations a run reports, the ``sft`` rows) is :mod:`skillgate_lib.report.results`; its readers
are re-exported here because :func:`compare` returns their tables.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import multiprocessing as mp
import time
from pathlib import Path

import pandas as pd

from skillgate_lib import logs, paths
from skillgate_lib import methods as methods_lib
from skillgate_lib.cli import add_fields
from skillgate_lib.notebooks import progress_bar  # a widget in the lab, text lines in a terminal or a headless run
from skillgate_lib.report.results import final_metrics
from skillgate_lib.runs.protocol import threads_per_worker
from skillgate_lib.runs.train import TrainConfig, check_resume_config, train


def method_config(method: str, seed: int, run_dir: str | Path, **overrides) -> TrainConfig:
    """The :class:`TrainConfig` of one registered ``method`` and seed."""
    return TrainConfig(method=method, seed=seed, run_dir=str(run_dir), **overrides)


def compare_run_name(method: str, seed: int, lr: float | None = None) -> str:
    return f"{method}-seed{seed}" if lr is None else f"{method}-lr{lr:g}-seed{seed}"


def _steps_done(run_dir: Path) -> int:
    """GRPO steps a run has logged so far (its last training step in ``metrics.jsonl``)."""
    try:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return 0
    done = 0
    for line in lines:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a line being written right now
            continue
        if row.get("split") == "train":
            done = max(done, int(row["step"]))
    return done


def _steps_kept(run_dir: Path) -> int:
    """GRPO steps a resumed run keeps: its checkpoint's step (0 without one: the run starts over, whatever its log
    held)."""
    import torch

    path = run_dir / "checkpoint.pt"
    if not path.exists():
        return 0
    return int(torch.load(path, weights_only=False, map_location="cpu")["step"])


def train_all(configs: list[TrainConfig], workers: int, resume: bool, progress: bool, desc: str,
             together: int = 1, eval_cache: str | Path | None = None) -> None:
    """Train ``configs`` in ``workers`` spawned processes; a finished run (final adapter saved) is skipped.

    ``together > 1``: the runs are dealt into groups of at most ``together`` (at least one group
    per worker), each trained in one process by :func:`skillgate_lib.runs.multirun.train_together`;
    1: each run alone in its process. The progress bar counts GRPO steps over every run (read
    from the runs' logs every couple of seconds), so its rate and ETA cover the whole batch of runs.
    ``eval_cache``: a folder where runs from one warm start share their step-0 evaluation
    (:mod:`skillgate_lib.runs.warm_eval`).
    """
    finished = [c for c in configs if (Path(c.run_dir) / "adapter" / "adapter_config.json").exists()]
    for c in finished:  # reused only when it is the run asked for (same settings, same model weights)
        check_resume_config(Path(c.run_dir), c)
    todo = [c for c in configs if c not in finished]
    if not todo:
        return
    initial = sum(min(_steps_kept(Path(c.run_dir)), c.steps) for c in todo)  # resumed runs: rate counts new steps
    bar = progress_bar(total=sum(c.steps for c in todo), initial=initial, desc=f"{desc} ({len(todo)} runs)",
               disable=not progress, unit="step")
    if together < 1:
        raise ValueError(f"together must be >= 1, got {together}")
    groups = max(workers, -(-len(todo) // together)) if together > 1 else len(todo)
    size = -(-len(todo) // groups)
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(_train_quietly, todo[i: i + size], resume, [methods_lib.get(c.method) for c in todo[i: i + size]],
                               eval_cache) for i in range(0, len(todo), size)]
        pending = set(futures)
        while pending:
            done, pending = cf.wait(pending, timeout=2.0, return_when=cf.FIRST_EXCEPTION)
            for fut in done:
                fut.result()  # a failed run stops the comparison with its own error
            # never backwards: a run restarting from its checkpoint drops the steps its log held past it
            bar.update(max(0, sum(min(_steps_done(Path(c.run_dir)), c.steps) for c in todo) - bar.n))
    bar.close()


def compare(methods=None, seeds=(0, 1, 2), out_dir: str | Path = paths.BUILD_DIR / "runs" / "compare",
            workers: int = 2, resume: bool = False, progress: bool = True, lrs: tuple[float, ...] = (),
            **overrides) -> pd.DataFrame:
    """Every method x seed with the same budget and settings; runs in ``workers`` processes.

    Without ``lrs`` each run writes ``out_dir/<method>-seed<seed>/`` at the configured lr.
    With ``lrs``, every method gets the same search: one run per lr on the first seed,
    the lr with the best final held-out success is kept (ties: the smaller lr), then the
    other seeds run at it; runs are ``out_dir/<method>-lr<lr>-seed<seed>/`` and the choice
    is written to ``out_dir/lr_selection.json``. ``methods``: default every method of the
    registry's default comparison (:func:`skillgate_lib.methods.compared`). An interrupted comparison resumes: finished
    runs are skipped, unfinished ones continue from their checkpoints. The machine's cores
    are split among the workers. Returns :func:`final_metrics` of the selected runs.
    """
    methods = methods_lib.compared() if methods is None else tuple(methods)
    out_dir = Path(out_dir)
    threads = threads_per_worker(workers)
    if not lrs:
        configs = [method_config(m, s, out_dir / compare_run_name(m, s), threads=threads, **overrides)
                   for m in methods for s in seeds]
        train_all(configs, workers, resume, progress, "comparison runs")
        return final_metrics(out_dir)
    overrides.pop("lr", None)
    first, rest = seeds[0], seeds[1:]
    search = [method_config(m, first, out_dir / compare_run_name(m, first, lr), threads=threads, lr=lr, **overrides)
              for m in methods for lr in lrs]
    train_all(search, workers, resume, progress, f"lr search (seed {first})")
    chosen = select_lrs(out_dir, methods, lrs, first)
    (out_dir / "lr_selection.json").write_text(json.dumps(chosen, indent=1) + "\n")
    configs = [method_config(m, s, out_dir / compare_run_name(m, s, chosen[m]["lr"]), threads=threads, lr=chosen[m]["lr"],
                             **overrides) for m in methods for s in rest]
    train_all(configs, workers, resume, progress, "seeds")
    return final_metrics(out_dir, selected_only=True)


def select_lrs(out_dir: str | Path, methods, lrs, seed: int) -> dict[str, dict]:
    """Per method, the lr whose seed-``seed`` run has the best final held-out success."""
    chosen = {}
    for m in methods:
        scores = {}
        for lr in lrs:
            ev = logs.read_metrics(Path(out_dir) / compare_run_name(m, seed, lr)).query("split == 'eval'").sort_values("step")
            scores[lr] = float(ev["eval/success"].iloc[-1])
        best = max(sorted(scores), key=lambda lr: scores[lr])
        chosen[m] = {"lr": best, "success_by_lr": {f"{lr:g}": v for lr, v in scores.items()}}
    return chosen


def _train_quietly(cfgs: list[TrainConfig], resume: bool, methods: list[methods_lib.Method] | None = None,
                   eval_cache: str | Path | None = None) -> None:
    """Train ``cfgs`` in this (spawned) worker: one alone, several together; each resumes when its directory holds a run."""
    for method in methods or []:
        if method.name not in methods_lib.METHODS:  # registered at run time in the parent: the spawned worker lacks it
            methods_lib.register(method)
    resumes = [resume or (Path(c.run_dir) / "metrics.jsonl").exists() for c in cfgs]
    if len(cfgs) == 1:
        train(cfgs[0], progress=False, resume=resumes[0], eval_cache=eval_cache)
    else:
        from skillgate_lib.runs.multirun import train_together

        train_together(cfgs, resume=resumes, eval_cache=eval_cache)


#: Settings the command line passes to every run alike.
SHARED = ("steps", "lr", "prompts_per_step", "group_size", "eval_tasks", "eval_every", "log_train_every", "model",
          "step_failure", "kl_coef", "regime", "lookalike_agreement", "filter_groups", "max_draws", "selector_coef")


def build_parser() -> argparse.ArgumentParser:
    """The ``compare`` command line; ``--methods`` chooses among the registry's trainable methods."""
    parser = argparse.ArgumentParser(prog="python -m skillgate_lib compare", description=compare.__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=list(methods_lib.compared()), choices=methods_lib.trainable())
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--out-dir", type=Path, default=paths.BUILD_DIR / "runs" / "compare")
    parser.add_argument("--workers", type=int, default=2)
    shared = argparse.ArgumentParser(add_help=False)
    add_fields(shared, TrainConfig)
    for action in shared._actions:
        if action.dest in SHARED:  # typed and documented as ``train`` has them, the same for every run
            parser._add_action(action)
    parser.add_argument("--lrs", nargs="+", type=float, default=[],
                        help="learning-rate search: each value on the first seed, best held-out success kept")
    parser.add_argument("--domains", nargs="+", default=[], help="training domains (default: all)")
    parser.add_argument("--eval-domains", nargs="+", default=[], help="evaluation domains (default: all)")
    parser.add_argument("--resume", action="store_true")
    return parser


def compare_main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    start = time.perf_counter()
    table = compare(args.methods, args.seeds, args.out_dir, args.workers, args.resume, lrs=tuple(args.lrs),
                    domains=tuple(args.domains), eval_domains=tuple(args.eval_domains),
                    **{name: getattr(args, name) for name in SHARED})
    cols = ["eval/success", "eval/oracle_read", "eval/misleading_read", "eval/reads"]
    print(table.groupby("method")[cols].agg(["mean", "std"]).round(3).to_string())
    print(f"wall time {time.perf_counter() - start:.0f}s")
    return 0


main = compare_main
