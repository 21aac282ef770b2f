"""SFT warm start and LoRA GRPO on the skill-slate environment, for any Hugging Face causal LM.

Two entry points, one code path for every model (``--model tiny``, ``smollm2-135m``,
or a Hugging Face id / local path):

* :func:`warmstart` trains the embedded tiny Llama on environment demonstrations
  whose reads follow a fixed mix that does *not* favour the oracle, and saves it
  (``data/models/tiny-sft``, committed, so later runs reuse it);
* :func:`train` runs LoRA GRPO from a warm-started model with a credit assigner
  from :data:`skillgate_lib.credit.ASSIGNERS`, evaluating on held-out tasks and
  writing the run artifacts of :mod:`skillgate_lib.logs`.

Seeding: every random draw of step ``s`` comes from generators seeded with
``(seed, s)``, so a run resumed from a checkpoint at step ``s`` draws exactly what
the uninterrupted run drew.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from skillgate_lib import credit as credit_lib
from skillgate_lib import logs, paths
from skillgate_lib.env import SkillSlateEnv, load_tokenizer
from skillgate_lib.rollout import Episode, generate
from skillgate_lib.seeding import seed_everything

TINY_SFT_DIR = paths.DATA_DIR / "models" / "tiny-sft"
#: Held-out evaluation instances are the same for every run, seed and method.
EVAL_SEED = 10_007


def _stream_seed(*parts: int) -> int:
    """A 63-bit seed for the stream identified by ``parts`` (e.g. (seed, step, purpose))."""
    return int(np.random.SeedSequence(list(parts)).generate_state(1, dtype=np.uint64)[0] >> 1)


# --------------------------------------------------------------------------- models


def tiny_llama(tokenizer, hidden: int = 128, layers: int = 4, heads: int = 4, intermediate: int = 384,
               max_positions: int = 768):
    """The embedded default: a ~1 M-parameter Llama over the environment's word-level vocabulary."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=max_positions,
        tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return LlamaForCausalLM(config)


def load_policy(spec: str):
    """``(model, tokenizer)`` for ``tiny`` (the committed warm start), ``smollm2-135m`` or an HF id/path."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if spec == "tiny":
        if not (TINY_SFT_DIR / "config.json").exists():
            raise FileNotFoundError(f"{TINY_SFT_DIR}: no warm-started model; run `python -m skillgate_lib warmstart` first")
        return AutoModelForCausalLM.from_pretrained(TINY_SFT_DIR), load_tokenizer(TINY_SFT_DIR)
    if spec == "smollm2-135m":
        from skillgate_lib.models import load_smollm2

        return load_smollm2()
    tokenizer = AutoTokenizer.from_pretrained(spec)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return AutoModelForCausalLM.from_pretrained(spec), tokenizer


# --------------------------------------------------------------------------- batching


def _pack(episodes: list[Episode], pad: int) -> dict[str, torch.Tensor]:
    """Right-padded prompt+response batch; response positions start at ``resp_start[i]``.

    Returns input_ids (B, S), attention_mask (B, S), response_mask (B, T) bool,
    response_ids (B, T) and the column of each response token in ``input_ids``.
    """
    B = len(episodes)
    S = max(len(e.prompt_ids) + len(e.response_ids) for e in episodes)
    T = max(len(e.response_ids) for e in episodes)
    input_ids = torch.full((B, S), pad, dtype=torch.long)
    attention = torch.zeros((B, S), dtype=torch.long)
    response_ids = torch.full((B, T), pad, dtype=torch.long)
    response_mask = torch.zeros((B, T), dtype=torch.bool)
    columns = torch.zeros((B, T), dtype=torch.long)
    for i, e in enumerate(episodes):
        P, R = len(e.prompt_ids), len(e.response_ids)
        input_ids[i, : P + R] = torch.tensor(e.prompt_ids + e.response_ids)
        attention[i, : P + R] = 1
        response_ids[i, :R] = torch.tensor(e.response_ids)
        response_mask[i, :R] = torch.tensor(e.policy_mask, dtype=torch.bool)
        columns[i] = torch.arange(P - 1, P - 1 + T).clamp(max=S - 1)  # logits at column c predict token c+1
    return dict(input_ids=input_ids, attention_mask=attention, response_ids=response_ids, response_mask=response_mask,
                columns=columns)


def _response_logprobs(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """(B, T) log-probabilities of the response tokens under ``model``."""
    device = next(model.parameters()).device
    logits = model(input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device)).logits
    cols = batch["columns"].to(device)
    picked = torch.gather(logits, 1, cols[..., None].expand(-1, -1, logits.shape[-1]))
    return torch.gather(F.log_softmax(picked.float(), -1), 2, batch["response_ids"].to(device)[..., None]).squeeze(-1)


# --------------------------------------------------------------------------- warm start


@dataclass
class WarmStartConfig:
    """SFT warm start of the embedded tiny model."""

    steps: int = 1500
    """Optimizer steps."""
    batch_size: int = 32
    """Demonstrations per step."""
    lr: float = 3e-3
    """Peak AdamW learning rate (cosine decay, 5 % warm-up)."""
    read_mix: tuple[float, ...] = (0.35, 0.35, 0.30)
    """P(1 read), P(2 reads), ...: how many skills a demonstration reads."""
    read_pool: str = "family"
    """Where demonstration reads are drawn from: ``family`` (oracle + misleading, uniformly: no
    preference for the oracle) or ``oracle`` (oracle only: the capacity check, never an RL start)."""
    seed: int = 0
    """Seed of the model init and the demonstration stream."""
    threads: int = 2
    """torch CPU threads."""
    out: str = str(TINY_SFT_DIR)
    """Where the warm-started model and tokenizer are saved."""


def demonstration_reads(task, slate, rng: np.random.Generator, cfg: WarmStartConfig) -> list[str]:
    """The skills a demonstration reads: a fixed mix that does not favour the oracle."""
    look_alikes = [c.name for c in slate.candidates if c.category in ("oracle", "misleading")]
    if cfg.read_pool == "oracle":
        return [slate.oracle]
    if cfg.read_pool != "family":
        raise ValueError(f"read_pool must be 'family' or 'oracle', got {cfg.read_pool!r}")
    n = int(rng.choice(len(cfg.read_mix), p=np.asarray(cfg.read_mix) / sum(cfg.read_mix))) + 1
    return list(rng.choice(look_alikes, size=min(n, len(look_alikes)), replace=False))


def _demo_episode(env: SkillSlateEnv, tokenizer, task, slate, reads: list[str]) -> Episode:
    """A demonstration as an :class:`Episode`: environment-inserted text gets no loss."""
    text = env.demonstration(task, slate, reads)
    outcome = env.score(task, slate, text)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    tool = outcome.tool_spans
    mask = [not any(s <= a and b <= e for s, e in tool) for a, b in enc["offset_mapping"]]
    ep = Episode(task, slate, 0, tokenizer(env.prompt(task, slate), add_special_tokens=False)["input_ids"])
    ep.response_ids = list(enc["input_ids"]) + [tokenizer.eos_token_id]
    ep.policy_mask = mask + [True]
    return ep


def warmstart(cfg: WarmStartConfig, env: SkillSlateEnv | None = None, progress: bool = True):
    """Train the tiny model from scratch on demonstrations; save it to ``cfg.out``; return it."""
    torch.set_num_threads(cfg.threads)
    seed_everything(cfg.seed)
    env = env or SkillSlateEnv()
    tokenizer = load_tokenizer()
    model = tiny_llama(tokenizer)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01, betas=(0.9, 0.98))
    warm = max(1, cfg.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / cfg.steps))))
    bar = tqdm(range(cfg.steps), desc="warm start", disable=not progress)
    model.train()
    for step in bar:
        rng = np.random.default_rng(_stream_seed(cfg.seed, step, 1))
        tasks = env.sample_tasks(cfg.batch_size, split="train", seed=_stream_seed(cfg.seed, step, 2))
        episodes = []
        for k, task in enumerate(tasks):
            slate = env.slate(task, seed=_stream_seed(cfg.seed, step, 3, k))
            episodes.append(_demo_episode(env, tokenizer, task, slate, demonstration_reads(task, slate, rng, cfg)))
        batch = _pack(episodes, tokenizer.pad_token_id)
        logp = _response_logprobs(model, batch)
        mask = batch["response_mask"]
        loss = -(logp * mask).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 20 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "warmstart_config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=2) + "\n")
    return model, tokenizer


# --------------------------------------------------------------------------- evaluation


def episode_rows(episodes: list[Episode], step: int, split: str, credit_name: str,
                 cr: credit_lib.Credit | None = None, share: torch.Tensor | None = None) -> list[dict]:
    """Trajectory-table rows (the schema of :mod:`skillgate_lib.logs`) for ``episodes``."""
    rows = []
    for i, e in enumerate(episodes):
        spans = e.read_spans
        o = e.outcome
        L = max(1, e.policy_tokens)
        k = sum(r.name_end - r.name_start for r in spans)
        rows.append(dict(
            step=step, split=split, group_id=f"{step}-{split}-{e.group}", rollout=i, task_id=e.task.task_id,
            domain=e.task.domain, horizon=e.task.horizon, response_tokens=L, reward=float(o.reward),
            success=bool(o.success), read_skills=list(e.read_names),
            read_categories=[r.category for r in spans], read_tok_start=[r.name_start for r in spans],
            read_tok_end=[r.name_end for r in spans],
            adv_exec=float(cr.adv_exec[i]) if cr is not None else 0.0,
            read_adv=[float(x) for x in cr.read_adv[i]] if cr is not None else [0.0] * len(spans),
            sel_weight=float(share[i]) if share is not None else min(1.0, k / L), credit=credit_name,
        ))
    return rows


def group_sample(episodes: list[Episode], tokenizer, step: int, group: int) -> dict:
    """One prompt group token by token, enough to recompute any credit assigner on it."""
    members = [e for e in episodes if e.group == group]
    return {
        "step": step, "group": group, "task_id": members[0].task.task_id, "horizon": members[0].task.horizon,
        "oracle": members[0].slate.oracle,
        "tokens": [tokenizer.convert_ids_to_tokens(e.response_ids) for e in members],
        "policy_mask": [[int(m) for m in e.policy_mask] for e in members],
        "reads": [[dataclasses.asdict(r) for r in e.read_spans] for e in members],
        "read_names": [list(e.read_names) for e in members],
        "rewards": [float(e.outcome.reward) for e in members],
    }


def summarize(episodes: list[Episode], prefix: str = "eval") -> dict[str, float]:
    """Trial success, oracle-read and misleading-read rates, reads per trial; overall, by domain and by horizon."""
    df = pd.DataFrame({
        "domain": [e.task.domain for e in episodes],
        "horizon": [e.task.horizon for e in episodes],
        "success": [float(e.outcome.success) for e in episodes],
        "oracle_read": [float(any(r.category == "oracle" for r in e.outcome.reads)) for e in episodes],
        "misleading_read": [float(any(r.category == "misleading" for r in e.outcome.reads)) for e in episodes],
        "invalid_read": [float(any(r.category == "invalid" for r in e.outcome.reads)) for e in episodes],
        "reads": [float(len(e.outcome.reads)) for e in episodes],
    })
    measures = ["success", "oracle_read", "misleading_read", "invalid_read", "reads"]
    out = {f"{prefix}/{m}": float(df[m].mean()) for m in measures}
    for key in ("domain", "horizon"):
        for value, sub in df.groupby(key):
            for m in ("success", "oracle_read", "misleading_read", "reads"):
                out[f"{prefix}/{m}/{key}={value}"] = float(sub[m].mean())
    return out


def evaluate(model, tokenizer, env: SkillSlateEnv, n_tasks: int, max_new_tokens: int, batch: int = 128,
             temperature: float = 1.0, domains=None) -> list[Episode]:
    """One sampled trial on each of ``n_tasks`` fixed held-out instances (same for every run)."""
    tasks = env.sample_tasks(n_tasks, split="eval", seed=EVAL_SEED, domains=domains)
    items = [(t, env.slate(t, seed=_stream_seed(EVAL_SEED, k)), k) for k, t in enumerate(tasks)]
    gen = torch.Generator().manual_seed(EVAL_SEED)
    episodes: list[Episode] = []
    for start in range(0, len(items), batch):
        episodes += generate(model, tokenizer, env, items[start: start + batch], max_new_tokens, temperature, gen,
                             score_rng=np.random.default_rng(_stream_seed(EVAL_SEED, start)))
    return episodes


# --------------------------------------------------------------------------- GRPO


@dataclass
class TrainConfig:
    """LoRA GRPO with a chosen credit assigner. Defaults are the kit's embedded-model recipe."""

    model: str = "tiny"
    """``tiny`` (committed warm start), ``smollm2-135m``, or a Hugging Face id / local path."""
    credit: str = "skillgate"
    """Credit assigner: one of skillgate_lib.credit.ASSIGNERS."""
    seed: int = 0
    """Seeds the LoRA init, task sampling and rollout sampling."""
    steps: int = 40
    """GRPO steps."""
    prompts_per_step: int = 8
    """Prompt groups per step."""
    group_size: int = 8
    """Rollouts per prompt (G)."""
    lr: float = 5e-3
    """AdamW learning rate of the LoRA weights."""
    lora_rank: int = 8
    """LoRA rank r."""
    lora_alpha: float = 16.0
    """LoRA alpha (scale alpha / r)."""
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    """Attention projections that get adapters; all other weights stay frozen."""
    clip_eps: float = 0.2
    """PPO-style ratio clip."""
    ppo_epochs: int = 1
    """Policy updates per batch of rollouts (1 = on-policy, ratio 1)."""
    kl_coef: float = 0.0
    """Coefficient of the k3 KL to the frozen base model (0 disables the reference forward)."""
    selector_coef: float = 0.2
    """lambda: selector-channel weight (skillgate) or selection-BC weight (selection_bc)."""
    shaping_bonus: float = 0.5
    """Reward bonus for reading the oracle (shaped)."""
    scale_rewards: bool = True
    """Divide outcome advantages by the group std."""
    temperature: float = 1.0
    """Sampling temperature for rollouts and evaluation."""
    max_new_tokens: int = 200
    """Cap on response tokens (policy + environment)."""
    step_failure: float = 0.0
    """Injected per-step execution failure probability (0 = only the model's own errors)."""
    eval_every: int = 10
    """Held-out evaluation every N steps (and at the end)."""
    eval_tasks: int = 256
    """Held-out instances per evaluation."""
    log_train_every: int = 5
    """Write the training trajectories of every N-th step (all eval trajectories are written)."""
    checkpoint_every: int = 10
    """Atomic checkpoint (adapter, optimizer, step) every N steps."""
    threads: int = 2
    """torch CPU threads."""
    run_dir: str = ""
    """Output directory; default build/runs/<credit>-seed<seed>."""

    def __post_init__(self) -> None:
        if self.credit not in credit_lib.ASSIGNERS:
            raise ValueError(f"credit: unknown assigner {self.credit!r}; choose one of {', '.join(credit_lib.ASSIGNERS)}")
        for name in ("steps", "prompts_per_step", "eval_every", "eval_tasks", "checkpoint_every", "log_train_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 (GRPO normalises within a group), got {self.group_size}")
        if not self.run_dir:
            self.run_dir = str(paths.BUILD_DIR / "runs" / f"{self.credit}-seed{self.seed}")


def _lora(model, cfg: TrainConfig):
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(_stream_seed(cfg.seed, 0, 99))
    lora = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=0.0, target_modules=list(cfg.lora_targets),
                      bias="none", task_type="CAUSAL_LM")
    return get_peft_model(model, lora)


def _credit_inputs(episodes: list[Episode], batch) -> credit_lib.CreditInputs:
    return credit_lib.CreditInputs(
        rewards=torch.tensor([float(e.outcome.reward) for e in episodes], dtype=torch.float64),
        group=torch.tensor([e.group for e in episodes], dtype=torch.long),
        response_mask=batch["response_mask"],
        reads=[e.read_spans for e in episodes],
    )


def _bc_loss(model, tokenizer, env: SkillSlateEnv, episodes: list[Episode]) -> torch.Tensor:
    """Mean cross-entropy of the oracle's name after the read tag, one teacher sequence per prompt."""
    teachers, seen = [], set()
    for e in episodes:
        if e.group in seen:
            continue
        seen.add(e.group)
        text = env.demonstration(e.task, e.slate, [e.slate.oracle])
        read = env.score(e.task, e.slate, text).reads[0]
        prefix = tokenizer(text[: read.char_end], add_special_tokens=False)["input_ids"]
        n_name = len(tokenizer(text[read.char_start: read.char_end], add_special_tokens=False)["input_ids"])
        teacher = Episode(e.task, e.slate, e.group, e.prompt_ids, response_ids=list(prefix),
                          policy_mask=[False] * (len(prefix) - n_name) + [True] * n_name)
        teachers.append(teacher)
    batch = _pack(teachers, tokenizer.pad_token_id)
    logp = _response_logprobs(model, batch)
    mask = batch["response_mask"]
    return -(logp * mask).sum() / mask.sum()


def _checkpoint_path(run_dir: Path) -> Path:
    return run_dir / "checkpoint.pt"


def _save_checkpoint(run_dir: Path, model, opt, step: int) -> None:
    from peft import get_peft_model_state_dict

    state = {"step": step, "adapter": get_peft_model_state_dict(model), "optimizer": opt.state_dict()}
    tmp = run_dir / ".checkpoint.pt.tmp"
    torch.save(state, tmp)
    os.replace(tmp, _checkpoint_path(run_dir))


def step_items(env: SkillSlateEnv, cfg: TrainConfig, step: int) -> list[tuple]:
    """The ``(task, slate, group)`` rollout items of GRPO step ``step``: G copies of each prompt."""
    tasks = env.sample_tasks(cfg.prompts_per_step, split="train", seed=_stream_seed(cfg.seed, step, 2))
    items = []
    for g, task in enumerate(tasks):
        slate = env.slate(task, seed=_stream_seed(cfg.seed, step, 3, g))
        items += [(task, slate, g)] * cfg.group_size
    return items


def grpo_step(model, tokenizer, env: SkillSlateEnv, opt, params, cfg: TrainConfig, ccfg: credit_lib.CreditConfig,
              step: int):
    """One GRPO step: roll out, assign credit, clipped policy-gradient update(s).

    Returns ``(episodes, credit, selector share (B,), metrics row)``. Every draw comes from
    generators seeded with ``(cfg.seed, step)``.
    """
    t0 = time.perf_counter()
    gen = torch.Generator().manual_seed(_stream_seed(cfg.seed, step, 4))
    episodes = generate(model, tokenizer, env, step_items(env, cfg, step), cfg.max_new_tokens, cfg.temperature, gen,
                        score_rng=np.random.default_rng(_stream_seed(cfg.seed, step, 5)))
    t_gen = time.perf_counter() - t0
    batch = _pack(episodes, tokenizer.pad_token_id)
    inputs = _credit_inputs(episodes, batch)
    cr = credit_lib.assign(cfg.credit, inputs, ccfg)
    adv = cr.advantages.float()
    w = cr.weights.float()
    mask = batch["response_mask"]
    model.train()
    old_logp = None
    if cfg.kl_coef > 0:
        with torch.no_grad(), model.disable_adapter():
            ref_logp = _response_logprobs(model, batch)
    for _ in range(cfg.ppo_epochs):
        logp = _response_logprobs(model, batch)
        if old_logp is None:
            old_logp = logp.detach()
        ratio = torch.exp(logp - old_logp)
        surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - cfg.clip_eps, 1 + cfg.clip_eps) * adv)
        loss = -(w * surrogate).sum()
        kl = torch.zeros(())
        if cfg.kl_coef > 0:
            d = ref_logp - logp
            kl = ((torch.exp(d) - d - 1) * mask).sum() / mask.sum()
            loss = loss + cfg.kl_coef * kl
        if cr.bc_coef > 0:
            loss = loss + cr.bc_coef * _bc_loss(model, tokenizer, env, episodes)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    share = cr.selector_share(inputs)
    row = {"step": step + 1, "split": "train", "loss": loss.item(), "kl": kl.item(), "grad_norm": grad_norm.item(),
           "reward": float(inputs.rewards.mean()), "selector_share": float(share[share > 0].mean()) if (share > 0).any() else 0.0,
           "time/generate_s": t_gen, "time/step_s": time.perf_counter() - t0, **summarize(episodes, "train")}
    return episodes, cr, share, row


def train(cfg: TrainConfig, progress: bool = True, resume: bool = False) -> pd.DataFrame:
    """Run LoRA GRPO; returns the metrics table (also in ``run_dir/metrics.jsonl``).

    ``resume=True`` continues from ``run_dir/checkpoint.pt`` and ends with the same
    metrics as an uninterrupted run. Without it, a ``run_dir`` that already holds a
    run is an error: nothing already written is overwritten by accident.
    """
    from peft import set_peft_model_state_dict

    torch.set_num_threads(cfg.threads)
    seed_everything(cfg.seed)
    run_dir = Path(cfg.run_dir)
    writer = logs.RunWriter(run_dir)
    env = SkillSlateEnv(step_failure=cfg.step_failure)
    base, tokenizer = load_policy(cfg.model)
    model = _lora(base, cfg)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    ccfg = credit_lib.CreditConfig(selector_coef=cfg.selector_coef, shaping_bonus=cfg.shaping_bonus,
                                   scale_rewards=cfg.scale_rewards)
    start = 0
    if not resume and (run_dir / "metrics.jsonl").exists():
        raise FileExistsError(f"{run_dir}: already holds a run; pass --resume to continue it or choose another --run-dir")
    if resume and _checkpoint_path(run_dir).exists():
        state = torch.load(_checkpoint_path(run_dir), weights_only=False)
        set_peft_model_state_dict(model, state["adapter"])
        opt.load_state_dict(state["optimizer"])
        start = state["step"]
        writer.truncate_metrics(after_step=start)
    elif resume:
        writer.truncate_metrics(after_step=-1)  # killed before its first checkpoint: start over
    writer.write_config({**dataclasses.asdict(cfg), "eval_seed": EVAL_SEED})

    def run_eval(step: int) -> dict:
        eps = evaluate(model, tokenizer, env, cfg.eval_tasks, cfg.max_new_tokens, temperature=cfg.temperature)
        writer.write_trajectories(episode_rows(eps, step, "eval", cfg.credit), step=step, split="eval")
        row = {"step": step, "split": "eval", **summarize(eps)}
        writer.log_metrics(row)
        return row

    if start == 0:
        run_eval(0)
    bar = tqdm(range(start, cfg.steps), desc=f"{cfg.credit} seed {cfg.seed}", disable=not progress,
               initial=start, total=cfg.steps)
    for step in bar:
        episodes, cr, share, row = grpo_step(model, tokenizer, env, opt, params, cfg, ccfg, step)
        writer.log_metrics(row)
        if (step + 1) % cfg.log_train_every == 0:
            writer.log_sample(group_sample(episodes, tokenizer, step + 1, group=0))
            writer.write_trajectories(episode_rows(episodes, step + 1, "train", cfg.credit, cr, share), step=step + 1,
                                      split="train")
        if (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps:
            ev = run_eval(step + 1)
            bar.set_postfix(reward=f"{row['reward']:.2f}", eval_success=f"{ev['eval/success']:.2f}",
                            oracle=f"{ev['eval/oracle_read']:.2f}")
        else:
            bar.set_postfix(reward=f"{row['reward']:.2f}", success=f"{row['train/success']:.2f}")
        if (step + 1) % cfg.checkpoint_every == 0 or step + 1 == cfg.steps:
            _save_checkpoint(run_dir, model, opt, step + 1)
    return logs.read_metrics(run_dir)


# --------------------------------------------------------------------------- comparison


#: The methods of the full comparison, in the paper's table order (``sft`` = the warm start, no RL).
METHODS = ("outcome", "masked_exec", "shaped", "selection_bc", "skillgate")


def compare(methods=METHODS, seeds=(0, 1, 2), out_dir: str | Path = paths.BUILD_DIR / "runs" / "compare",
            workers: int = 2, resume: bool = False, **overrides) -> pd.DataFrame:
    """Every method x seed with the same budget and settings; runs in ``workers`` processes.

    Each run writes ``out_dir/<method>-seed<seed>/``; returns the final-evaluation
    metrics, one row per run (the ``sft`` rows are each run's step-0 evaluation,
    which is the warm start itself since LoRA starts at zero).
    """
    import concurrent.futures as cf
    import multiprocessing as mp

    out_dir = Path(out_dir)
    configs = [TrainConfig(credit=m, seed=s, run_dir=str(out_dir / f"{m}-seed{s}"), threads=max(1, (os.cpu_count() or 2) // workers),
                           **overrides) for m in methods for s in seeds]
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
        futures = {pool.submit(_train_quietly, c, resume): c for c in configs}
        for fut in tqdm(cf.as_completed(futures), total=len(futures), desc="comparison runs"):
            fut.result()
    return final_metrics(out_dir)


def _train_quietly(cfg: TrainConfig, resume: bool) -> None:
    train(cfg, progress=False, resume=resume)


def final_metrics(out_dir: str | Path) -> pd.DataFrame:
    """One row per run under ``out_dir``: the first (``sft``) and last evaluation of each."""
    rows = []
    for run in sorted(p for p in Path(out_dir).iterdir() if (p / "metrics.jsonl").exists()):
        config = logs.read_config(run)
        ev = logs.read_metrics(run).query("split == 'eval'").sort_values("step")
        for method, rec in (("sft", ev.iloc[0]), (config["credit"], ev.iloc[-1])):
            rows.append({"method": method, "seed": config["seed"], "step": int(rec["step"]), "run": run.name,
                         **{k: rec[k] for k in ev.columns if k.startswith("eval/")}})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- command line


def _field_docs(cls) -> dict[str, str]:
    """Attribute docstrings of a dataclass (the string literal under each field)."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body
    docs = {}
    for node, nxt in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
            docs[node.target.id] = str(nxt.value.value)
    return docs


def _add_fields(parser: argparse.ArgumentParser, cls) -> None:
    docs = _field_docs(cls)
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        helptext = f"{docs.get(f.name, '')} (default: {default})"
        if isinstance(default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=helptext)
        elif isinstance(default, tuple):
            kind = type(default[0]) if default else str
            parser.add_argument(flag, nargs="+", type=kind, default=default, help=helptext)
        else:
            parser.add_argument(flag, type=type(default), default=default, help=helptext)


def _from_args(cls, args: argparse.Namespace):
    return cls(**{f.name: (tuple(v) if isinstance(v := getattr(args, f.name), list) else v) for f in dataclasses.fields(cls)})


def warmstart_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m skillgate_lib warmstart", description=WarmStartConfig.__doc__)
    _add_fields(parser, WarmStartConfig)
    cfg = _from_args(WarmStartConfig, parser.parse_args(argv))
    warmstart(cfg)
    print(f"saved the warm-started model to {cfg.out}")
    return 0


def train_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m skillgate_lib train", description=TrainConfig.__doc__)
    _add_fields(parser, TrainConfig)
    parser.add_argument("--resume", action="store_true", help="continue from run_dir/checkpoint.pt")
    args = parser.parse_args(argv)
    cfg = _from_args(TrainConfig, args)
    metrics = train(cfg, resume=args.resume)
    last = metrics.query("split == 'eval'").iloc[-1]
    print(f"{cfg.credit} seed {cfg.seed}: eval success {last['eval/success']:.3f}, oracle read "
          f"{last['eval/oracle_read']:.3f}, misleading read {last['eval/misleading_read']:.3f} -> {cfg.run_dir}")
    return 0


def compare_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m skillgate_lib compare", description=compare.__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(credit_lib.ASSIGNERS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--out-dir", type=Path, default=paths.BUILD_DIR / "runs" / "compare")
    parser.add_argument("--workers", type=int, default=2)
    shared = ("steps", "lr", "prompts_per_step", "eval_tasks", "eval_every", "log_train_every", "model")
    for name in shared:
        default = getattr(TrainConfig, name)
        parser.add_argument("--" + name.replace("_", "-"), type=type(default), default=default,
                            help=f"the same for every run (default: {default})")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    table = compare(args.methods, args.seeds, args.out_dir, args.workers, args.resume,
                    **{name: getattr(args, name) for name in shared})
    cols = ["eval/success", "eval/oracle_read", "eval/misleading_read", "eval/reads"]
    summary = table.groupby("method")[cols].agg(["mean", "std"])
    print(summary.round(3).to_string())
    print(f"wall time {time.perf_counter() - start:.0f}s")
    return 0


main = train_main


def learning_curves(out_dir: str | Path) -> pd.DataFrame:
    """Held-out evaluation by step for every run under ``out_dir``: columns method, seed, step, eval/*."""
    frames = []
    for run in sorted(p for p in Path(out_dir).iterdir() if (p / "metrics.jsonl").exists()):
        config = logs.read_config(run)
        ev = logs.read_metrics(run).query("split == 'eval'")
        frames.append(ev.assign(method=config["credit"], seed=config["seed"]))
    if not frames:
        raise FileNotFoundError(f"{out_dir}: no run directories (with metrics.jsonl) inside")
    cols = ["method", "seed", "step"] + sorted(c for c in frames[0].columns if c.startswith("eval/") and c.count("/") == 1)
    return pd.concat(frames, ignore_index=True)[cols]
