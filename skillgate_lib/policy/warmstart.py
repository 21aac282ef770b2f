"""Supervised warm starts of the embedded tiny Llama on environment demonstrations.

Two stages, each one command (``python -m skillgate_lib warmstart``):

1. **base** (``--read-pool oracle``, from scratch): demonstrations that read the oracle
   and execute its table. This is where the model learns the two retrieval skills
   the task needs, copying the cue into the read call and looking a key up in the
   body; both sit at chance for ~1,000+ steps, then jump (``docs/results.md``). The result is
   the *capacity check* model (``data/models/tiny-base``), never an RL start.
2. **RL warm start** (``--init data/models/tiny-base --read-pool mixed``): demonstrations
   whose reads follow a fixed mix that does not favour the oracle
   (:func:`skillgate_lib.env.mixed_reads`); execution follows the last body read.
   This unlearns the oracle preference (``data/models/tiny-sft``) and leaves RL a
   selection problem.

Progress is logged every ``log_every`` steps to ``OUT/train_log.jsonl``: the loss and
the teacher-forced accuracy per token type (``variant`` = the name token that must be
copied from the cue, ``value`` = the looked-up step output, ``format`` = the rest),
because the loss alone hides the plateau. Checkpoints are written atomically every
``checkpoint_every`` steps; rerunning the same command resumes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from skillgate_lib import logs, paths
from skillgate_lib.cli import add_fields, from_args
from skillgate_lib.env import NOTE_OPEN, SkillSlateEnv, load_tokenizer, mixed_reads
from skillgate_lib.env.tokenizer import extend_tokenizer
from skillgate_lib.policy import devices
from skillgate_lib.policy.batching import pack, response_logits
from skillgate_lib.policy.models import LOAD_KWARGS, tiny_llama
from skillgate_lib.policy.rollout import Episode
from skillgate_lib.seeding import seed_everything, stream_seed

BASE_DIR = paths.DATA_DIR / "models" / "tiny-base"
TINY_SFT_DIR = paths.DATA_DIR / "models" / "tiny-sft"
TOKEN_TYPES = ("format", "variant", "value", "note")


@dataclass
class WarmStartConfig:
    """SFT warm start of the embedded tiny model (one stage)."""

    steps: int = 2500
    """Optimizer steps."""
    batch_size: int = 32
    """Demonstrations per step (fresh ones every step)."""
    lr: float = 3e-3
    """Peak AdamW learning rate (cosine decay, 5 % linear warm-up)."""
    read_pool: str = "oracle"
    """``oracle``: every demonstration reads the oracle (the base stage); ``mixed``: the RL
    warm-start mix of :func:`skillgate_lib.env.mixed_reads`."""
    p_oracle: float = 0.3
    """mixed: probability that a read is the oracle (if not read yet), else an unread look-alike."""
    read_mix: tuple[float, ...] = (0.35, 0.35, 0.30)
    """mixed: P(1 read), P(2 reads), P(3 reads)."""
    init: str = ""
    """Model directory to start from; empty = a fresh tiny Llama."""
    variant_weight: float = 1.0
    """Loss weight of the read's variant token (the cue copy) relative to every other token."""
    value_weight: float = 1.0
    """Loss weight of each step line's looked-up value relative to every other token (long step lines
    make it a small fraction of the tokens, as the name is of an RL trajectory)."""
    constant_lr: bool = False
    """Keep the peak lr after the warm-up instead of the cosine decay."""
    horizons: tuple[int, ...] = tuple(range(1, 9))
    """Task horizons of the demonstrations (uniform); e.g. 1..16 for the long-episode regime."""
    table_seeds: int = 0
    """0: the library's own tables. N > 0: each demonstration's tables are one of N + 1 sets, the library's
    and N seeded others (``SkillSlateEnv(table_seed=...)``), so that values must be looked up in the body."""
    step_echo: int = 0
    """Times each demonstration's step lines restate the task (``SkillSlateEnv(step_echo=...)``)."""
    step_note: int = 0
    """Free words each demonstration's step lines end with (``SkillSlateEnv(step_note=...)``); the tokenizer
    is extended with the note words the starting model lacks."""
    seed: int = 0
    """Seed of the model init and the demonstration stream."""
    threads: int = 2
    """torch CPU threads."""
    device: str = "auto"
    """Where the model trains: auto (CUDA when present), cpu or cuda."""
    bf16: bool = False
    """bf16 autocast of the forward passes (CUDA, or a CPU with native bf16 matmuls; :mod:`skillgate_lib.policy.devices`)."""
    log_every: int = 25
    """Log loss and per-token-type accuracy every N steps."""
    checkpoint_every: int = 100
    """Atomic checkpoint every N steps (a rerun of the same command resumes from it)."""
    out: str = str(BASE_DIR)
    """Where the model, tokenizer, config and training log are saved."""

    def __post_init__(self) -> None:
        if self.read_pool not in ("oracle", "mixed"):
            raise ValueError(f"read_pool must be 'oracle' or 'mixed', got {self.read_pool!r}")
        for name in ("steps", "batch_size", "log_every", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.table_seeds < 0:
            raise ValueError(f"table_seeds must be >= 0, got {self.table_seeds}")


def demonstration_reads(slate, rng: np.random.Generator, cfg: WarmStartConfig) -> list[str]:
    """The skills one demonstration reads under ``cfg.read_pool``."""
    if cfg.read_pool == "oracle":
        return [slate.oracle]
    return mixed_reads(slate, rng, cfg.p_oracle, cfg.read_mix)


def token_types(words: list[str]) -> list[str]:
    """The type of each word of a response (word-level tokenizer: one token per word).

    ``note`` marks the free words of a step line's note: their accuracy is about 1/32 by design.
    """
    types, in_read, step_pos, in_note = [], False, None, False
    for k, w in enumerate(words):
        kind = "format"
        if w == "<read>":
            in_read = True
        elif w == "</read>":
            in_read = False
        elif in_read and k + 1 < len(words) and words[k + 1] == "</read>":
            kind = "variant"
        if w in ("step", "<answer>"):
            step_pos, in_note = (0 if w == "step" else None), False
        elif step_pos is not None:
            step_pos += 1
            if step_pos == 4:
                kind = "value"
            elif in_note:
                kind = "note"
            in_note = in_note or (step_pos >= 5 and w == NOTE_OPEN)
        types.append(kind)
    return types


def demo_episode(env: SkillSlateEnv, tokenizer, task, slate, reads: list[str],
                 rng: np.random.Generator | None = None) -> tuple[Episode, list[str]]:
    """A demonstration as an :class:`Episode` (inserted text gets no loss) and its token types.

    ``rng`` draws the words of any notes (``env.step_note``)."""
    text = env.demonstration(task, slate, reads, rng)
    outcome = env.score(task, slate, text)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    mask = [not any(s <= a and b <= e for s, e in outcome.tool_spans) for a, b in enc["offset_mapping"]]
    ep = Episode(task, slate, 0, tokenizer(env.prompt(task, slate), add_special_tokens=False)["input_ids"])
    ep.response_ids = list(enc["input_ids"]) + [tokenizer.eos_token_id]
    ep.policy_mask = mask + [True]
    types = token_types(text.split()) if len(enc["input_ids"]) == len(text.split()) else ["format"] * len(mask)
    return ep, types + ["format"]


def lr_schedule(opt, steps: int, constant: bool = False):
    """The warm starts' learning-rate schedule: linear warm-up over 5 % of ``steps``, then a cosine decay to 0
    (or the peak held, ``constant``)."""
    warm = max(1, steps // 20)
    if constant:
        return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm))
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps))))


def _accuracy(logits: torch.Tensor, batch, types: list[list[str]]) -> dict[str, float]:
    """Teacher-forced accuracy (``acc/<type>``) and mean ``1 - p(y)`` (``uncertainty/<type>``) per token type."""
    right = (logits.argmax(-1) == batch["response_ids"]) & batch["response_mask"]
    p_y = torch.softmax(logits.float(), -1).gather(-1, batch["response_ids"][..., None]).squeeze(-1)
    out = {}
    for kind in TOKEN_TYPES:
        sel = torch.zeros_like(right)
        for i, ts in enumerate(types):
            sel[i, : len(ts)] = torch.tensor([t == kind for t in ts])
        sel &= batch["response_mask"]
        if sel.any():
            out[f"acc/{kind}"] = float((right & sel).sum() / sel.sum())
            out[f"uncertainty/{kind}"] = float((1 - p_y)[sel].mean())
    return out


def checkpoint_diff(saved: dict, config: dict) -> dict:
    """Fields (other than ``threads``, ``out`` and ``device``) on which a checkpoint's config and ``config`` differ:
    ``{field: (checkpoint, now)}``. A field the checkpoint predates counts at its default, which is
    what that checkpoint trained with."""
    defaults = {f.name: f.default for f in dataclasses.fields(WarmStartConfig)}
    plain = {k: list(v) if isinstance(v, tuple) else v for k, v in config.items()}
    old = {**{k: list(v) if isinstance(v, tuple) else v for k, v in defaults.items() if k not in saved}, **saved}
    return {k: (old.get(k), v) for k, v in plain.items() if k not in ("threads", "out", "device") and old.get(k) != v}


def warmstart(cfg: WarmStartConfig, env: SkillSlateEnv | None = None, progress: bool = True):
    """Train (or resume) one warm-start stage; save the model to ``cfg.out``; return ``(model, tokenizer)``."""
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(cfg.threads)
    seed_everything(cfg.seed)
    env = env or SkillSlateEnv(horizons=cfg.horizons, step_echo=cfg.step_echo, step_note=cfg.step_note)
    envs = [env] + [SkillSlateEnv(horizons=cfg.horizons, table_seed=k, step_echo=cfg.step_echo,
                                  step_note=cfg.step_note) for k in range(1, cfg.table_seeds + 1)]
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.init:
        model, tokenizer = AutoModelForCausalLM.from_pretrained(cfg.init, **LOAD_KWARGS), load_tokenizer(cfg.init)
    else:
        tokenizer = load_tokenizer()
        model = tiny_llama(tokenizer)
    extended = extend_tokenizer(tokenizer, env.vocabulary())
    if len(extended) != len(tokenizer):  # new words (a note's): fresh embedding rows, every old id kept
        tokenizer = extended
        model.resize_token_embeddings(len(tokenizer))
    device = devices.resolve(cfg.device)
    devices.check_bf16(device, cfg.bf16)
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01, betas=(0.9, 0.98))
    sched = lr_schedule(opt, cfg.steps, cfg.constant_lr)
    ckpt, log_path = out / "checkpoint.pt", out / "train_log.jsonl"
    config = dataclasses.asdict(cfg)
    start = 0
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=False, map_location=device)
        diff = checkpoint_diff(state["config"], config)
        if diff:
            raise ValueError(f"{ckpt}: written with other settings; differing fields (checkpoint, now): {diff}")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        start = state["step"]
    logs.truncate_jsonl(log_path, start)  # drop log lines past the checkpoint (a run killed between the two)
    bar = tqdm(range(start, cfg.steps), desc=f"warm start ({cfg.read_pool})", disable=not progress,
               initial=start, total=cfg.steps)
    model.train()
    t0 = time.perf_counter()
    for step in bar:
        rng = np.random.default_rng(stream_seed(cfg.seed, step, 1))
        tasks = env.sample_tasks(cfg.batch_size, split="train", seed=stream_seed(cfg.seed, step, 2))
        episodes, types = [], []
        for k, task in enumerate(tasks):
            e = env
            if len(envs) > 1:  # the same chain under another table set: its gold lines change with the values
                e = envs[int(rng.integers(len(envs)))]
                task = e.make_task(task.domain, task.family, task.variant, task.start, task.horizon)
            slate = e.slate(task, seed=stream_seed(cfg.seed, step, 3, k))
            ep, ty = demo_episode(e, tokenizer, task, slate, demonstration_reads(slate, rng, cfg), rng)
            episodes.append(ep)
            types.append(ty)
        batch = {k: v.to(device) for k, v in pack(episodes, tokenizer.pad_token_id).items()}
        with devices.autocast(device, cfg.bf16):
            logits = response_logits(model, batch)
        mask = batch["response_mask"]
        weight = mask.float()
        if cfg.variant_weight != 1.0 or cfg.value_weight != 1.0:
            scale = {"variant": cfg.variant_weight, "value": cfg.value_weight}
            for i, ts in enumerate(types):
                weight[i, : len(ts)] *= torch.tensor([scale.get(t, 1.0) for t in ts], device=device)
        logp = torch.gather(torch.log_softmax(logits, -1), 2, batch["response_ids"][..., None]).squeeze(-1)
        loss = -(logp * weight).sum() / weight.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if (step + 1) % cfg.log_every == 0 or step + 1 == cfg.steps:
            row = {"step": step + 1, "loss": loss.item(), "lr": sched.get_last_lr()[0],
                   "elapsed_s": round(time.perf_counter() - t0, 1), **_accuracy(logits.detach(), batch, types)}
            with open(log_path, "a") as f:
                f.write(json.dumps(row) + "\n")
            bar.set_postfix(loss=f"{row['loss']:.3f}", variant=f"{row.get('acc/variant', float('nan')):.2f}",
                            value=f"{row.get('acc/value', float('nan')):.2f}")
        if (step + 1) % cfg.checkpoint_every == 0 and step + 1 < cfg.steps:
            state = {"step": step + 1, "config": json.loads(json.dumps(config)), "model": model.state_dict(),
                     "optimizer": opt.state_dict(), "scheduler": sched.state_dict()}
            logs.atomic_torch_save(state, ckpt)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "warmstart_config.json").write_text(json.dumps(config, indent=2) + "\n")
    ckpt.unlink(missing_ok=True)
    return model, tokenizer


def warmstart_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m skillgate_lib warmstart", description=WarmStartConfig.__doc__)
    add_fields(parser, WarmStartConfig)
    cfg = from_args(WarmStartConfig, parser.parse_args(argv))
    warmstart(cfg)
    print(f"saved the warm-started model to {cfg.out}")
    return 0


main = warmstart_main
