"""GRPO step times of real training runs on one device: the audit configuration and a wide batch.

    python benchmarks/bench_device.py --device cuda [--bf16] [--steps 10] [--configs audit wide] --out F.json

Each configuration is a real :func:`skillgate_lib.runs.train.train` run (rollouts with dynamic
sampling, credit, update, KL; evaluation at the end on ``--eval-tasks`` instances) written to a
temporary directory, then read back from its ``metrics.jsonl``:

* ``audit``: the committed audit run's settings (``paper_echo_f30`` from ``tiny-echo-one``, outcome
  credit, 4 prompts x 8 rollouts, lr 2e-3): the configuration of the rate study's runs;
* ``wide``: the same with 32 prompts x 8 rollouts (256 rollouts a step), what a GPU is for.

Reports per configuration the median ``time/step_s`` and ``time/generate_s`` over the steps after
the first (a warm-up), the rollouts per second, and the device's name; writes ``--out`` JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

from skillgate_lib.policy import devices
from skillgate_lib.runs.train import TrainConfig, train

CONFIGS = {
    "audit": dict(method="outcome", regime="paper_echo_f30", model="tiny-echo-one", prompts_per_step=4, group_size=8,
                  lr=2e-3),
    "wide": dict(method="outcome", regime="paper_echo_f30", model="tiny-echo-one", prompts_per_step=32, group_size=8,
                 lr=2e-3),
}


def time_config(name: str, steps: int, device: str, bf16: bool, eval_tasks: int, threads: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = TrainConfig(**CONFIGS[name], steps=steps, eval_every=steps, eval_tasks=eval_tasks, threads=threads,
                          device=device, bf16=bf16, checkpoint_every=steps, log_train_every=steps, run_dir=tmp)
        t0 = time.perf_counter()
        metrics = train(cfg, progress=False)
        wall = time.perf_counter() - t0
    rows = metrics[metrics["split"] == "train"].sort_values("step")
    timed = rows.iloc[1:] if len(rows) > 1 else rows
    step_s = statistics.median(timed["time/step_s"])
    rollouts = float((timed["groups/sampled"] * cfg.group_size).median())
    ev = metrics[metrics["split"] == "eval"].iloc[-1]
    return {"config": name, **CONFIGS[name], "steps": steps, "device": str(devices.resolve(device)), "bf16": bf16,
            "median_step_s": round(step_s, 4), "median_generate_s": round(statistics.median(timed["time/generate_s"]), 4),
            "rollouts_per_step": rollouts, "rollouts_per_s": round(rollouts / step_s, 2), "wall_s": round(wall, 1),
            "step_s": [round(x, 4) for x in rows["time/step_s"]], "eval_success": float(ev["eval/success"]),
            "eval_oracle_read": float(ev["eval/oracle_read"])}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto", help="auto, cpu or cuda (default auto)")
    p.add_argument("--bf16", action="store_true", help="also time each configuration with bf16 autocast (CUDA)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--eval-tasks", type=int, default=64, help="held-out instances of the final evaluation")
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    dev = devices.resolve(args.device)
    record = {"device": str(dev), "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor(),
              "torch": torch.__version__, "python": platform.python_version(), "threads": args.threads, "runs": []}
    for name in args.configs:
        for bf16 in ((False, True) if args.bf16 else (False,)):
            r = time_config(name, args.steps, args.device, bf16, args.eval_tasks, args.threads)
            record["runs"].append(r)
            print(f"{name:<6} bf16={bf16!s:<5} {r['device']}: median step {r['median_step_s']:.3f} s "
                  f"(generate {r['median_generate_s']:.3f} s), {r['rollouts_per_s']:.1f} rollouts/s", flush=True)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
