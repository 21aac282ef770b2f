"""Rollouts of several SmolLM2 runs decoded in one batch against one run after another, side by side.

    python benchmarks/bench_together_smollm2.py [--runs 4] [--prompts 4] [--group 8] [--repeats 2] [--threads 2]

A rate study of the pretrained warm start spends most of a GRPO step generating (4 x 8 rollouts of
the chat rendering). :func:`skillgate_lib.runs.multirun.generate_together` decodes the rollouts of
``--runs`` runs (each ``smollm2-sft`` with its own fresh-then-perturbed LoRA, as runs of one study
are after a few steps) in one batch with :class:`~skillgate_lib.policy.decoder.MultiLlama`; the
other side rolls each run out alone with the trainer's own :func:`~skillgate_lib.policy.rollout.generate`.
Both sides see the same items (``--prompts`` tasks of ``paper_f30`` x ``--group`` rollouts per run),
bf16 autocast, ``--threads`` torch threads; they alternate (``alone, together``, then
``together, alone``, ...) so that a load that comes and goes falls on both. Reports each side's median
seconds and generated tokens, and the ratio of response tokens per second. Writes
``build/bench/together_smollm2.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import time
from pathlib import Path

import torch

OUT = Path("build/bench/together_smollm2.json")


def _runs(n: int):
    """``n`` trainable copies of ``smollm2-sft`` (the trainer's LoRA), each adapter nudged by its own seed."""
    from skillgate_lib.policy.models import load_policy
    from skillgate_lib.runs.train import TrainConfig, setup_training

    base, tokenizer = load_policy("smollm2-sft")
    models = []
    for k in range(n):
        cfg = TrainConfig(model="smollm2-sft", regime="paper_f30", seed=k, bf16=True, run_dir="build/bench/t")
        model = setup_training(copy.deepcopy(base), cfg).model.eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 1e-3, generator=torch.Generator().manual_seed(k))
        models.append(model)
    return models, tokenizer, cfg


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=4, help="runs decoded together (default 4)")
    p.add_argument("--prompts", type=int, default=4, help="tasks per run (default 4)")
    p.add_argument("--group", type=int, default=8, help="rollouts per task (default 8)")
    p.add_argument("--repeats", type=int, default=2, help="alternating repetitions of both sides (default 2)")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    p.add_argument("--out", type=Path, default=OUT, help=f"JSON record (default {OUT})")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    from skillgate_lib.policy import devices
    from skillgate_lib.policy.rollout import Segment, generate
    from skillgate_lib.runs.multirun import generate_together
    from skillgate_lib.runs.train import make_env

    models, tokenizer, cfg = _runs(args.runs)
    env = make_env(cfg, tokenizer=tokenizer)
    tasks = env.sample_tasks(args.prompts, split="train", seed=0)
    items = [(t, env.slate(t, seed=k), k) for k, t in enumerate(tasks) for _ in range(args.group)]
    cpu = torch.device("cpu")

    def segments(rep: int):
        return [Segment(env, items, torch.Generator().manual_seed(1000 * rep + k)) for k in range(args.runs)]

    def alone(rep: int):
        with torch.inference_mode(), devices.autocast(cpu, True):
            return [generate(m, tokenizer, s.env, s.items, cfg.max_new_tokens, cfg.temperature, s.generator)
                    for m, s in zip(models, segments(rep))]

    def together(rep: int):
        with devices.autocast(cpu, True):
            return generate_together(models, tokenizer, segments(rep), cfg.max_new_tokens, cfg.temperature)

    load_before = list(os.getloadavg())
    sides = {"alone": alone, "together": together}
    times = {k: [] for k in sides}
    tokens = {k: [] for k in sides}
    for rep in range(args.repeats):
        for name in (("alone", "together") if rep % 2 == 0 else ("together", "alone")):
            t0 = time.perf_counter()
            episodes = sides[name](rep)
            times[name].append(time.perf_counter() - t0)
            tokens[name].append(sum(len(e.response_ids) for seg in episodes for e in seg))
            print(f"repeat {rep} {name:>8}: {times[name][-1]:6.1f} s, {tokens[name][-1]} response tokens", flush=True)
    record = {"runs": args.runs, "prompts": args.prompts, "group": args.group, "threads": args.threads,
              "repeats": args.repeats, "model": "smollm2-sft", "regime": "paper_f30", "bf16": True,
              "seconds": times, "response_tokens": tokens,
              "load_average_before": load_before, "load_average_after": list(os.getloadavg()),
              "median_s": {k: statistics.median(v) for k, v in times.items()},
              "tokens_per_s": {k: statistics.median([n / t for n, t in zip(tokens[k], times[k])]) for k in sides}}
    record["ratio_tokens_per_s"] = record["tokens_per_s"]["together"] / record["tokens_per_s"]["alone"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"alone {record['tokens_per_s']['alone']:.0f} tok/s, together {record['tokens_per_s']['together']:.0f} tok/s: "
          f"ratio {record['ratio_tokens_per_s']:.2f}x ({args.runs} runs, {args.prompts} x {args.group} rollouts each)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
