"""The kit's update alone on SmolLM2: forward and backward of the response log-probabilities, by length buckets.

    python benchmarks/bench_update_smollm2.py [--rows 8] [--buckets 1 2 4] [--repeats 3] [--threads 2]

The GRPO step record (``records/grpo_step_smollm2.json``) found the kit's update 2.3x slower than TRL's
at 1 x 8 rows (33 s against 15 s a step). The kit runs the rows in ``TrainConfig.length_buckets``
groups of similar response length (default 4), so at 8 rows each forward sees 2 rows. This bench
times exactly that forward and backward (``policy.batching.response_logprobs`` under bf16
autocast, the trainer's default LoRA on ``smollm2-sft``: rank 8 on q, k, v and o) on ``--rows``
chat demonstrations of ``paper`` (mixed reads, so lengths differ as a step's do), for each
``--buckets`` setting, the settings interleaved repeat by repeat so a load that comes and goes falls on
all of them. The first setting is the first ``--buckets`` with the frozen weights stored in fp32 (autocast
casting them on every call, as before a bf16 run stored them in bf16); the others are the trainer's
set-up. Reports the median seconds per setting and each setting's median speed-up over the first.
Writes ``build/bench/update_smollm2.json`` (or ``--out``). The embedded model's sibling is ``bench_update.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

OUT = Path("build/bench/update_smollm2.json")


def _batch(rows: int, seed: int = 0):
    """``rows`` chat demonstrations of ``paper`` (one read each: the oracle, a look-alike or a relevant skill),
    packed as the trainer packs a step's episodes, and the model with fresh LoRA on it."""
    from skillgate_lib.env import regimes
    from skillgate_lib.env.chat import rendered
    from skillgate_lib.policy.batching import pack
    from skillgate_lib.policy.lora_warmstart import chat_demo_episode
    from skillgate_lib.policy.models import load_policy
    from skillgate_lib.runs.train import TrainConfig, setup_training

    base, tokenizer = load_policy("smollm2-sft")
    chat = rendered(regimes.get("paper").env(), tokenizer)
    rng = np.random.default_rng(seed)
    episodes = []
    for k, task in enumerate(chat.sample_tasks(rows, split="train", seed=seed)):
        slate = chat.slate(task, seed=k)
        name = [slate.oracle, slate.of("misleading")[0], slate.of("relevant")[0]][k % 3]
        episodes.append(chat_demo_episode(chat, tokenizer, task, slate, [name], rng)[0])
    import copy

    uncast = setup_training(copy.deepcopy(base), TrainConfig(model="smollm2-sft", bf16=False, run_dir="build/bench/u"))
    trainable = setup_training(base, TrainConfig(model="smollm2-sft", bf16=True, run_dir="build/bench/u"))
    return trainable.model, uncast.model, pack(episodes, tokenizer.pad_token_id), episodes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=8, help="episodes in the update (default 8)")
    p.add_argument("--buckets", type=int, nargs="+", default=[4, 2, 1], help="length_buckets settings (default 4 2 1)")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats per setting, after one warm-up each")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=OUT)
    a = p.parse_args(argv)
    from skillgate_lib.policy import devices
    from skillgate_lib.policy.batching import response_logprobs

    torch.set_num_threads(a.threads)
    devices.check_bf16(torch.device("cpu"), True)
    devices.keep_freed_memory()
    model, uncast, batch, episodes = _batch(a.rows)
    model.train(), uncast.train()
    models = {"bf16-stored": model, "fp32-stored": uncast}
    lengths = [len(e.response_ids) for e in episodes]
    print(f"{a.rows} rows, response tokens {min(lengths)}-{max(lengths)} (mean {np.mean(lengths):.0f}), "
          f"prompt {len(episodes[0].prompt_ids)}; {devices.precision_line(torch.device('cpu'), True)}", flush=True)

    def once(setting: str) -> float:
        stored, buckets = setting.rsplit(" ", 1)
        m = models[stored]
        t0 = time.perf_counter()
        with devices.autocast(torch.device("cpu"), True):
            logp = response_logprobs(m, batch, buckets=int(buckets))
        (logp * batch["response_mask"]).sum().backward()
        m.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    # the trainer's set-up of a bf16 run stores the frozen weights in bf16; the first setting is the same
    # buckets with them stored fp32 (autocast casting them every call), the rest the bf16-stored model's buckets
    settings = [f"fp32-stored {a.buckets[0]}"] + [f"bf16-stored {b}" for b in a.buckets]
    for s in settings:  # warm-up
        once(s)
    times: dict[str, list[float]] = {s: [] for s in settings}
    for r in range(a.repeats):
        for s in settings:
            times[s].append(once(s))
        print(f"repeat {r + 1}/{a.repeats}: " + ", ".join(f"{s}: {times[s][-1]:.1f} s" for s in settings), flush=True)
    first = settings[0]
    result = {"rows": a.rows, "threads": a.threads, "bf16": True, "response_tokens": lengths,
              "prompt_tokens": len(episodes[0].prompt_ids), "seconds": times, "load": list(__import__("os").getloadavg()),
              "median_s": {s: statistics.median(t) for s, t in times.items()},
              "median_speedup_over_first": {s: statistics.median(t0 / t for t0, t in zip(times[first], times[s]))
                                            for s in settings}}
    for s in settings:
        print(f"{s} bucket(s): median {result['median_s'][s]:.1f} s "
              f"({result['median_speedup_over_first'][s]:.2f}x the speed of {first})")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
