"""What the study (:mod:`skillgate_lib.runs.study`) and the rate study (:mod:`skillgate_lib.runs.speed`) share:
a plan fixed before its runs, a grid grown at an edge, the test records, the export and the end of the command,
and the timings their wall-time estimates start from."""

from __future__ import annotations

import concurrent.futures as cf
import json
import multiprocessing as mp
import os
import time
from pathlib import Path

from skillgate_lib import logs
from skillgate_lib.notebooks import progress_bar

#: Seconds a step and an evaluation of 256 instances take on this kind of machine (one thread, two jobs at once).
TIMINGS = {"easy": (1.0, 6.0), "paper": (1.0, 6.0), "paper_note4": (1.1, 7.0), "paper_note8": (1.3, 8.0),
           "paper_echo_f30": (2.6, 20.0), "paper_note8_h68": (1.8, 12.0),
           # smollm2-sft, bf16: about 75 s a 4 x 8 step and 3 min an evaluation (sampled and teacher-forced) on two
           # threads (a 3-step timing run); one thread taken as half the speed
           "paper_f30": (150.0, 360.0)}


def check_plan(plan, out_dir: Path) -> None:
    """Write ``plan.json`` (``plan.to_json()``) on the first call; afterwards refuse any other plan (the protocol is
    fixed up front)."""
    path = out_dir / "plan.json"
    if path.exists():
        if diff := plan_fields_differing(path, plan):
            raise ValueError(f"{path}: the study was started with another plan (fields {', '.join(diff)} differ); "
                             "a plan is fixed before its runs: choose another --out-dir")
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plan.to_json(), indent=1) + "\n")


def plan_fields_differing(path: Path, plan) -> list[str]:
    """The fields in which the plan written at ``path`` differs from ``plan.to_json()`` (empty when they agree)."""
    written, asked = json.loads(Path(path).read_text()), plan.to_json()
    return sorted(k for k in {*written, *asked} if written.get(k) != asked.get(k))


def edge_extension(values: list[float], best: float) -> float | None:
    """The next value beyond the edge ``best`` sits on (the grid's end ratio, 3 significant digits), or None when
    ``best`` is interior (or the grid has one value)."""
    values = sorted(values)
    if len(values) < 2:
        return None
    if best == values[-1]:
        return float(f"{values[-1] * values[-1] / values[-2]:.3g}")
    if best == values[0]:
        return float(f"{values[0] * values[0] / values[1]:.3g}")
    return None


def evaluate_on_test(run_dir: str | Path, regime: str, n: int, model: str | None = None, threads: int = 1,
                     device: str = "auto") -> dict:
    """A run's final adapter (or ``model`` alone) on ``n`` test instances of ``regime``: the ``test.json`` record."""
    import torch

    from skillgate_lib.env import regimes
    from skillgate_lib.policy import devices
    from skillgate_lib.policy.models import is_embedded, load_policy
    from skillgate_lib.runs.evaluate import evaluate, load_adapter, summarize

    torch.set_num_threads(threads)
    from skillgate_lib.env.chat import rendered

    config: dict = {}
    if model is None:
        policy, tokenizer, config = load_adapter(run_dir)
        temperature = float(config.get("temperature", 1.0))
    else:
        (policy, tokenizer), temperature = load_policy(model), 1.0
    r = regimes.get(regime)
    env = rendered(r.env(), tokenizer, config.get("render", "auto"))
    t0 = time.perf_counter()
    dev = devices.resolve(device)
    policy = policy.to(dev)
    # the run's own precision (a warm start's: the default for its model)
    bf16 = devices.resolve_bf16(config.get("bf16"), dev, is_embedded(model or config.get("model", "tiny")))
    devices.check_bf16(dev, bf16)
    with devices.autocast(dev, bf16):
        summary = summarize(evaluate(policy, tokenizer, env, n, r.max_new_tokens, temperature=temperature,
                                     split="test"), prefix="test")
    return {"split": "test", "tasks": n, "regime": regime, "bf16": bf16, "seconds": time.perf_counter() - t0, **summary}


def _test_eval(run_dir: str, regime: str, n: int, model: str | None, threads: int, device: str = "auto") -> None:
    """:func:`evaluate_on_test`, written atomically to ``run_dir/test.json``."""
    record = evaluate_on_test(run_dir, regime, n, model, threads, device)
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    logs.atomic_write_bytes(Path(run_dir) / "test.json", (json.dumps(record, indent=1) + "\n").encode())


def threads_per_worker(workers: int, threads: int | None = None) -> int:
    """Torch threads for each of ``workers`` jobs at once: ``threads`` where given, else the cores split among them."""
    return threads or max(1, (os.cpu_count() or 2) // workers)


def write_test_records(jobs: list[tuple], workers: int, progress: bool) -> None:
    todo = [j for j in jobs if not (Path(j[0]) / "test.json").exists()]
    if not todo:
        return
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(_test_eval, *j) for j in todo]
        for fut in progress_bar(cf.as_completed(futures), total=len(futures), desc="test set", disable=not progress):
            fut.result()


#: What a run of a study keeps in the repository (no checkpoints, adapters or trajectory tables).
KEPT = ("config.json", "metrics.jsonl", "test.json")


def export(study_dir: str | Path, dest: str | Path) -> int:
    """Copy a study's ``plan.json``, ``selection.json`` and each run's :data:`KEPT` files to ``dest``; returns the
    files copied. Files already in ``dest`` are replaced only by a run's newer copy (the same path)."""
    import shutil

    study_dir, dest = Path(study_dir), Path(dest)
    n = 0
    for src in sorted(study_dir.glob("*.json")) + sorted(p for d in study_dir.iterdir() if d.is_dir()
                                                        for p in d.iterdir() if p.name in KEPT):
        target = dest / src.relative_to(study_dir)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, target)
        n += 1
    return n


def end_command(chosen: dict, out: Path, export_to: Path | None, t0: float) -> int:
    """The end of a study command: print the selection, export the study when asked, print the wall time."""
    print(json.dumps(chosen, indent=1))
    if export_to:
        print(f"exported {export(out, export_to)} files to {export_to}")
    print(f"wall time {(time.perf_counter() - t0) / 60:.1f} min")
    return 0
