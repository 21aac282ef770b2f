"""Check the Gradient Share's logit proxy against the parameters, on a warm start's own rollouts.

For each (model, regime) pair: roll out ``--prompts`` validation prompts x ``--group-size``
from the warm start at temperature 1 (no update), put the run's LoRA adapters on it (as a
GRPO run's step 0 sees them), then for every policy token one backward pass over the LoRA
parameters (:func:`skillgate_lib.policy.gradients.parameter_gradients`). Writes per pair
``OUT/<model>-<regime>/rollouts.csv`` (per-rollout sums) and ``summary.json``
(:func:`skillgate_lib.policy.gradients.proxy_summary`: the rank correlation of the proxy with the
per-token parameter-gradient norm, and the name's share three ways), and ``OUT/summary.csv``
over the pairs.

Usage::

    python scripts/gradient_proxy_check.py --pairs tiny:paper tiny-echo-one:paper_echo_f30 --out data/runs/diagnosis/gradient_proxy
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd
import torch

from skillgate_lib.env import regimes
from skillgate_lib.policy.gradients import parameter_gradients, proxy_summary
from skillgate_lib.policy.models import load_policy
from skillgate_lib.policy.rollout import generate
from skillgate_lib.runs.train import TrainConfig, setup_training
from skillgate_lib.seeding import stream_seed


def check_pair(model_name: str, regime_name: str, prompts: int, group_size: int, seed: int, out: Path) -> dict:
    regime = regimes.get(regime_name)
    env = regime.env()
    base, tokenizer = load_policy(model_name)
    tasks = env.sample_tasks(prompts, split="val", seed=stream_seed(seed, 0, 7))
    items = [(task, env.slate(task, seed=stream_seed(seed, 0, 8, g)), g) for g, task in enumerate(tasks)
             for _ in range(group_size)]
    episodes = generate(base, tokenizer, env, items, regime.max_new_tokens, 1.0, torch.Generator().manual_seed(seed))
    trainable = setup_training(base, TrainConfig(regime=regime_name, seed=seed, run_dir=str(out)))
    t0 = time.perf_counter()
    tokens, rollouts = parameter_gradients(trainable.model, trainable.params, episodes, tokenizer.pad_token_id)
    summary = {"model": model_name, "regime": regime_name, "seed": seed, "backward_s": round(time.perf_counter() - t0, 1),
               **proxy_summary(tokens, rollouts)}
    out.mkdir(parents=True, exist_ok=True)
    rollouts.to_csv(out / "rollouts.csv", index=False)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", nargs="+", required=True, metavar="MODEL:REGIME", help="warm start and regime pairs")
    p.add_argument("--prompts", type=int, default=32, help="validation prompts per pair (default 32)")
    p.add_argument("--group-size", type=int, default=8, help="rollouts per prompt (default 8: 256 rollouts)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = []
    for pair in args.pairs:
        model_name, sep, regime_name = pair.partition(":")
        if not sep:
            p.error(f"--pairs: {pair!r} is not MODEL:REGIME")
        rows.append(check_pair(model_name, regime_name, args.prompts, args.group_size, args.seed,
                               args.out / f"{model_name}-{regime_name}"))
        print(json.dumps(rows[-1]), flush=True)
    pd.DataFrame(rows).to_csv(args.out / "summary.csv", index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
