"""The GRPO update alone (forward + backward of the response log-probs) at each ``length_buckets``.

    python benchmarks/bench_update.py [--new-tokens 160] [--force-length] [--batches 3] [--repeats 2]
                                      [--buckets 1 2 4 8] [--threads 2]

Rolls out ``--batches`` batches of the GRPO bench's shape (8 prompts x 8 samples of the
committed warm start, LoRA on q/k/v/o, temperature 1; ``--force-length`` forbids EOS until
``--new-tokens``), then times ``response_logprobs(..., buckets=b)`` plus its backward on each
batch, for every ``b``, ``--repeats`` times round-robin. Two figures per ``b``:

* **first pass**: the median over the batches of the first time each batch's shapes are
  run, which is what every step of a training run sees (each step's batch has new shapes;
  large fresh allocations cost page faults on this machine). One more batch is run first at
  every bucket count, untimed, so that no count pays the process's own warm-up. Forced-length
  batches all have the same shapes, so there the first pass is a repeat too;
* **steady**: the median over the later repeats, the same shapes again.

Writes ``build/bench/update.json``. The figures are timings of one machine: compare ``b``
values measured side by side, not across runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from skillgate_lib import paths
from skillgate_lib.env import SkillSlateEnv, load_tokenizer
from skillgate_lib.policy import models, rollout
from skillgate_lib.policy.batching import pack, response_logprobs
from skillgate_lib.runs import train

OUT = paths.BUILD_DIR / "bench" / "update.json"


def run(new_tokens: int, force_length: bool, n_batches: int, repeats: int, buckets: list[int], threads: int) -> dict:
    torch.set_num_threads(threads)
    env, tokenizer = SkillSlateEnv(), load_tokenizer()
    cfg = train.TrainConfig(prompts_per_step=8, group_size=8, max_new_tokens=new_tokens, threads=threads,
                            kl_coef=0.0, filter_groups=False)
    model, _, opt, _, _ = train.setup_training(models.load_policy("tiny")[0], cfg)
    batches = []
    for s in range(n_batches + 1):  # batch 0: the untimed warm-up
        episodes = rollout.generate(model, tokenizer, env, train.step_items(env, cfg, s), new_tokens, 1.0,
                                    torch.Generator().manual_seed(s), min_new_tokens=new_tokens if force_length else 0)
        batches.append(pack(episodes, tokenizer.pad_token_id))
    model.train()
    warmup, batches = batches[0], batches[1:]
    for b in buckets:
        (response_logprobs(model, warmup, buckets=b) * warmup["response_mask"]).sum().backward()
        opt.zero_grad(set_to_none=True)
    times: dict[int, list[list[float]]] = {b: [] for b in buckets}  # per b: one list of batch times per repeat
    for _ in range(repeats):
        for b in buckets:
            row = []
            for batch in batches:
                t0 = time.perf_counter()
                logp = response_logprobs(model, batch, buckets=b)
                (logp * batch["response_mask"]).sum().backward()
                opt.zero_grad(set_to_none=True)
                row.append(time.perf_counter() - t0)
            times[b].append(row)
    shapes = [tuple(b["input_ids"].shape) for b in batches]
    return {"new_tokens": new_tokens, "force_length": force_length, "threads": threads, "batch_shapes": shapes,
            "by_buckets": {b: {"first_pass_s": statistics.median(t[0]),
                               "steady_s": statistics.median([x for r in t[1:] for x in r]) if len(t) > 1 else None,
                               "raw_s": t} for b, t in times.items()}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--new-tokens", type=int, default=160, help="response-token cap (default 160)")
    p.add_argument("--force-length", action="store_true", help="forbid EOS until --new-tokens")
    p.add_argument("--batches", type=int, default=3, help="distinct rollout batches (default 3)")
    p.add_argument("--repeats", type=int, default=2, help="passes over the batches per bucket count (default 2)")
    p.add_argument("--buckets", type=int, nargs="+", default=[1, 2, 4, 8], help="length_buckets values (default 1 2 4 8)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--out", type=Path, default=OUT, help=f"result JSON (default {OUT})")
    a = p.parse_args(argv)
    if a.batches < 1 or a.repeats < 1 or min(a.buckets) < 1:
        p.error("--batches, --repeats and every --buckets value must be >= 1")
    r = run(a.new_tokens, a.force_length, a.batches, a.repeats, a.buckets, a.threads)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(r, indent=2) + "\n")
    print(f"update (forward + backward), 64 rows, {a.new_tokens} new tokens{' (forced)' if a.force_length else ''}, "
          f"{a.threads} threads, batch shapes {r['batch_shapes']}")
    print(f"{'buckets':>8} {'first pass s':>13} {'steady s':>9}")
    for b, v in r["by_buckets"].items():
        steady = f"{v['steady_s']:9.3f}" if v["steady_s"] is not None else f"{'-':>9}"
        print(f"{b:8d} {v['first_pass_s']:13.3f} {steady}")
    print(f"-> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
