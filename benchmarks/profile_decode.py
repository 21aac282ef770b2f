"""Where the time of one decode forward goes, and the memory-bandwidth floor under its attention.

    python benchmarks/profile_decode.py [--new-tokens 160] [--force-length] [--steps 3] [--threads 2]

Rolls out the GRPO bench's batch (8 prompts x 8 samples of the committed warm start, LoRA
on q/k/v/o folded in, temperature 1) with ``rollout.generate`` under ``torch.profiler`` and
splits the wall time of the decode loop per forward into: attention (sdpa), the matmuls,
sampling, the other tensor ops, and what is left (Python, dispatch). Beside it, the floor
the attention cannot go under on this machine: every decode forward reads each row's cached
keys and values once per layer, ``rows x heads x columns x head_dim x 4 bytes x 2`` per
layer, at the measured memory bandwidth (the median of summing a 128 MB tensor).

The lean decoder keeps a copy of the prompt's keys and values in each of a group's rows
(the layout of ``transformers``' cache, which its logits must equal bit for bit), so at
the bench shape most of those bytes are prompt copies. Writes ``build/bench/decode_profile.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

from skillgate_lib import paths
from skillgate_lib.env import SkillSlateEnv, load_tokenizer
from skillgate_lib.policy import decoder as decoder_lib
from skillgate_lib.policy import models, rollout
from skillgate_lib.runs import train

OUT = paths.BUILD_DIR / "bench" / "decode_profile.json"

#: Profiler op names -> the part of a decode forward they belong to (first match wins).
PARTS = (("attention", ("scaled_dot_product", "flash_attention")),
         ("matmuls", ("aten::mm", "aten::addmm", "aten::linear", "aten::matmul", "aten::bmm")),
         ("sampling", ("multinomial", "exponential", "softmax", "argmax")))


def bandwidth_gbs(threads: int, mib: int = 128, repeats: int = 9) -> float:
    """Read bandwidth (GB/s): median time to sum a ``mib`` MiB float32 tensor."""
    torch.set_num_threads(threads)
    x = torch.ones(mib * 2**20 // 4)
    x.sum()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        x.sum()
        times.append(time.perf_counter() - t0)
    return x.numel() * 4 / statistics.median(times) / 1e9


def _part(name: str) -> str:
    return next((part for part, keys in PARTS if any(k in name for k in keys)), "other ops")


def profile(new_tokens: int, force_length: bool, steps: int, threads: int) -> dict:
    torch.set_num_threads(threads)
    env, tokenizer = SkillSlateEnv(), load_tokenizer()
    cfg = train.TrainConfig(prompts_per_step=8, group_size=8, max_new_tokens=new_tokens, threads=threads)
    model = train.setup_training(models.load_policy("tiny")[0], cfg).model
    shapes: list[tuple[int, int, int]] = []  # (rows, cache columns attended, new columns) per decode forward
    cache_bytes: list[int] = []

    class Counted(decoder_lib.LeanLlama):
        def step(self, ids, attn, pos, lengths):
            out = super().step(ids, attn, pos, lengths)
            rows, width = ids.shape
            shapes.append((rows, self.used, width))
            per_layer = rows * self.heads * self.used * self.head_dim * self.keys[0].element_size() * 2
            cache_bytes.append(per_layer * len(self.layers))
            return out

    def make(model, lean, room=256):
        return Counted(model, room)

    rollout.make_decoder, original = make, rollout.make_decoder
    min_new = new_tokens if force_length else 0
    try:
        gen = torch.Generator().manual_seed(0)
        rollout.generate(model, tokenizer, env, train.step_items(env, cfg, 0), new_tokens, 1.0, gen, min_new_tokens=min_new)
        shapes.clear(), cache_bytes.clear()
        parts: dict[str, float] = defaultdict(float)
        wall = 0.0
        for step in range(1, steps + 1):
            items = train.step_items(env, cfg, step)
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                t0 = time.perf_counter()
                rollout.generate(model, tokenizer, env, items, new_tokens, 1.0, gen, min_new_tokens=min_new)
                wall += time.perf_counter() - t0
            for event in prof.key_averages():
                parts[_part(event.key)] += event.self_cpu_time_total / 1e6
    finally:
        rollout.make_decoder = original
    forwards = len(shapes)
    op_time = sum(parts.values())
    bw = bandwidth_gbs(threads)
    floor_ms = 1e3 * statistics.mean(cache_bytes) / (bw * 1e9)
    per_forward = {k: 1e3 * v / forwards for k, v in sorted(parts.items())}
    per_forward["python and dispatch"] = 1e3 * max(0.0, wall - op_time) / forwards
    return {"new_tokens": new_tokens, "force_length": force_length, "threads": threads, "steps": steps,
            "decode_forwards": forwards, "wall_s": wall, "ms_per_forward": 1e3 * wall / forwards,
            "ms_per_forward_by_part": per_forward, "mean_rows": statistics.mean(s[0] for s in shapes),
            "mean_cache_columns": statistics.mean(s[1] for s in shapes),
            "mean_kv_mib_read_per_forward": statistics.mean(cache_bytes) / 2**20, "read_bandwidth_gbs": bw,
            "attention_floor_ms": floor_ms,
            "note": "wall includes the prefill and the per-step bookkeeping of generate; parts are the profiler's "
                    "self CPU time per op, divided by the decode forwards"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--new-tokens", type=int, default=160, help="response-token cap (default 160)")
    p.add_argument("--force-length", action="store_true", help="forbid EOS until --new-tokens")
    p.add_argument("--steps", type=int, default=3, help="profiled rollout batches after one warm-up")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--out", type=Path, default=OUT, help=f"result JSON (default {OUT})")
    a = p.parse_args(argv)
    if a.steps < 1:
        p.error(f"--steps must be >= 1, got {a.steps}")
    r = profile(a.new_tokens, a.force_length, a.steps, a.threads)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(r, indent=2) + "\n")
    print(f"decode, 64 rows x {a.new_tokens} new tokens{' (forced)' if a.force_length else ''}, {a.threads} threads: "
          f"{r['decode_forwards']} forwards in {r['wall_s']:.2f} s = {r['ms_per_forward']:.2f} ms per forward "
          f"(mean {r['mean_rows']:.0f} rows x {r['mean_cache_columns']:.0f} cached columns)")
    for part, ms in r["ms_per_forward_by_part"].items():
        print(f"  {part:20} {ms:6.2f} ms")
    print(f"attention floor: {r['mean_kv_mib_read_per_forward']:.1f} MiB of keys and values read per forward at "
          f"{r['read_bandwidth_gbs']:.1f} GB/s = {r['attention_floor_ms']:.2f} ms -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
