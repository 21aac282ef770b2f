"""LoRA GRPO on the skill-slate environment with a chosen credit assigner, for any causal LM.

One code path for every model (``--model tiny``, ``smollm2-135m``, or a Hugging Face
id / local path): :func:`train` rolls out G trajectories per prompt, assigns credit
with an assigner from :data:`skillgate_lib.credit.ASSIGNERS`, takes a clipped
policy-gradient step on the LoRA weights, evaluates on held-out tasks
(:mod:`skillgate_lib.runs.evaluate`) and writes the run artifacts of :mod:`skillgate_lib.logs`
plus the final adapter (``run_dir/adapter``).

Seeding: every random draw of step ``s`` comes from generators seeded with
``(seed, s)``, so a run resumed from a checkpoint at step ``s`` draws exactly what
the uninterrupted run drew.
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
from skillgate_lib.cli import add_fields, from_args
from skillgate_lib.env import SkillSlateEnv, regimes
from skillgate_lib.env.chat import RENDERINGS, rendered
from skillgate_lib.policy import devices
from skillgate_lib.policy.batching import pack, response_logprobs
from skillgate_lib.policy.models import is_embedded, load_policy, model_fingerprint
from skillgate_lib.policy.rollout import Episode, generate
from skillgate_lib.runs import optimizers, tracking
from skillgate_lib.runs.choice import call_episode, choice_summary, oracle_choice
from skillgate_lib.runs.evaluate import EVAL_SEED, evaluate, heldout_pairs, summarize
from skillgate_lib.runs.records import credit_inputs, episode_rows, group_sample
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
    """Learning rate (step size) of the LoRA weights' optimizer."""
    optimizer: str = "adamw"
    """Optimizer of the LoRA weights: adamw (the recipe), sgd, or nsgd (a step of length lr along the whole gradient)."""
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
    kl_coef: float = 3e-5
    """Coefficient of the low-variance (k3) KL to the frozen base model, the reference's 3e-5 (0 skips the reference forward)."""
    filter_groups: bool = True
    """Drop prompt groups whose rewards all agree before the update and refill the batch (dynamic sampling), in every RL arm."""
    max_draws: int = 2
    """Rounds of prompts_per_step prompts drawn per step to fill prompts_per_step kept groups (the reference draws 2x)."""
    selector_coef: float = 0.2
    """lambda: selector-channel weight (skillgate) or selection-BC weight (selection_bc)."""
    shaping_bonus: float = 0.5
    """Reward bonus for reading the oracle (shaped)."""
    scale_rewards: bool = True
    """Divide outcome advantages by the group std."""
    temperature: float = 1.0
    """Sampling temperature for rollouts and evaluation."""
    max_new_tokens: int | None = None
    """Cap on response tokens, policy + environment (default: the regime's)."""
    render: str = "auto"
    """How the episode is written: auto (the chat rendering of skillgate_lib.env.chat for a model whose tokenizer has a chat
    template, else the word format), words or chat."""
    regime: str = "easy"
    """Environment preset of skillgate_lib.env.regimes.REGIMES; the knobs below override it when given."""
    step_failure: float | None = None
    """Injected per-step failure probability, in training and evaluation alike (default: the regime's)."""
    lookalike_agreement: float | None = None
    """Fraction of keys on which a look-alike's table agrees with the oracle's (default: the regime's)."""
    horizons: tuple[int, ...] = ()
    """Task horizons, drawn uniformly (default: the regime's)."""
    step_echo: int | None = None
    """Times each step line restates the task (policy tokens per step; default: the regime's)."""
    step_note: int | None = None
    """Free words that end each step line (default: the regime's)."""
    skill_free: bool = False
    """Skill-free RL: trained with no slate and every read answered with an error; evaluated on the slate protocol."""
    domains: tuple[str, ...] = ()
    """Training domains (empty = all five); e.g. four for a held-out-domain run."""
    eval_domains: tuple[str, ...] = ()
    """Evaluation domains (empty = all five)."""
    eval_every: int = 10
    """Held-out evaluation every N steps (and at the end)."""
    eval_tasks: int = 256
    """Held-out instances per evaluation."""
    eval_split: str = "val"
    """Held-out set of the periodic evaluations: val (the validation part), or eval (the whole pool)."""
    log_train_every: int = 5
    """Write the training trajectories of every N-th step (all eval trajectories are written)."""
    checkpoint_every: int = 10
    """Atomic checkpoint (adapter, optimizer, step) every N steps, at the end, and after any step that finds a
    request (:data:`CHECKPOINT_REQUEST`) newer than the run's checkpoint."""
    threads: int = 2
    """torch CPU threads."""
    device: str = "auto"
    """Where the policy runs: auto (CUDA when present), cpu or cuda. Sampling draws from the CPU stream on any device."""
    bf16: bool | None = None
    """bf16 autocast of the forward passes (CUDA, or a CPU with native bf16 matmuls; :mod:`skillgate_lib.policy.devices`),
    else fp32. Unset: on for a pretrained model where bf16 pays, off for the embedded tiny model (resolved when the
    config is made, so a run's config.json records which)."""
    length_buckets: int = 4
    """Row groups of similar response length in the update's forwards (1 = one batch padded to the longest
    response). Speed only: the numbers agree up to rounding, like ``threads``."""
    report_to: tuple[str, ...] = ()
    """Trackers beside metrics.jsonl: tensorboard, wandb (offline), trackio."""
    run_dir: str = ""
    """Output directory; default build/runs/<method>-seed<seed>."""

    def __post_init__(self) -> None:
        if self.bf16 is None:
            self.bf16 = devices.resolve_bf16(None, self.device, is_embedded(self.model))
        if self.method:
            m = methods.get(self.method)
            if not m.trainable:
                raise ValueError(f"method: {m.name!r} is a results-only row; choose one of {', '.join(methods.trainable())}")
            self.credit, self.skill_free = m.credit, m.skill_free
        if self.credit not in credit_lib.ASSIGNERS:
            raise ValueError(f"credit: unknown assigner {self.credit!r}; choose one of {', '.join(credit_lib.ASSIGNERS)}")
        if not self.method:
            self.method = methods.of_config({"credit": self.credit, "skill_free": self.skill_free})
        for name in ("steps", "prompts_per_step", "eval_every", "eval_tasks", "checkpoint_every", "log_train_every",
                     "length_buckets"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.optimizer not in optimizers.OPTIMIZERS:
            raise ValueError(f"optimizer: unknown {self.optimizer!r}; choose one of {', '.join(optimizers.OPTIMIZERS)}")
        if self.render not in RENDERINGS:
            raise ValueError(f"render must be one of {', '.join(RENDERINGS)}, got {self.render!r}")
        if self.eval_split not in ("val", "eval"):
            raise ValueError(f"eval_split must be 'val' or 'eval' (the test set is for reported numbers only), got {self.eval_split!r}")
        if self.max_draws < 1:
            raise ValueError(f"max_draws must be >= 1, got {self.max_draws}")
        preset = regimes.get(self.regime)
        for name in ("step_failure", "lookalike_agreement", "step_echo", "step_note", "max_new_tokens"):
            if getattr(self, name) is None:
                setattr(self, name, getattr(preset, name))
        self.horizons = tuple(self.horizons) or preset.horizons
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
    """The run's optimizer over ``params`` (:mod:`skillgate_lib.runs.optimizers`; AdamW by default, no weight decay)."""
    ccfg: credit_lib.CreditConfig
    """The credit settings of the run."""
    skill_values: credit_lib.SkillValues | None
    """Fresh running per-skill values when the run's method needs them, else None."""


def setup_training(base, cfg: TrainConfig) -> Trainable:
    """LoRA on ``base`` (its init seeded from ``cfg.seed``), its optimizer, credit settings and skill values of a run.

    The one set-up :func:`train` and the GRPO-step benchmark share, so a benchmarked step is the trained one.
    """
    model = _lora(base, cfg)
    if cfg.bf16:  # every forward of a bf16 run is under autocast, which would cast these on each call
        devices.frozen_weights_in_bf16(model)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = optimizers.build(cfg.optimizer, params, cfg.lr)
    ccfg = credit_lib.CreditConfig(selector_coef=cfg.selector_coef, shaping_bonus=cfg.shaping_bonus,
                                   scale_rewards=cfg.scale_rewards, filter_groups=cfg.filter_groups)
    skill_values = credit_lib.SkillValues() if methods.get(cfg.method).needs_skill_values else None
    return Trainable(model, params, opt, ccfg, skill_values)


def selection_ce(model, tokenizer, env: SkillSlateEnv, pairs, whole_call: bool = False) -> torch.Tensor:
    """Mean cross-entropy of the oracle's read call after each ``(task, slate)`` prompt.

    ``whole_call=False``: the name words only (the ``selection_bc_rl`` ablation's term);
    ``True``: opener, name words and closer (the reference's selection BC).
    """
    teachers = [call_episode(env, tokenizer, tokenizer(env.prompt(task, slate), add_special_tokens=False)["input_ids"], task,
                             slate, g, slate.oracle, "call" if whole_call else "name")
                for g, (task, slate) in enumerate(pairs)]
    batch = pack(teachers, tokenizer.pad_token_id)
    logp = response_logprobs(model, batch)
    mask = batch["response_mask"].to(logp.device)
    return -(logp * mask).sum() / mask.sum()


def _bc_loss(model, tokenizer, env: SkillSlateEnv, episodes: list[Episode]) -> torch.Tensor:
    """:func:`selection_ce` on the name words, one teacher sequence per prompt group of ``episodes``."""
    pairs = {e.group: (e.task, e.slate) for e in episodes}
    return selection_ce(model, tokenizer, env, list(pairs.values()))


def _checkpoint_path(run_dir: Path) -> Path:
    return run_dir / "checkpoint.pt"


#: A file that asks for a checkpoint now: ``touch RUN_DIR/checkpoint.now`` (or the study's directory, for every run
#: in it), and each run training there writes its checkpoint after the step in progress (and its evaluation), once
#: per touch. Before a machine is given back, it keeps the steps since the last due checkpoint: an interrupted run
#: resumes from any step to the same numbers (the module docstring). Nothing removes the file.
CHECKPOINT_REQUEST = "checkpoint.now"


def checkpoint_requested(run_dir: Path) -> bool:
    """Whether ``run_dir/checkpoint.now`` or its parent's is newer than the run's checkpoint (or it has none)."""
    ckpt = _checkpoint_path(run_dir)
    done = ckpt.stat().st_mtime_ns if ckpt.exists() else -1
    return any(r.exists() and r.stat().st_mtime_ns > done
               for r in (run_dir / CHECKPOINT_REQUEST, run_dir.parent / CHECKPOINT_REQUEST))


def _save_checkpoint(run_dir: Path, model, opt, step: int, skill_values=None) -> None:
    from peft import get_peft_model_state_dict

    state = {"step": step, "adapter": get_peft_model_state_dict(model), "optimizer": opt.state_dict(),
             "skill_values": skill_values}
    logs.atomic_torch_save(state, _checkpoint_path(run_dir))


def _config_record(cfg: TrainConfig) -> dict:
    record = {**dataclasses.asdict(cfg), "eval_seed": EVAL_SEED, "model_fingerprint": model_fingerprint(cfg.model)}
    return json.loads(json.dumps(record))


#: Settings a resumed run may change: the budget, where it writes, and speed knobs that change rounding only.
_RESUMABLE = {"threads", "length_buckets", "run_dir", "steps", "report_to", "device"}  # a longer budget continues the same run
#: What a run recorded before a field existed did as that field's value says here: a run whose
#: config.json lacks the field is compared against it (it trained without dynamic sampling, in
#: the environment now called ``easy``), so it never resumes under another protocol.
_BEFORE_FIELD = {"render": "auto", "eval_split": "eval", "filter_groups": False, "max_draws": 1, "regime": "easy", "lookalike_agreement": 0.0,
                 "horizons": list(range(1, 9)), "method": None, "step_echo": 0,
                 "step_note": 0, "optimizer": "adamw"}


def check_resume_config(run_dir: Path, cfg: TrainConfig) -> None:
    """Refuse to resume (or reuse) a run with other settings or model weights, naming every differing field."""
    old = logs.read_config(run_dir)
    new = _config_record(cfg)
    old = {**{k: v for k, v in _BEFORE_FIELD.items() if k not in old}, **old}
    if old.get("method") is None:
        old["method"] = methods.of_config(old)
    diff = {k: (old.get(k), new[k]) for k in new if k not in _RESUMABLE and k in old and old.get(k) != new[k]}
    if diff:
        fields = ", ".join(f"{k}: {a!r} in the run, {b!r} now" for k, (a, b) in diff.items())
        raise ValueError(f"{run_dir}/config.json: cannot resume with different settings ({fields})")


def make_env(cfg: TrainConfig, train: bool = True, tokenizer=None):
    """The environment of a run: training (its domains; no slate for skill-free RL) or evaluation.

    Both use the run's regime knobs. Evaluation always shows the slate: skill-free RL is
    trained without skills and evaluated on the standard protocol, as the reference does.
    With ``tokenizer``, the episode as the run's model sees it (``cfg.render``; :func:`~skillgate_lib.env.chat.rendered`).
    """
    domains = (cfg.domains if train else cfg.eval_domains) or None
    env = SkillSlateEnv(step_failure=cfg.step_failure, lookalike_agreement=cfg.lookalike_agreement,
                        horizons=cfg.horizons, step_echo=cfg.step_echo, step_note=cfg.step_note, domains=domains,
                        show_slate=not (cfg.skill_free and train))
    return env if tokenizer is None else rendered(env, tokenizer, cfg.render)


def step_items(env: SkillSlateEnv, cfg: TrainConfig, step: int, draw: int = 0) -> list[tuple]:
    """The ``(task, slate, group)`` rollout items of draw ``draw`` of GRPO step ``step``: G copies of each prompt.

    Group ids run on across draws (draw ``d`` holds groups ``d * prompts_per_step ...``).
    """
    extra = (draw,) if draw else ()
    tasks = env.sample_tasks(cfg.prompts_per_step, split="train", seed=stream_seed(cfg.seed, step, 2, *extra))
    items = []
    for k, task in enumerate(tasks):
        g = draw * cfg.prompts_per_step + k
        slate = env.slate(task, seed=stream_seed(cfg.seed, step, 3, g))
        items += [(task, slate, g)] * cfg.group_size
    return items


def _mixed(episodes: list[Episode]) -> dict[int, bool]:
    """Group id -> whether its rewards differ (the group survives dynamic sampling)."""
    rewards: dict[int, set[float]] = {}
    for e in episodes:
        rewards.setdefault(e.group, set()).add(float(e.outcome.reward))
    return {g: max(r) - min(r) > credit_lib.TIE_TOL for g, r in rewards.items()}


def sample_batch(model, tokenizer, env: SkillSlateEnv, cfg: TrainConfig,
                 step: int) -> tuple[list[Episode], list[Episode], dict]:
    """``(rollouts to train on, every rollout drawn, counts of what was drawn)`` of one GRPO step.

    The draws of :func:`sampling_rounds`, each rolled out by :func:`~skillgate_lib.policy.rollout.generate` on ``model``.
    """
    rounds = sampling_rounds(env, cfg, step, tokenizer.pad_token_id)
    request = next(rounds)
    while True:
        t0 = time.perf_counter()
        items, gen, score_rng = request
        with devices.autocast(next(model.parameters()).device, cfg.bf16):  # the update's precision
            episodes = generate(model, tokenizer, env, items, cfg.max_new_tokens, cfg.temperature, gen, score_rng=score_rng)
        try:
            request = rounds.send((episodes, time.perf_counter() - t0))
        except StopIteration as done:
            return done.value


def sampling_rounds(env: SkillSlateEnv, cfg: TrainConfig, step: int, pad: int):
    """The draws of one GRPO step and what is kept of them, as a generator that leaves the rollouts to its caller.

    Yields each draw's request ``(items, generator, score_rng)``: the ``(task, slate, group)``
    items to roll out, the sampling generator and the scoring generator, seeded from
    ``(cfg.seed, step)``. Receives ``(episodes of that draw, seconds they took)``. Returns (as
    ``StopIteration.value``) ``(rollouts to train on, every rollout drawn, counts of what was drawn)``.
    :func:`sample_batch` rolls a request out at once; :mod:`skillgate_lib.runs.multirun` rolls the
    requests of several runs out in one batch.

    Without ``filter_groups``: one draw of ``prompts_per_step`` groups. With it (the
    reference's dynamic sampling, every RL arm): draws of ``prompts_per_step`` fresh
    prompts, at most ``max_draws`` of them, until ``prompts_per_step`` groups whose rewards
    differ are in hand; groups whose rewards all agree are dropped, and the step trains on
    the kept groups (fewer when the draws run out). Counts: ``groups/filtered`` (all rewards
    equal), ``groups/surplus`` (mixed groups of the last draw beyond ``prompts_per_step``, not
    trained on), and how much selector signal the filter threw away: SkillGate-active reads
    (``u - mean u != 0``) in filtered groups.
    The first draw (groups ``< prompts_per_step``) is an unfiltered sample of the policy: the
    training metrics describe it.
    """
    kept: list[Episode] = []
    drawn: list[Episode] = []
    stats = {"groups/sampled": 0, "groups/kept": 0, "groups/filtered": 0, "groups/surplus": 0,
             "reads/selector_active": 0, "reads/selector_active_filtered": 0, "time/generate_s": 0.0}
    for draw in range(cfg.max_draws if cfg.filter_groups else 1):
        extra = (draw,) if draw else ()  # draw 0 keeps the streams of a step without dynamic sampling
        gen = torch.Generator().manual_seed(stream_seed(cfg.seed, step, 4, *extra))
        episodes, seconds = yield (step_items(env, cfg, step, draw), gen,
                                   np.random.default_rng(stream_seed(cfg.seed, step, 5, *extra)))
        stats["time/generate_s"] += seconds
        drawn += episodes
        mixed = _mixed(episodes)
        sel = credit_lib.selector_advantages(credit_inputs(episodes, pack(episodes, pad)))
        for e, adv in zip(episodes, sel):
            active = sum(a != 0.0 for a in adv)
            stats["reads/selector_active"] += active
            stats["reads/selector_active_filtered"] += active if cfg.filter_groups and not mixed[e.group] else 0
        stats["groups/sampled"] += len(mixed)
        if not cfg.filter_groups:
            stats["groups/kept"] = len(mixed)
            return episodes, drawn, stats
        room = cfg.prompts_per_step - stats["groups/kept"]
        keep = [g for g in sorted(mixed) if mixed[g]][:room]
        stats["groups/surplus"] += sum(mixed.values()) - len(keep)
        stats["groups/kept"] += len(keep)
        kept += [e for e in episodes if e.group in set(keep)]
        if stats["groups/kept"] >= cfg.prompts_per_step:
            break
    stats["groups/filtered"] = stats["groups/sampled"] - stats["groups/kept"] - stats["groups/surplus"]
    return kept, drawn, stats


def _policy_gradient(model, opt, params, batch: dict, cr: credit_lib.Credit, cfg: TrainConfig,
                     bc_loss=None) -> dict:
    """Clipped policy-gradient update(s) with the credit's per-token advantages and weights, plus the KL term."""
    device = next(model.parameters()).device
    adv, w, mask = (t.to(device) for t in (cr.advantages.float(), cr.weights.float(), batch["response_mask"]))
    model.train()
    old_logp = None
    loss = kl = grad_norm = torch.zeros(())
    logp_gap = float("nan")
    if cfg.kl_coef > 0:
        with torch.no_grad(), model.disable_adapter(), devices.autocast(device, cfg.bf16):
            ref_logp = response_logprobs(model, batch, buckets=cfg.length_buckets)
    for _ in range(cfg.ppo_epochs):
        with devices.autocast(device, cfg.bf16):
            logp = response_logprobs(model, batch, buckets=cfg.length_buckets)
        if old_logp is None:
            old_logp = logp.detach()
            if "sample_logp" in batch:  # the sampler's and the update's probabilities differ by rounding only
                gap = (old_logp - batch["sample_logp"].to(device))[mask]
                logp_gap = float(gap.abs().mean()) if gap.numel() else 0.0
        ratio = torch.exp(logp - old_logp)
        surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - cfg.clip_eps, 1 + cfg.clip_eps) * adv)
        loss = -(w * surrogate).sum()
        if cfg.kl_coef > 0:
            d = ref_logp - logp
            kl = ((torch.exp(d) - d - 1) * mask).sum() / mask.sum()
            loss = loss + cfg.kl_coef * kl
        if bc_loss is not None:
            with devices.autocast(device, cfg.bf16):
                loss = loss + cr.bc_coef * bc_loss()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    return {"loss": loss.item(), "kl": kl.item(), "grad_norm": float(grad_norm), "logp_gap": logp_gap}


def grpo_step(model, tokenizer, env: SkillSlateEnv, opt, params, cfg: TrainConfig, ccfg: credit_lib.CreditConfig,
              step: int, skill_values=None):
    """One GRPO step: roll out (with dynamic sampling), assign credit, clipped policy-gradient update(s).

    Returns ``(episodes trained on, credit, selector share (B,), metrics row, episodes of the
    groups filtered out)``; the credit and share are ``None`` when every drawn group was filtered (no optimizer
    step then, nor when the credit's weights are all zero). Every draw comes from generators seeded with
    ``(cfg.seed, step)``. ``skill_values`` (the ``utility`` assigner's running per-skill
    averages) is read before and updated after the credit of this batch.
    """
    t0 = time.perf_counter()
    sampled = sample_batch(model, tokenizer, env, cfg, step)
    return grpo_update(model, tokenizer, env, opt, params, cfg, ccfg, step, sampled, skill_values, t0)


def grpo_update(model, tokenizer, env: SkillSlateEnv, opt, params, cfg: TrainConfig, ccfg: credit_lib.CreditConfig,
                step: int, sampled: tuple, skill_values=None, t0: float | None = None):
    """The rest of :func:`grpo_step` once its rollouts ``sampled`` (:func:`sample_batch`'s triple) are in hand.

    ``t0``: the ``perf_counter`` time the step began (its ``time/step_s`` counts from there).
    """
    t0 = time.perf_counter() if t0 is None else t0
    episodes, drawn, stats = sampled
    first = [e for e in drawn if e.group < cfg.prompts_per_step]
    trained, mixed = {e.group for e in episodes}, _mixed(drawn)
    # the filtered groups (surplus mixed groups of the last draw are neither trained on nor logged)
    dropped = [e for e in drawn if e.group not in trained and not mixed[e.group]]
    cr = share = None
    update = {"loss": 0.0, "kl": 0.0, "grad_norm": 0.0, "logp_gap": float("nan")}
    updated = False
    if episodes:
        batch = pack(episodes, tokenizer.pad_token_id)
        inputs = credit_inputs(episodes, batch, skill_values)
        cr = credit_lib.assign(cfg.credit, inputs, ccfg)
        if skill_values is not None:  # every rollout drawn is an observation of the skill it executed
            seen = credit_inputs(drawn, pack(drawn, tokenizer.pad_token_id))
            skill_values.update(credit_lib.executed_read_names(seen), seen.rewards.tolist())
        updated = bool(cr.weights.abs().sum() > 0) or cr.bc_coef > 0
        if updated:
            bc = (lambda: _bc_loss(model, tokenizer, env, episodes)) if cr.bc_coef > 0 else None
            update = _policy_gradient(model, opt, params, batch, cr, cfg, bc)
        share = cr.selector_share(inputs)
    row = {"step": step + 1, "split": "train", **update, "updated": updated, **stats,
           "reward": float(np.mean([e.outcome.reward for e in first])),
           "selector_share": float(share[share > 0].mean()) if share is not None and (share > 0).any() else 0.0,
           "time/step_s": time.perf_counter() - t0, **summarize(first, "train")}
    return episodes, cr, share, row, dropped


def filtered_credit(episodes: list[Episode]) -> credit_lib.Credit:
    """The credit of rollouts dynamic sampling filtered out: zero advantage and weight everywhere (for the logs)."""
    n = len(episodes)
    return credit_lib.Credit(torch.zeros(n, 1), torch.zeros(n, 1), torch.zeros(n),
                             [[0.0] * len(e.read_spans) for e in episodes])


def sft_step(model, tokenizer, env: SkillSlateEnv, opt, params, cfg: TrainConfig, step: int):
    """One step of selection BC as the reference trains it: a LoRA supervised fine-tune, no RL.

    The cross-entropy of the oracle's whole first read call (opener, name words, closer)
    after the prompt, over ``prompts_per_step x group_size`` fresh training prompts (the
    same number of sequences as a GRPO step). Returns ``([], None, None, metrics row, [])``.
    """
    t0 = time.perf_counter()
    tasks = env.sample_tasks(cfg.prompts_per_step * cfg.group_size, split="train", seed=stream_seed(cfg.seed, step, 2))
    pairs = [(t, env.slate(t, seed=stream_seed(cfg.seed, step, 3, k))) for k, t in enumerate(tasks)]
    model.train()
    with devices.autocast(next(model.parameters()).device, cfg.bf16):
        loss = selection_ce(model, tokenizer, env, pairs, whole_call=True)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    row = {"step": step + 1, "split": "train", "loss": loss.item(), "kl": 0.0, "grad_norm": float(grad_norm),
           "updated": True, "time/step_s": time.perf_counter() - t0}
    return [], None, None, row, []


def train(cfg: TrainConfig, progress: bool = True, resume: bool = False, eval_cache: str | Path | None = None
          ) -> pd.DataFrame:
    """Run LoRA GRPO; returns the metrics table (also in ``run_dir/metrics.jsonl``).

    ``resume=True`` continues from ``run_dir/checkpoint.pt`` and ends with the same
    metrics as an uninterrupted run; it refuses settings that differ from the run's
    ``config.json``. Without it, a ``run_dir`` that already holds a run is an error:
    nothing already written is overwritten by accident. ``eval_cache``: a folder where runs
    sharing a warm start share their step-0 evaluation (:mod:`skillgate_lib.runs.warm_eval`).
    """
    run = TrainingRun(cfg, resume)
    if run.start == 0:
        run.log_eval(0, *run.first_evaluation(eval_cache))
    bar = tqdm(range(run.start, cfg.steps), desc=f"{cfg.credit} seed {cfg.seed}", disable=not progress,
               initial=run.start, total=cfg.steps)
    for step in bar:
        if run.finetune:
            result = sft_step(run.model, run.tokenizer, run.env, run.opt, run.params, cfg, step)
        else:
            result = grpo_step(run.model, run.tokenizer, run.env, run.opt, run.params, cfg, run.ccfg, step,
                               run.skill_values)
        row = run.log_step(step, result)
        if run.eval_due(step + 1):
            ev = run.log_eval(step + 1, run.evaluate())
            bar.set_postfix(eval_success=f"{ev['eval/success']:.2f}", oracle=f"{ev['eval/oracle_read']:.2f}")
        elif "reward" in row:
            bar.set_postfix(reward=f"{row['reward']:.2f}", kept=f"{row['groups/kept']}/{row['groups/sampled']}")
        run.checkpoint(step + 1)
    return run.finish()


class TrainingRun:
    """One training run's state and writes around its steps: what :func:`train` does besides the step itself.

    Opening a run checks its directory (an existing run without ``resume``, other settings
    on resume), seeds, loads the policy (or takes ``policy = (base model, tokenizer)``,
    which LoRA then wraps in place), restores the checkpoint and writes ``config.json``.
    :mod:`skillgate_lib.runs.multirun` opens several and steps them together; each writes what
    :func:`train` writes.
    """

    def __init__(self, cfg: TrainConfig, resume: bool = False, policy: tuple | None = None):
        from peft import set_peft_model_state_dict

        torch.set_num_threads(cfg.threads)
        seed_everything(cfg.seed)
        self.cfg, run_dir = cfg, Path(cfg.run_dir)
        if not resume and (run_dir / "metrics.jsonl").exists():
            raise FileExistsError(f"{run_dir}: already holds a run; pass --resume to continue it or choose another --run-dir")
        if resume and (run_dir / "config.json").exists():
            check_resume_config(run_dir, cfg)
        self.writer = writer = tracking.TrackedRunWriter(run_dir, cfg.report_to, _config_record(cfg))
        if resume:
            writer.remove_partial_writes()
        device = devices.resolve(cfg.device)
        devices.check_bf16(device, cfg.bf16)
        print(devices.precision_line(device, cfg.bf16), flush=True)
        base, self.tokenizer = policy if policy is not None else load_policy(cfg.model)
        self.env, self.eval_env = make_env(cfg, tokenizer=self.tokenizer), make_env(cfg, False, self.tokenizer)
        if device.type == "cpu" and sum(p.numel() for p in base.parameters()) > 10_000_000:
            devices.keep_freed_memory()  # a pretrained model's update reallocates gigabytes a step
        self.model, self.params, self.opt, self.ccfg, self.skill_values = setup_training(base.to(device), cfg)
        self.start = 0
        if resume and _checkpoint_path(run_dir).exists():
            state = torch.load(_checkpoint_path(run_dir), weights_only=False, map_location=device)
            set_peft_model_state_dict(self.model, state["adapter"])
            self.opt.load_state_dict(state["optimizer"])
            self.skill_values = state.get("skill_values", self.skill_values)
            self.start = state["step"]
            writer.truncate_metrics(after_step=self.start)
        elif resume:
            writer.truncate_metrics(after_step=-1)  # killed before its first checkpoint: start over
        writer.write_config(_config_record(cfg))
        self.finetune = methods.get(cfg.method).separate_finetune
        self._choice_pairs: list | None = None

    def eval_due(self, step: int) -> bool:
        """Whether the held-out evaluation runs after ``step`` steps (every ``eval_every``, and at the end)."""
        return step % self.cfg.eval_every == 0 or step == self.cfg.steps

    def evaluate(self) -> list[Episode]:
        """The held-out trials of a periodic evaluation of the policy as it is now."""
        cfg = self.cfg
        with devices.autocast(next(self.model.parameters()).device, cfg.bf16):  # as the policy samples in training
            return evaluate(self.model, self.tokenizer, self.eval_env, cfg.eval_tasks, cfg.max_new_tokens,
                            temperature=cfg.temperature, split=cfg.eval_split)

    def choice_probs(self) -> np.ndarray:
        """The choice alone, teacher-forced, on the evaluation's prompts (:mod:`skillgate_lib.runs.choice`)."""
        cfg = self.cfg
        if self._choice_pairs is None:
            self._choice_pairs = heldout_pairs(self.eval_env, cfg.eval_tasks, cfg.eval_split)
        with devices.autocast(next(self.model.parameters()).device, cfg.bf16):
            return oracle_choice(self.model, self.tokenizer, self.eval_env, self._choice_pairs)

    def first_evaluation(self, cache: str | Path | None = None) -> tuple[list[Episode], np.ndarray]:
        """The step-0 evaluation's episodes and choice probabilities: read from ``cache`` where a run sharing this
        warm start and these settings wrote them, else computed (and written there)."""
        from skillgate_lib.runs import warm_eval

        device = next(self.model.parameters()).device
        precision = devices.precision_line(device, self.cfg.bf16)
        hit = warm_eval.cached_evaluation(cache, self.cfg, precision, device) if cache is not None else None
        if hit is not None:
            return hit
        episodes, probs = self.evaluate(), self.choice_probs()
        if cache is not None:
            warm_eval.store_evaluation(cache, self.cfg, precision, episodes, probs, device)
        return episodes, probs

    def log_eval(self, step: int, episodes: list[Episode], choice: np.ndarray | None = None) -> dict:
        """Write an evaluation's trajectories and metrics row after ``step`` steps; returns the row.

        Beside the sampled trials' measures, the row holds the choice alone on the same prompts, teacher-forced
        (``eval/choice``, ``eval/choice_logit``; :mod:`skillgate_lib.runs.choice`): ``choice``, its probabilities
        where already measured, else measured here."""
        cfg = self.cfg
        self.writer.write_trajectories(episode_rows(episodes, step, "eval", cfg.credit), step=step, split="eval")
        summary = choice_summary(self.choice_probs() if choice is None else choice)
        row = {"step": step, "split": "eval", **summarize(episodes), **summary}
        self.writer.log_metrics(row)
        return row

    def log_step(self, step: int, result: tuple) -> dict:
        """Write step ``step``'s metrics row and, every ``log_train_every`` steps, its trajectories; returns the row.

        ``result``: what :func:`grpo_step` or :func:`sft_step` returns.
        """
        cfg, writer = self.cfg, self.writer
        episodes, cr, share, row, dropped = result
        writer.log_metrics(row)
        if (step + 1) % cfg.log_train_every == 0 and (episodes or dropped):
            # every rollout drawn: the kept groups with the credit they got, the filtered ones with none
            rows = episode_rows(episodes, step + 1, "train", cfg.credit, cr, share) if cr is not None else []
            rows += episode_rows(dropped, step + 1, "train", cfg.credit, filtered_credit(dropped))  # Share: k / L
            writer.write_trajectories(rows, step=step + 1, split="train")
            if episodes:
                writer.log_sample(group_sample(episodes, self.tokenizer, step + 1, group=episodes[0].group))
        return row

    def checkpoint(self, step: int) -> None:
        """The atomic checkpoint after ``step`` steps, when one is due (every ``checkpoint_every``, at the end, and when
        asked for: :data:`CHECKPOINT_REQUEST`)."""
        if step % self.cfg.checkpoint_every == 0 or step == self.cfg.steps or checkpoint_requested(Path(self.cfg.run_dir)):
            _save_checkpoint(Path(self.cfg.run_dir), self.model, self.opt, step, self.skill_values)

    def finish(self) -> pd.DataFrame:
        """Save the final adapter; the run's metrics table."""
        _save_adapter(self.model, Path(self.cfg.run_dir))
        return logs.read_metrics(self.cfg.run_dir)


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
