"""LoRA GRPO on the skill-slate environment with a chosen credit assigner, for any causal LM.

One code path for every model (``--model tiny``, ``smollm2-135m``, or a Hugging Face
id / local path): :func:`train` rolls out G trajectories per prompt, assigns credit
with an assigner from :data:`skillgate_lib.credit.ASSIGNERS`, takes a clipped
policy-gradient step on the LoRA weights, evaluates on held-out tasks
(:mod:`skillgate_lib.evaluate`) and writes the run artifacts of :mod:`skillgate_lib.logs`
plus the final adapter (``run_dir/adapter``).

Seeding: every random draw of step ``s`` comes from generators seeded with
``(seed, s)``, so a run resumed from a checkpoint at step ``s`` draws exactly what
the uninterrupted run drew.

Length (over 400 lines): a fifth is :class:`TrainConfig`, one documented field per
setting; the rest is the one job of running GRPO (set-up, the step, checkpoints, the CLI).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from skillgate_lib import credit as credit_lib
from skillgate_lib import logs, methods, paths
from skillgate_lib.batching import pack, response_logprobs
from skillgate_lib.cli import add_fields, from_args
from skillgate_lib.env import SkillSlateEnv
from skillgate_lib.evaluate import EVAL_SEED, evaluate, summarize
from skillgate_lib.models import load_policy, model_fingerprint
from skillgate_lib.records import episode_rows, group_sample
from skillgate_lib.rollout import Episode, generate
from skillgate_lib.seeding import seed_everything, stream_seed

# --------------------------------------------------------------------------- GRPO


@dataclass
class TrainConfig:
    """LoRA GRPO with a chosen credit assigner. Defaults are the kit's embedded-model recipe."""

    model: str = "tiny"
    """``tiny`` (committed warm start), ``smollm2-135m``, or a Hugging Face id / local path."""
    credit: str = "skillgate"
    """Credit assigner: one of skillgate_lib.credit.ASSIGNERS."""
    method: str = ""
    """A method of skillgate_lib.methods.METHODS; sets credit and skill_free from its entry (empty: the method they name)."""
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
    max_new_tokens: int = 160
    """Cap on response tokens (policy + environment)."""
    step_failure: float = 0.0
    """Injected per-step execution failure probability in the training reward (0 = only the model's own errors)."""
    eval_step_failure: float = 0.0
    """Injected per-step failure in the held-out evaluation (0 = measure the policy itself)."""
    skill_free: bool = False
    """Skill-free RL: no slate in the prompt and every read answered with an error."""
    domains: tuple[str, ...] = ()
    """Training domains (empty = all five); e.g. four for a held-out-domain run."""
    eval_domains: tuple[str, ...] = ()
    """Evaluation domains (empty = all five)."""
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
    """Output directory; default build/runs/<method>-seed<seed>."""

    def __post_init__(self) -> None:
        if self.method:
            m = methods.get(self.method)
            if not m.trainable:
                raise ValueError(f"method: {m.name!r} is a results-only row; choose one of {', '.join(methods.trainable())}")
            self.credit, self.skill_free = m.credit, m.skill_free
        if self.credit not in credit_lib.ASSIGNERS:
            raise ValueError(f"credit: unknown assigner {self.credit!r}; choose one of {', '.join(credit_lib.ASSIGNERS)}")
        if not self.method:
            self.method = methods.of_config({"credit": self.credit, "skill_free": self.skill_free})
        for name in ("steps", "prompts_per_step", "eval_every", "eval_tasks", "checkpoint_every", "log_train_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 (GRPO normalises within a group), got {self.group_size}")
        if not self.run_dir:
            self.run_dir = str(paths.BUILD_DIR / "runs" / f"{self.method}-seed{self.seed}")


def _lora(model, cfg: TrainConfig):
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(stream_seed(cfg.seed, 0, 99))
    lora = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=0.0, target_modules=list(cfg.lora_targets),
                      bias="none", task_type="CAUSAL_LM")
    return get_peft_model(model, lora)


class Trainable(NamedTuple):
    """What GRPO steps update and read, as :func:`setup_training` builds it."""

    model: Any
    """The policy: the base model wrapped with LoRA adapters (only those train)."""
    params: list[torch.nn.Parameter]
    """The trainable (LoRA) parameters."""
    opt: torch.optim.Optimizer
    """AdamW over ``params`` (no weight decay)."""
    ccfg: credit_lib.CreditConfig
    """The credit settings of the run."""
    skill_values: credit_lib.SkillValues | None
    """Fresh running per-skill values when the run's method needs them, else None."""


def setup_training(base, cfg: TrainConfig) -> Trainable:
    """LoRA on ``base`` (its init seeded from ``cfg.seed``), AdamW, credit settings and skill values of a run.

    The one set-up :func:`train` and the GRPO-step benchmark share, so a benchmarked step is the trained one.
    """
    model = _lora(base, cfg)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    ccfg = credit_lib.CreditConfig(selector_coef=cfg.selector_coef, shaping_bonus=cfg.shaping_bonus,
                                   scale_rewards=cfg.scale_rewards)
    skill_values = credit_lib.SkillValues() if methods.get(cfg.method).needs_skill_values else None
    return Trainable(model, params, opt, ccfg, skill_values)


def _credit_inputs(episodes: list[Episode], batch, skill_values=None) -> credit_lib.CreditInputs:
    return credit_lib.CreditInputs(
        rewards=torch.tensor([float(e.outcome.reward) for e in episodes], dtype=torch.float64),
        group=torch.tensor([e.group for e in episodes], dtype=torch.long),
        response_mask=batch["response_mask"],
        reads=[e.read_spans for e in episodes],
        read_names=[list(e.read_names) for e in episodes],
        skill_values=skill_values,
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
    batch = pack(teachers, tokenizer.pad_token_id)
    logp = response_logprobs(model, batch)
    mask = batch["response_mask"]
    return -(logp * mask).sum() / mask.sum()


def _checkpoint_path(run_dir: Path) -> Path:
    return run_dir / "checkpoint.pt"


def _save_checkpoint(run_dir: Path, model, opt, step: int, skill_values=None) -> None:
    from peft import get_peft_model_state_dict

    state = {"step": step, "adapter": get_peft_model_state_dict(model), "optimizer": opt.state_dict(),
             "skill_values": skill_values}
    logs.atomic_torch_save(state, _checkpoint_path(run_dir))


def _config_record(cfg: TrainConfig) -> dict:
    record = {**dataclasses.asdict(cfg), "eval_seed": EVAL_SEED, "model_fingerprint": model_fingerprint(cfg.model)}
    return json.loads(json.dumps(record))


#: Settings a resumed run may change without changing its numbers.
_RESUMABLE = {"threads", "run_dir", "steps"}  # a longer budget continues the same run


def check_resume_config(run_dir: Path, cfg: TrainConfig) -> None:
    """Refuse to resume (or reuse) a run with other settings or model weights, naming every differing field."""
    old = logs.read_config(run_dir)
    new = _config_record(cfg)
    diff = {k: (old.get(k), new[k]) for k in new if k not in _RESUMABLE and k in old and old.get(k) != new[k]}
    if diff:
        fields = ", ".join(f"{k}: {a!r} in the run, {b!r} now" for k, (a, b) in diff.items())
        raise ValueError(f"{run_dir}/config.json: cannot resume with different settings ({fields})")


def make_env(cfg: TrainConfig, train: bool = True) -> SkillSlateEnv:
    """The environment of a run: training (its failure rate, its domains) or evaluation."""
    domains = (cfg.domains if train else cfg.eval_domains) or None
    return SkillSlateEnv(step_failure=cfg.step_failure if train else cfg.eval_step_failure, domains=domains,
                         show_slate=not cfg.skill_free)


def step_items(env: SkillSlateEnv, cfg: TrainConfig, step: int) -> list[tuple]:
    """The ``(task, slate, group)`` rollout items of GRPO step ``step``: G copies of each prompt."""
    tasks = env.sample_tasks(cfg.prompts_per_step, split="train", seed=stream_seed(cfg.seed, step, 2))
    items = []
    for g, task in enumerate(tasks):
        slate = env.slate(task, seed=stream_seed(cfg.seed, step, 3, g))
        items += [(task, slate, g)] * cfg.group_size
    return items


def grpo_step(model, tokenizer, env: SkillSlateEnv, opt, params, cfg: TrainConfig, ccfg: credit_lib.CreditConfig,
              step: int, skill_values=None):
    """One GRPO step: roll out, assign credit, clipped policy-gradient update(s).

    Returns ``(episodes, credit, selector share (B,), metrics row)``. Every draw comes from
    generators seeded with ``(cfg.seed, step)``. A batch whose loss weights are all zero
    (every group filtered by dynamic sampling) takes no optimizer step.
    ``skill_values`` (the ``utility`` assigner's running per-skill averages) is read
    before and updated after the credit of this batch.
    """
    t0 = time.perf_counter()
    gen = torch.Generator().manual_seed(stream_seed(cfg.seed, step, 4))
    episodes = generate(model, tokenizer, env, step_items(env, cfg, step), cfg.max_new_tokens, cfg.temperature, gen,
                        score_rng=np.random.default_rng(stream_seed(cfg.seed, step, 5)))
    t_gen = time.perf_counter() - t0
    batch = pack(episodes, tokenizer.pad_token_id)
    inputs = _credit_inputs(episodes, batch, skill_values)
    cr = credit_lib.assign(cfg.credit, inputs, ccfg)
    if skill_values is not None:
        skill_values.update(inputs.read_names, inputs.rewards.tolist())
    adv = cr.advantages.float()
    w = cr.weights.float()
    mask = batch["response_mask"]
    model.train()
    old_logp = None
    loss = kl = grad_norm = torch.zeros(())
    updated = bool(w.abs().sum() > 0) or cr.bc_coef > 0
    if cfg.kl_coef > 0 and updated:
        with torch.no_grad(), model.disable_adapter():
            ref_logp = response_logprobs(model, batch)
    for _ in range(cfg.ppo_epochs if updated else 0):
        logp = response_logprobs(model, batch)
        if old_logp is None:
            old_logp = logp.detach()
        ratio = torch.exp(logp - old_logp)
        surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - cfg.clip_eps, 1 + cfg.clip_eps) * adv)
        loss = -(w * surrogate).sum()
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
    row = {"step": step + 1, "split": "train", "loss": loss.item(), "kl": kl.item(), "grad_norm": float(grad_norm),
           "updated": updated, "groups_filtered": int(getattr(cr, "groups_filtered", 0)),
           "reward": float(inputs.rewards.mean()),
           "selector_share": float(share[share > 0].mean()) if (share > 0).any() else 0.0,
           "time/generate_s": t_gen, "time/step_s": time.perf_counter() - t0, **summarize(episodes, "train")}
    return episodes, cr, share, row


def train(cfg: TrainConfig, progress: bool = True, resume: bool = False) -> pd.DataFrame:
    """Run LoRA GRPO; returns the metrics table (also in ``run_dir/metrics.jsonl``).

    ``resume=True`` continues from ``run_dir/checkpoint.pt`` and ends with the same
    metrics as an uninterrupted run; it refuses settings that differ from the run's
    ``config.json``. Without it, a ``run_dir`` that already holds a run is an error:
    nothing already written is overwritten by accident.
    """
    from peft import set_peft_model_state_dict

    torch.set_num_threads(cfg.threads)
    seed_everything(cfg.seed)
    run_dir = Path(cfg.run_dir)
    if not resume and (run_dir / "metrics.jsonl").exists():
        raise FileExistsError(f"{run_dir}: already holds a run; pass --resume to continue it or choose another --run-dir")
    if resume and (run_dir / "config.json").exists():
        check_resume_config(run_dir, cfg)
    writer = logs.RunWriter(run_dir)
    if resume:
        writer.remove_partial_writes()
    env, eval_env = make_env(cfg), make_env(cfg, train=False)
    base, tokenizer = load_policy(cfg.model)
    model, params, opt, ccfg, skill_values = setup_training(base, cfg)
    start = 0
    if resume and _checkpoint_path(run_dir).exists():
        state = torch.load(_checkpoint_path(run_dir), weights_only=False)
        set_peft_model_state_dict(model, state["adapter"])
        opt.load_state_dict(state["optimizer"])
        skill_values = state.get("skill_values", skill_values)
        start = state["step"]
        writer.truncate_metrics(after_step=start)
    elif resume:
        writer.truncate_metrics(after_step=-1)  # killed before its first checkpoint: start over
    writer.write_config(_config_record(cfg))

    def run_eval(step: int) -> dict:
        eps = evaluate(model, tokenizer, eval_env, cfg.eval_tasks, cfg.max_new_tokens, temperature=cfg.temperature)
        writer.write_trajectories(episode_rows(eps, step, "eval", cfg.credit), step=step, split="eval")
        row = {"step": step, "split": "eval", **summarize(eps)}
        writer.log_metrics(row)
        return row

    if start == 0:
        run_eval(0)
    bar = tqdm(range(start, cfg.steps), desc=f"{cfg.credit} seed {cfg.seed}", disable=not progress,
               initial=start, total=cfg.steps)
    for step in bar:
        episodes, cr, share, row = grpo_step(model, tokenizer, env, opt, params, cfg, ccfg, step, skill_values)
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
            _save_checkpoint(run_dir, model, opt, step + 1, skill_values)
    _save_adapter(model, run_dir)
    return logs.read_metrics(run_dir)


def _save_adapter(model, run_dir: Path) -> None:
    """The final LoRA adapter in ``run_dir/adapter`` (written to a temporary folder, then renamed)."""
    import shutil

    tmp, final = run_dir / ".adapter.tmp", run_dir / "adapter"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)


def train_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m skillgate_lib train", description=TrainConfig.__doc__)
    add_fields(parser, TrainConfig)
    parser.add_argument("--resume", action="store_true", help="continue from run_dir/checkpoint.pt")
    args = parser.parse_args(argv)
    cfg = from_args(TrainConfig, args)
    metrics = train(cfg, resume=args.resume)
    last = metrics.query("split == 'eval'").iloc[-1]
    print(f"{cfg.credit} seed {cfg.seed}: eval success {last['eval/success']:.3f}, oracle read "
          f"{last['eval/oracle_read']:.3f}, misleading read {last['eval/misleading_read']:.3f} -> {cfg.run_dir}")
    return 0


main = train_main
