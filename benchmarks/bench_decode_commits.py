"""SmolLM2 rollouts drawn by two versions of the kit, side by side: seconds, and whether they drew the same tokens.

    python benchmarks/bench_decode_commits.py --base 8034ad8 [--prompts 4] [--group 8] [--repeats 2] [--threads 2]

A change to the decode path that claims the same arithmetic must draw the same rollouts, token for token,
and is worth keeping only if it is faster. This times one GRPO step's rollouts of the rate study
``paper_f30`` (``smollm2-sft``, the trainer's fresh LoRA, bf16 autocast, ``--prompts`` tasks x ``--group``
rollouts, the trainer's own :func:`~skillgate_lib.policy.rollout.generate`) in a fresh process per draw, once
with the code of ``--base`` (checked out into ``build/bench/base-<commit>``) and once with this working
tree, after one untimed warm-up draw a side, alternating (base, new, then new, base, ...) so that a load
that comes and goes falls on both. Each draw reports its seconds and a digest of every rollout's tokens;
the record says whether the digests agree.
Writes ``build/bench/decode_commits.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "bench" / "decode_commits.json"

#: One draw, run with the tree under test as the working directory (so its ``skillgate_lib`` is imported).
DRAW = r"""
import hashlib, json, sys, time, torch
prompts, group, threads = map(int, sys.argv[1:4])
torch.set_num_threads(threads)
from skillgate_lib.policy import devices
from skillgate_lib.policy.models import load_policy
from skillgate_lib.policy.rollout import generate
from skillgate_lib.runs.train import TrainConfig, make_env, setup_training
base, tokenizer = load_policy("smollm2-sft")
cfg = TrainConfig(model="smollm2-sft", regime="paper_f30", seed=0, bf16=True, run_dir="build/bench/unused")
model = setup_training(base, cfg).model.eval()
env = make_env(cfg, tokenizer=tokenizer)
tasks = env.sample_tasks(prompts, split="train", seed=0)
items = [(t, env.slate(t, seed=k), k) for k, t in enumerate(tasks) for _ in range(group)]
t0 = time.perf_counter()
with torch.inference_mode(), devices.autocast(torch.device("cpu"), True):
    episodes = generate(model, tokenizer, env, items, cfg.max_new_tokens, cfg.temperature, torch.Generator().manual_seed(0))
seconds = time.perf_counter() - t0
digest = hashlib.sha256(json.dumps([list(e.response_ids) for e in episodes]).encode()).hexdigest()
print(json.dumps({"seconds": seconds, "digest": digest, "response_tokens": sum(len(e.response_ids) for e in episodes)}))
"""


def _tree(commit: str) -> Path:
    """A checkout of ``commit`` under build/bench (made once), sharing this checkout's environment."""
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", commit], capture_output=True, text=True,
                         check=True).stdout.strip()
    tree = ROOT / "build" / "bench" / f"base-{sha}"
    if not tree.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), sha], check=True,
                       capture_output=True)
    return tree


def _draw(tree: Path, args) -> dict:
    out = subprocess.run([sys.executable, "-c", DRAW, str(args.prompts), str(args.group), str(args.threads)], cwd=tree,
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"the draw in {tree} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True, help="the commit to compare this working tree against")
    p.add_argument("--prompts", type=int, default=4, help="tasks (default 4)")
    p.add_argument("--group", type=int, default=8, help="rollouts per task (default 8)")
    p.add_argument("--repeats", type=int, default=2, help="alternating draws of each side (default 2)")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    p.add_argument("--change", default="", help="what the working tree changes, for the record")
    p.add_argument("--out", type=Path, default=OUT, help=f"JSON record (default {OUT})")
    args = p.parse_args(argv)
    sides = {"base": _tree(args.base), "new": ROOT}
    order = [("base", "new") if r % 2 == 0 else ("new", "base") for r in range(args.repeats)]
    draws = {s: [] for s in sides}
    warmup = {}
    for side in sides:  # the first draws of a machine run slower (caches, clocks): one untimed draw a side
        warmup[side] = _draw(sides[side], args)["seconds"]
        print(f"warm-up {side}: {warmup[side]:.1f} s", flush=True)
    load_before = os.getloadavg()
    for r, pair in enumerate(order):
        for side in pair:
            d = _draw(sides[side], args)
            draws[side].append(d)
            print(f"repeat {r + 1} {side}: {d['seconds']:.1f} s, {d['response_tokens']} tokens, {d['digest'][:12]}",
                  flush=True)
    median = {s: statistics.median(d["seconds"] for d in draws[s]) for s in sides}
    record = {"base": subprocess.run(["git", "-C", str(ROOT), "rev-parse", args.base], capture_output=True, text=True,
                                     check=True).stdout.strip(),
              "change": args.change, "model": "smollm2-sft", "regime": "paper_f30", "bf16": True,
              "prompts": args.prompts, "group": args.group, "threads": args.threads, "repeats": args.repeats,
              "order": [list(pair) for pair in order], "warmup_s": warmup, "draws": draws, "median_s": median,
              "ratio_base_over_new": median["base"] / median["new"],
              "same_tokens": len({d["digest"] for s in sides for d in draws[s]}) == 1,
              "load_average_before": list(load_before), "load_average_after": list(os.getloadavg())}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"median: base {median['base']:.1f} s, new {median['new']:.1f} s: {record['ratio_base_over_new']:.2f}x; "
          f"same tokens: {record['same_tokens']} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
