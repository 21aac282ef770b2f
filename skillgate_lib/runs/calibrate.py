"""How long a study's step and evaluation take on this machine, measured instead of assumed.

``speed --dry-run --calibrate`` (and :func:`calibrate` from Python) opens the study's first run in a
temporary folder, trains a few GRPO steps of it from its warm start with the study's own settings and
threads, and times them and one held-out evaluation (sampled trials and the teacher-forced choice); the
study's wall time is then estimated from those seconds instead of the table
:data:`skillgate_lib.runs.protocol.TIMINGS`. Nothing is kept: the folder is removed afterwards.
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import time

from skillgate_lib.runs.train import TrainConfig, TrainingRun, grpo_step


def calibrate(cfg: TrainConfig, steps: int = 3, eval_tasks: int = 64, progress: bool = True) -> dict:
    """Seconds of one GRPO step (median of ``steps``) and of one evaluation scaled to 256 instances, for ``cfg``.

    The evaluation runs on ``eval_tasks`` validation instances (its seconds scaled by ``256 / eval_tasks``; the
    episodes of an evaluation are independent, so its time grows with their number). Returns the per-step seconds,
    ``step_s``, ``eval_s`` and the conditions they were measured under (model, threads, device).
    """
    if steps < 1 or eval_tasks < 1:
        raise ValueError(f"calibrate: steps and eval_tasks must be >= 1, got {steps} and {eval_tasks}")
    with tempfile.TemporaryDirectory(prefix="skillgate-calibrate-") as tmp:
        run_cfg = dataclasses.replace(cfg, run_dir=tmp, steps=steps, eval_tasks=eval_tasks, report_to=())
        run = TrainingRun(run_cfg)
        seconds = []
        for step in range(steps):
            t0 = time.perf_counter()
            grpo_step(run.model, run.tokenizer, run.env, run.opt, run.params, run_cfg, run.ccfg, step, run.skill_values)
            seconds.append(time.perf_counter() - t0)
            if progress:
                print(f"calibration: step {step + 1}/{steps} took {seconds[-1]:.1f} s", flush=True)
        t0 = time.perf_counter()
        run.log_eval(steps, run.evaluate())
        eval_seconds = time.perf_counter() - t0
        if progress:
            print(f"calibration: an evaluation of {eval_tasks} instances took {eval_seconds:.1f} s", flush=True)
    return {"model": cfg.model, "regime": cfg.regime, "threads": cfg.threads, "device": cfg.device,
            "step_seconds": [round(s, 2) for s in seconds], "step_s": statistics.median(seconds),
            "eval_tasks": eval_tasks, "eval_s": eval_seconds * 256 / eval_tasks}
