"""The choice measure on SmolLM2: each prompt once for its slate (a tree-masked row) against one row per name.

    python benchmarks/bench_choice.py [--prompts 16] [--repeats 3] [--threads 2] [--model smollm2-sft]

:func:`skillgate_lib.runs.choice.oracle_choice` scores, after each validation prompt, every slate
name's read call teacher-forced. Since 2026-12-06 a prompt and the call's opener run once and the 16
names follow them in one row under a tree attention mask (:func:`~skillgate_lib.runs.choice.tree_scores`).
Before, each name was its own row (prompt shared through a copied key/value cache,
:func:`~skillgate_lib.policy.batching.response_logprobs`), scoring the whole call. Both sides here
score ``--prompts`` validation prompts of ``paper_f30`` under bf16 autocast where the model is
pretrained (fp32 for the embedded model), 32 prompts a forward for the old side (its default then)
and 4 for the new, alternating side by side; reports medians, the ratio, and the largest difference
between the two sides' probabilities. Writes ``build/bench/choice.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

OUT = Path("build/bench/choice.json")


def per_name_rows(model, tokenizer, env, pairs, batch: int = 32) -> np.ndarray:
    """The measure as computed before the tree: one row per slate name, whole call packed, the prompt's cache copied."""
    from skillgate_lib.policy.batching import pack, response_logprobs
    from skillgate_lib.runs.choice import call_episode

    out = []
    with torch.no_grad():
        for start in range(0, len(pairs), batch):
            rows, sizes = [], []
            for g, (task, slate) in enumerate(pairs[start: start + batch]):
                prompt = tokenizer(env.prompt(task, slate), add_special_tokens=False)["input_ids"]
                rows += [call_episode(env, tokenizer, prompt, task, slate, g, n, "name+close") for n in slate.names]
                sizes.append(len(slate.names))
            packed = pack(rows, tokenizer.pad_token_id)
            logp = response_logprobs(model, packed)
            scores = (logp * packed["response_mask"]).sum(1).double()
            at = 0
            for (task, slate), k in zip(pairs[start: start + batch], sizes):
                out.append(float(torch.softmax(scores[at: at + k], 0)[slate.names.index(slate.oracle)]))
                at += k
    return np.asarray(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-sft", help="warm start (default smollm2-sft)")
    p.add_argument("--regime", default="paper_f30", help="regime (default paper_f30)")
    p.add_argument("--prompts", type=int, default=16, help="validation prompts (default 16)")
    p.add_argument("--repeats", type=int, default=3, help="alternating repetitions (default 3)")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    p.add_argument("--out", type=Path, default=OUT, help=f"JSON record (default {OUT})")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    from skillgate_lib.policy import devices
    from skillgate_lib.policy.models import load_policy
    from skillgate_lib.runs.choice import oracle_choice
    from skillgate_lib.runs.evaluate import heldout_pairs
    from skillgate_lib.runs.train import TrainConfig, make_env, setup_training

    cfg = TrainConfig(model=args.model, regime=args.regime, run_dir="build/bench/choice_run")
    base, tokenizer = load_policy(args.model)
    model = setup_training(base, cfg).model.eval()
    env = make_env(cfg, False, tokenizer)
    pairs = heldout_pairs(env, args.prompts, "val")
    cpu = torch.device("cpu")
    sides = {"per-name rows": lambda: per_name_rows(model, tokenizer, env, pairs),
             "tree": lambda: oracle_choice(model, tokenizer, env, pairs)}
    times, probs = {k: [] for k in sides}, {}
    for rep in range(args.repeats):
        for name in (list(sides) if rep % 2 == 0 else list(sides)[::-1]):
            with devices.autocast(cpu, cfg.bf16):
                t0 = time.perf_counter()
                probs[name] = sides[name]()
                times[name].append(time.perf_counter() - t0)
            print(f"repeat {rep} {name:>13}: {times[name][-1]:6.2f} s", flush=True)
    median = {k: statistics.median(v) for k, v in times.items()}
    record = {"model": args.model, "regime": args.regime, "prompts": args.prompts, "threads": args.threads,
              "bf16": cfg.bf16, "seconds": times, "median_s": median,
              "speedup": median["per-name rows"] / median["tree"],
              "max_abs_diff": float(np.abs(probs["tree"] - probs["per-name rows"]).max())}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"per-name rows {median['per-name rows']:.2f} s, tree {median['tree']:.2f} s for {args.prompts} prompts: "
          f"{record['speedup']:.2f}x; largest difference in P(oracle | slate) {record['max_abs_diff']:.4f} "
          f"({'bf16' if cfg.bf16 else 'fp32'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
