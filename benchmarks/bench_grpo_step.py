"""One GRPO step of the kit against TRL's ``GRPOTrainer``, side by side on the same model and batch.

    python benchmarks/bench_grpo_step.py [--steps 5] [--threads 2] [--new-tokens 64] [--force-length]
                                         [--length-buckets N] [--model tiny|smollm2-sft] [--bf16] [--quick]

Both sides start from the same weights (``--model tiny``: the committed warm start
``data/models/tiny-sft`` when it exists, else ``models.tiny_llama`` at a fixed random init: the
timing does not depend on the weights; ``--model smollm2-sft``: SmolLM2-135M-Instruct with the
committed LoRA warm start folded in, its prompts in the chat rendering of ``--regime``, default
``paper``), put the kit's LoRA on the same projections, use the same learning
rate, clip and gradient-norm cap, run on CPU with the same torch thread count, and see
the same prompts: step ``s`` of both sides gets the kit environment's ``prompts`` train
prompts of step ``s`` (~165 tokens each), ``group`` samples of each, ``new_tokens``
response tokens at temperature 1.

* kit: the body of :func:`skillgate_lib.runs.train.train`'s loop, piece by piece (sample tasks and
  slates, ``rollout.generate`` with the environment answering reads and scoring, pack,
  ``credit.assign``, loss, backward, clip, AdamW step); eval, logging and checkpoints are
  left out, as they are not part of a step.
* TRL: ``GRPOTrainer`` (plain outcome-advantage GRPO, ``loss_type="dapo"``, ``beta=0``) with the
  environment's verifier as reward, one generation batch per optimizer step
  (``per_device_train_batch_size = prompts * group``, so ``steps_per_generation = 1``), every
  completion forced to ``new_tokens`` tokens (``min_new_tokens``), gradient checkpointing off
  (TRL's default turns it on; the kit does not checkpoint), timed per step by a callback.

The two sides alternate step by step (TRL's step ``s``, then the kit's step ``s``, from a TRL
callback), so a load that comes and goes on a shared machine falls on both; besides each side's
medians the bench reports the median of the paired per-step ratios kit/TRL with their range
and interquartile range. ``--bf16`` runs both sides' forward passes under bf16 autocast (the
kit's ``TrainConfig.bf16``, TRL's ``bf16=True``), and the MFU is then taken against the bf16
matmul peak. For the decode it also reports the floor set by reading the weights once per
decode forward at the measured read bandwidth, as a fraction of the measured forward.

Memory: both trainers live in one process. At ``--model smollm2-sft --prompts 2 --group 8`` (368
tokens a row) it reached 18.8 GB resident during the second pair and was killed by the kernel on
a 24 GB machine: TRL's update holds the full-vocabulary logits of every row, and the allocator
settings the kit's trainer uses for a pretrained model (:func:`skillgate_lib.policy.devices.keep_freed_memory`,
applied here too) keep freed blocks instead of returning them. Size SmolLM2 runs below that.

The kit's loop also stops at ``new_tokens`` decode steps (it stops early only when every
sequence has ended, which a 64-row batch never does in practice); its rows can be shorter
than ``new_tokens`` when a sequence samples EOS, so the mean response length of both sides
is reported. ``--force-length`` forbids the kit's EOS until ``new_tokens`` (``generate``'s
``min_new_tokens``, as TRL's side does), so both sides' rows have the same length and long
responses are exercised (the episodes run on past their answer). The first step of each side is a warm-up and is not counted; medians over the
remaining ``--steps``. Besides completions/s it reports response tokens/s (the kit's rows
can end early, TRL's cannot), each side's generation/update split, the kit's decode forwards
per step, the ms per decode forward and reads per episode (``--new-tokens 160`` gives
multi-read episodes, where inserting a body in one forward matters), its policy tokens/s (the
response tokens less those the environment inserted, which cost no decode step), the
process's peak resident memory after the kit's side, and the MFU of the kit's update: its FLOPs
counted by ``torch.utils.flop_counter`` over the measured fp32 matmul peak of this machine
(a 2048^3 matmul at the same thread count). Writes ``build/bench/grpo_step.json`` (or
``--out``); exits 1 when the full-size kit/TRL throughput ratio is below the 1.5x target.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from skillgate_lib import paths
from skillgate_lib.env import SkillSlateEnv, load_tokenizer
from skillgate_lib.policy import models
from skillgate_lib.runs import train

TARGET = 1.5
#: Response tokens/s of the kit over TRL's that the speed issue asks for at 160 and 512 new tokens (reported, not an exit code).
TOKEN_TARGET = 3.0
OUT = paths.BUILD_DIR / "bench" / "grpo_step.json"


@dataclass
class BenchConfig:
    """Shape and settings shared by both sides."""

    steps: int = 5
    """Timed steps per side (one extra warm-up step runs first)."""
    threads: int = 2
    """torch CPU threads, both sides."""
    prompts: int = 8
    """Prompts per step."""
    group: int = 8
    """Completions per prompt (G)."""
    new_tokens: int = 64
    """Response tokens per completion."""
    lr: float = train.TrainConfig.lr
    """AdamW learning rate of the LoRA weights."""
    seed: int = 0
    """Seeds the model init, prompts and sampling."""
    quick: bool = False
    """Smoke-run shape (2 prompts x 4, 8 tokens, 2 timed steps); no target check."""
    force_length: bool = False
    """Forbid the kit's EOS until new_tokens, so its rows are as long as TRL's."""
    length_buckets: int = train.TrainConfig.length_buckets
    """Row groups of similar response length in the kit's update (1 = one padded batch)."""
    model: str = "tiny"
    """``tiny`` (the embedded word-level Llama) or ``smollm2-sft`` (SmolLM2-135M-Instruct and its LoRA warm start)."""
    regime: str = ""
    """The environment's regime ("" = the default environment for tiny, ``paper`` for SmolLM2)."""
    bf16: bool = False
    """bf16 autocast of both sides' forward passes (a CPU with native bf16 matmuls, or CUDA)."""


MODELS = ("tiny", "smollm2-sft")


def _setup(cfg: BenchConfig):
    """``(base model, tokenizer, environment, model name)`` of the bench's ``--model`` and ``--regime``."""
    if cfg.model == "smollm2-sft":
        base, tokenizer = models.load_policy("smollm2-sft")
        env = train.make_env(train.TrainConfig(regime=cfg.regime or "paper"), tokenizer=tokenizer)
        return base, tokenizer, env, f"smollm2-sft (SmolLM2-135M-Instruct + LoRA warm start, {cfg.regime or 'paper'}, chat)"
    tokenizer = load_tokenizer()
    env = train.make_env(train.TrainConfig(regime=cfg.regime)) if cfg.regime else SkillSlateEnv()
    if (models.TINY_MODELS["tiny"] / "config.json").exists():
        return models.load_policy("tiny")[0], tokenizer, env, "tiny-sft (warm start)"
    torch.manual_seed(cfg.seed)
    return models.tiny_llama(tokenizer), tokenizer, env, "tiny_llama (random init)"


class KitSide:
    """The kit's side, one GRPO step per :meth:`step`: the trainer's own step with its decode forwards counted."""

    def __init__(self, base, tokenizer, env, train_cfg: train.TrainConfig, force_length: bool = False):
        self.tokenizer, self.env, self.cfg, self.force_length = tokenizer, env, train_cfg, force_length
        self.model, self.params, self.opt, self.ccfg, self.skill_values = train.setup_training(base, train_cfg)
        self.raw: dict[str, list] = {k: [] for k in ("step_s", "generate_s", "mean_response_tokens", "mean_prompt_tokens",
                                                     "decode_forwards", "reads_per_episode", "env_token_fraction",
                                                     "mean_policy_tokens")}
        self.episodes: list = []

    def step(self) -> None:
        from skillgate_lib.policy.rollout import generate

        forwards: list[int] = []

        def counted(*args, **kwargs):  # the trainer's own generate, with its decode-forward count kept
            stats: dict = {}
            out = generate(*args, **kwargs, stats=stats,
                           min_new_tokens=self.cfg.max_new_tokens if self.force_length else 0)
            forwards.append(stats["decode_forwards"])
            return out

        torch.set_num_threads(self.cfg.threads)
        train.generate, original = counted, train.generate
        try:
            t0 = time.perf_counter()
            episodes, _, _, row, _ = train.grpo_step(self.model, self.tokenizer, self.env, self.opt, self.params,
                                                     self.cfg, self.ccfg, len(self.raw["step_s"]), self.skill_values)
            elapsed = time.perf_counter() - t0
        finally:
            train.generate = original
        r = self.raw
        r["step_s"].append(elapsed)
        print(f", kit {elapsed:.1f} s", end="", flush=True)
        r["generate_s"].append(row["time/generate_s"])
        r["decode_forwards"].append(sum(forwards))
        r["mean_response_tokens"].append(float(np.mean([len(e.response_ids) for e in episodes])))
        r["mean_prompt_tokens"].append(float(np.mean([len(e.prompt_ids) for e in episodes])))
        r["reads_per_episode"].append(float(np.mean([len(e.outcome.reads) for e in episodes])))
        r["env_token_fraction"].append(float(np.mean([1 - e.policy_tokens / max(1, len(e.response_ids)) for e in episodes])))
        r["mean_policy_tokens"].append(float(np.mean([e.policy_tokens for e in episodes])))
        self.episodes = episodes

    def result(self) -> dict:
        """The per-step record, the process's peak memory and the FLOPs of one update counted on the last batch."""
        from torch.utils.flop_counter import FlopCounterMode

        from skillgate_lib.policy import devices
        from skillgate_lib.policy.batching import pack, response_logprobs

        batch = pack(self.episodes, self.tokenizer.pad_token_id)
        self.model.train()
        with FlopCounterMode(display=False) as counter, devices.autocast(torch.device("cpu"), self.cfg.bf16):
            (response_logprobs(self.model, batch, buckets=self.cfg.length_buckets) * batch["response_mask"]).sum().backward()
        self.opt.zero_grad(set_to_none=True)
        return dict(self.raw, peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                    update_flops=counter.get_total_flops(), torch_threads=torch.get_num_threads())


def matmul_peak_gflops(threads: int, n: int = 2048, repeats: int = 7, dtype: torch.dtype = torch.float32) -> float:
    """This machine's matmul rate (GFLOP/s) in ``dtype`` at ``threads``: median of ``repeats`` n^3 products."""
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    for _ in range(2):
        a @ b
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(times) / 1e9


def _trl_dataset(env, train_cfg: train.TrainConfig, n_steps: int):
    """The kit's prompts of steps 0..n_steps-1 in order, as a TRL dataset, and the env reward over them."""
    from datasets import Dataset

    from skillgate_lib.integrations.trl import EnvReward

    rows, episodes = [], {}
    for step in range(n_steps):
        for task, slate, g in train.step_items(env, train_cfg, step)[:: train_cfg.group_size]:
            key = f"step{step}-prompt{g}"  # a task can recur with another slate: key by position
            episodes[key] = (task, slate)
            rows.append({"prompt": env.prompt(task, slate), "task_id": key})
    return Dataset.from_list(rows), EnvReward(env, episodes)  # on the chat rendering: the decoded completion ids


def run_trl(base, tokenizer, env, train_cfg: train.TrainConfig, n_steps: int, workdir: str, between=None) -> dict:
    """``n_steps`` steps of TRL's ``GRPOTrainer`` on the same prompts; per-step wall times (s) and shapes.
    ``between()``, when given, runs after each TRL step (the kit's step of the same index: the sides alternate)."""
    from peft import LoraConfig
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    class Timed(GRPOTrainer):
        """Records the generate-and-score time and the completion and prompt lengths of each step."""

        def _generate_and_score_completions(self, inputs):
            t0 = time.perf_counter()
            out = super()._generate_and_score_completions(inputs)
            record["generate_s"].append(time.perf_counter() - t0)
            record["mean_response_tokens"].append(float(out["completion_mask"].sum(1).float().mean()))
            record["mean_prompt_tokens"].append(float(out["prompt_mask"].sum(1).float().mean()))
            return out

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            torch.set_num_threads(train_cfg.threads)
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            record["step_s"].append(time.perf_counter() - self.t0)
            print(f"step {len(record['step_s'])}/{n_steps}: TRL {record['step_s'][-1]:.1f} s", end="", flush=True)
            if between is not None:
                between()
            print(flush=True)

    record: dict[str, list] = {"step_s": [], "generate_s": [], "mean_response_tokens": [], "mean_prompt_tokens": []}
    torch.set_num_threads(train_cfg.threads)
    dataset, reward = _trl_dataset(env, train_cfg, n_steps)
    n = train_cfg.prompts_per_step * train_cfg.group_size
    args = GRPOConfig(
        output_dir=workdir, report_to="none", use_cpu=True, bf16=train_cfg.bf16, gradient_checkpointing=False,
        num_generations=train_cfg.group_size, per_device_train_batch_size=n, gradient_accumulation_steps=1,
        max_completion_length=train_cfg.max_new_tokens, generation_kwargs={"min_new_tokens": train_cfg.max_new_tokens},
        temperature=train_cfg.temperature, learning_rate=train_cfg.lr, weight_decay=0.0, lr_scheduler_type="constant",
        max_grad_norm=1.0, epsilon=train_cfg.clip_eps, beta=0.0, shuffle_dataset=False, logging_steps=1,
        max_steps=n_steps, save_strategy="no", disable_tqdm=True, seed=train_cfg.seed, dataloader_num_workers=0,
    )
    lora = LoraConfig(r=train_cfg.lora_rank, lora_alpha=train_cfg.lora_alpha, lora_dropout=0.0,
                      target_modules=list(train_cfg.lora_targets), bias="none", task_type="CAUSAL_LM")
    trainer = Timed(model=base, reward_funcs=reward, args=args, train_dataset=dataset, processing_class=tokenizer,
                    peft_config=lora, callbacks=[StepTimer()])
    trainer.remove_callback(PrinterCallback)  # TRL's per-step log dicts; the table below reports the step
    trainer.train()
    if len(record["step_s"]) != n_steps:
        raise RuntimeError(f"TRL ran {len(record['step_s'])} steps, expected max_steps={n_steps}")
    return {**record, "torch_threads": torch.get_num_threads(), "steps_per_generation": args.steps_per_generation,
            "generation_batch_size": args.generation_batch_size}


def paired_ratios(kit: dict, trl: dict) -> dict:
    """Kit/TRL ratios of step ``s`` against step ``s`` (the warm-up pair dropped), per completion and per response
    token: each list, its median, range and interquartile range."""
    out = {}
    for name, per_row in (("per_completion", lambda r, s: 1.0), ("per_response_token", lambda r, s: r["mean_response_tokens"][s])):
        ratios = [(per_row(kit, s) / kit["step_s"][s]) / (per_row(trl, s) / trl["step_s"][s])
                  for s in range(1, min(len(kit["step_s"]), len(trl["step_s"])))]
        q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else (ratios[0],) * 3
        out[name] = {"ratios": ratios, "median": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
                     "q1": q1, "q3": q3}
    return out


def weight_bytes(model, dtype: torch.dtype) -> int:
    """Bytes of the weights a decode forward reads once: every matrix of the decoder (the embedding table is
    indexed, not read whole, unless it doubles as the head), in the dtype the matmuls use."""
    size = torch.empty((), dtype=dtype).element_size()
    seen, total = set(), 0
    for name, p in model.named_parameters():
        if p.dim() != 2 or id(p) in seen or "lora_" in name:
            continue
        seen.add(id(p))
        tied = "embed_tokens" in name and getattr(model.config, "tie_word_embeddings", False)
        if "embed_tokens" not in name or tied:
            total += p.numel() * size
    return total


def _summary(raw: dict, completions: int) -> dict:
    """Medians over the timed steps (the first, warm-up step dropped)."""
    med = statistics.median(raw["step_s"][1:])
    gen = statistics.median(raw["generate_s"][1:])
    update = statistics.median([s - g for s, g in zip(raw["step_s"][1:], raw["generate_s"][1:])])
    resp = float(np.mean(raw["mean_response_tokens"][1:]))
    out = {"median_step_s": med, "completions_per_s": completions / med, "response_tokens_per_s": completions * resp / med,
           "median_generate_s": gen, "median_update_s": update, "mean_response_tokens": resp,
           "mean_prompt_tokens": float(np.mean(raw["mean_prompt_tokens"][1:])), "per_step": raw}
    if "decode_forwards" in raw:
        out["median_decode_forwards"] = statistics.median(raw["decode_forwards"][1:])
        out["mean_reads_per_episode"] = float(np.mean(raw["reads_per_episode"][1:]))
        out["mean_env_token_fraction"] = float(np.mean(raw["env_token_fraction"][1:]))
        out["mean_policy_tokens"] = float(np.mean(raw["mean_policy_tokens"][1:]))
        out["policy_tokens_per_s"] = completions * out["mean_policy_tokens"] / med
        out["ms_per_decode_forward"] = 1e3 * statistics.median(
            g / f for g, f in zip(raw["generate_s"][1:], raw["decode_forwards"][1:]))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=BenchConfig.steps, help="timed steps per side, after one warm-up step")
    p.add_argument("--threads", type=int, default=BenchConfig.threads, help="torch CPU threads (both sides)")
    p.add_argument("--new-tokens", type=int, default=BenchConfig.new_tokens,
                   help="response tokens per completion (160: multi-read episodes)")
    p.add_argument("--force-length", action="store_true",
                   help="forbid the kit's EOS until --new-tokens, so its rows are as long as TRL's")
    p.add_argument("--length-buckets", type=int, default=BenchConfig.length_buckets,
                   help="row groups of similar response length in the kit's update (1 = one padded batch)")
    p.add_argument("--model", choices=MODELS, default=BenchConfig.model,
                   help="tiny (the embedded Llama, default) or smollm2-sft (SmolLM2-135M-Instruct + its LoRA warm start)")
    p.add_argument("--regime", default="", help="the environment's regime (default: the plain environment; paper for SmolLM2)")
    p.add_argument("--prompts", type=int, default=BenchConfig.prompts, help="prompts per step (default 8)")
    p.add_argument("--group", type=int, default=BenchConfig.group, help="completions per prompt (default 8)")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast on both sides (a CPU with native bf16 matmuls)")
    p.add_argument("--quick", action="store_true", help="smoke run: 2 prompts x 4 completions x 8 tokens, 2 timed steps")
    p.add_argument("--out", type=Path, default=OUT, help=f"result JSON (default {OUT})")
    a = p.parse_args(argv)
    cfg = BenchConfig(steps=a.steps, threads=a.threads, new_tokens=a.new_tokens, quick=a.quick, prompts=a.prompts,
                      group=a.group, force_length=a.force_length, length_buckets=a.length_buckets, model=a.model,
                      regime=a.regime, bf16=a.bf16)
    if cfg.quick:
        cfg.steps, cfg.prompts, cfg.group, cfg.new_tokens = min(cfg.steps, 2), 2, 4, 8
    if cfg.steps < 1:
        p.error(f"--steps must be >= 1 (timed steps after the warm-up), got {cfg.steps}")
    from skillgate_lib.policy import devices

    devices.check_bf16(torch.device("cpu"), cfg.bf16)
    n_steps = cfg.steps + 1
    base, tokenizer, env, model_name = _setup(cfg)
    from skillgate_lib.policy.rollout import response_limit

    if response_limit(env, cfg.new_tokens) != cfg.new_tokens:  # the chat rendering's cap holds a whole episode
        print(f"--new-tokens {cfg.new_tokens} raised to {response_limit(env, cfg.new_tokens)}, the rendering's response cap "
              "(the kit's rollouts never stop before it), on both sides", flush=True)
        cfg.new_tokens = response_limit(env, cfg.new_tokens)
    # The same work as TRL's side: no KL term (beta=0) and every drawn group trained (no filter, hence one draw).
    train_cfg = train.TrainConfig(seed=cfg.seed, steps=n_steps, prompts_per_step=cfg.prompts, group_size=cfg.group,
                                  lr=cfg.lr, max_new_tokens=cfg.new_tokens, threads=cfg.threads, kl_coef=0.0,
                                  filter_groups=False, length_buckets=cfg.length_buckets, bf16=cfg.bf16,
                                  model=cfg.model, **({"regime": cfg.regime} if cfg.regime else {}))
    # transformers' rename of gradient_checkpointing, hit by TRL's own config handling
    warnings.filterwarnings("ignore", category=FutureWarning, message=r".*gradient_checkpointing.*")
    train.seed_everything(cfg.seed)
    torch.set_num_threads(cfg.threads)
    if sum(q.numel() for q in base.parameters()) > 10_000_000:
        devices.keep_freed_memory()  # as the trainer does for a pretrained model
    trl_base = copy.deepcopy(base)  # both sides start from identical weights
    n = cfg.prompts * cfg.group
    load = {"before": os.getloadavg()}
    kit_side = KitSide(base, tokenizer, env, train_cfg, cfg.force_length)
    print(f"{model_name}: {n_steps} steps a side, alternating (TRL then kit), {cfg.prompts} x {cfg.group} rollouts, "
          f"{cfg.new_tokens} new tokens, {devices.precision_line(torch.device('cpu'), cfg.bf16)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-grpo-trl-") as workdir:
        trl_raw = run_trl(trl_base, tokenizer, env, train_cfg, n_steps, workdir, between=kit_side.step)
    load["after"] = os.getloadavg()
    kit_raw = kit_side.result()
    kit, trl_ = _summary(kit_raw, n), _summary(trl_raw, n)
    paired = paired_ratios(kit_raw, trl_raw)
    ratio = kit["completions_per_s"] / trl_["completions_per_s"]
    dtype = torch.bfloat16 if cfg.bf16 else torch.float32
    peak = matmul_peak_gflops(cfg.threads, dtype=dtype)
    update_gflops = kit["per_step"]["update_flops"] / 1e9
    mfu = update_gflops / kit["median_update_s"] / peak
    from profile_decode import bandwidth_gbs

    bandwidth = bandwidth_gbs(cfg.threads)
    weights = weight_bytes(base, dtype)
    weight_floor_ms = 1e3 * weights / (bandwidth * 1e9)

    import peft
    import transformers
    import trl

    result = {
        "config": asdict(cfg), "model": model_name, "credit": train_cfg.credit, "alternating": True,
        "shape": {"prompts": cfg.prompts, "group": cfg.group, "completions_per_step": n, "new_tokens": cfg.new_tokens},
        "kit": kit, "trl": trl_, "ratio_kit_over_trl": ratio, "target": TARGET, "paired": paired,
        "ratio_tokens_per_s": kit["response_tokens_per_s"] / trl_["response_tokens_per_s"],
        "ratio_policy_tokens_per_s": kit["policy_tokens_per_s"] / trl_["response_tokens_per_s"],
        "token_target": TOKEN_TARGET, "precision": "bf16 autocast" if cfg.bf16 else "fp32",
        "matmul_peak_gflops": peak, "kit_update_gflop": update_gflops, "kit_update_mfu": mfu,
        "read_bandwidth_gbs": bandwidth, "decode_weight_mib": weights / 2**20, "decode_weight_floor_ms": weight_floor_ms,
        "decode_weight_floor_fraction": weight_floor_ms / kit["ms_per_decode_forward"],
        "loadavg_1_5_15": load, "cpu_count": os.cpu_count(),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__,
                     "peft": peft.__version__, "python": sys.version.split()[0]},
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2) + "\n")

    print(f"GRPO step, {model_name}, {cfg.prompts} prompts x {cfg.group} = {n} completions x {cfg.new_tokens} new tokens, "
          f"{cfg.threads} torch threads, {result['precision']}, median of {cfg.steps} steps after 1 warm-up, sides alternating")
    print(f"{'':6} {'s/step':>8} {'generate s':>11} {'update s':>9} {'completions/s':>14} {'tokens/s':>9} "
          f"{'resp tok':>9} {'prompt tok':>11}")
    for name, r in (("kit", kit), ("TRL", trl_)):
        print(f"{name:6} {r['median_step_s']:8.2f} {r['median_generate_s']:11.2f} {r['median_update_s']:9.2f} "
              f"{r['completions_per_s']:14.1f} {r['response_tokens_per_s']:9.0f} {r['mean_response_tokens']:9.1f} "
              f"{r['mean_prompt_tokens']:11.1f}")
    print(f"kit rollouts: {kit['median_decode_forwards']:.0f} decode forwards per step for "
          f"{kit['mean_response_tokens']:.1f} response tokens per row ({kit['mean_reads_per_episode']:.2f} reads, "
          f"{kit['mean_env_token_fraction']:.0%} of the tokens inserted by the environment"
          f"{', EOS forbidden until the cap' if cfg.force_length else ''}); "
          f"{kit['ms_per_decode_forward']:.1f} ms per decode forward, of which reading the {weights / 2**20:.0f} MiB of "
          f"weights at {bandwidth:.1f} GB/s is {weight_floor_ms:.1f} ms ({result['decode_weight_floor_fraction']:.0%}); "
          f"peak RSS {kit['per_step']['peak_rss_mib']:.0f} MiB")
    print(f"kit update: {update_gflops:.1f} GFLOP (forward + backward) in {kit['median_update_s']:.2f} s = "
          f"{update_gflops / kit['median_update_s']:.0f} GFLOP/s, MFU {mfu:.0%} of the measured {result['precision']} "
          f"matmul peak ({peak:.0f} GFLOP/s, 2048^3, {cfg.threads} threads)")
    for name, r in paired.items():
        print(f"paired kit/TRL {name.replace('_', ' ')}: median {r['median']:.2f}x (IQR {r['q1']:.2f}-{r['q3']:.2f}, "
              f"range {r['min']:.2f}-{r['max']:.2f}, {len(r['ratios'])} pairs)")
    tok_met = paired["per_response_token"]["median"] >= TOKEN_TARGET
    print(f"kit/TRL response tokens/s (paired median): {paired['per_response_token']['median']:.2f}x (target {TOKEN_TARGET:g}x: "
          f"{'met' if tok_met else 'NOT met'}); policy tokens only (no inserted text, medians): "
          f"{result['ratio_policy_tokens_per_s']:.2f}x")
    met = paired["per_completion"]["median"] >= TARGET
    print(f"kit/TRL throughput (paired median): {paired['per_completion']['median']:.2f}x (target {TARGET}x: "
          f"{'met' if met else 'NOT met'}{', not checked in --quick' if cfg.quick else ''}); load average "
          f"{load['before'][0]:.2f} -> {load['after'][0]:.2f} on {os.cpu_count()} CPUs -> {a.out}")
    return 0 if met or cfg.quick else 1


if __name__ == "__main__":
    sys.exit(main())
