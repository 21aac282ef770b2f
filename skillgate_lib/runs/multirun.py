"""Several runs of one study trained together: their rollouts decoded in one batch, each row with its own run's adapter.

A study's runs share the base model and the regime and differ in method, seed and learning
rate or lambda. A run's step is mostly decode forwards of 32-64 rows, whose time goes to
per-forward overhead and to attention over copies of the prompts' keys and values
(``benchmarks/README.md``). :func:`train_together` steps ``K`` runs in lockstep:

* **Rollouts.** Each step's draws of every run (:func:`skillgate_lib.runs.train.sampling_rounds`:
  dynamic sampling asks for a second draw only in the runs that need one) are decoded in one
  loop by :class:`~skillgate_lib.policy.decoder.MultiLlama`: one forward for all runs' rows, each row
  with its own run's LoRA factors, each distinct prompt's keys and values held once. Every run
  samples its own rows from its own generator, seeded by ``(seed, step)`` as alone, in the
  order and number its own batch would hold (:func:`skillgate_lib.policy.rollout.decode`).
* **Evaluations.** Per run, as alone (bit for bit): batched, 128 distinct prompts a run, the
  decode's keys and values outgrow the caches and a batch of 2 or 4 runs took longer than the
  runs one after another (``benchmarks/README.md``).
* **Updates.** Per run, with the trainer's own code (:func:`skillgate_lib.runs.train.grpo_update`)
  on the run's own model, optimizer, credit and skill values.

Each run writes exactly what :func:`skillgate_lib.runs.train.train` writes (``config.json``,
``metrics.jsonl``, trajectories, checkpoints, adapter) and resumes from its checkpoint alike.
What differs is the rounding of the sampling logits (the batched decoder's arithmetic is not
bit for bit the model's own), so a run's episodes are the same as alone unless a draw falls
within that rounding of a boundary; ``tests/test_multirun.py`` trains a small study both ways
and compares. ``time/generate_s`` and ``time/step_s`` are wall times of the shared batch.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import pandas as pd
import torch

from skillgate_lib.policy import devices
from skillgate_lib.policy.decoder import MultiLlama, Unsupported
from skillgate_lib.policy.models import load_policy
from skillgate_lib.policy.rollout import Episode, Segment, decode, generate, response_limit
from skillgate_lib.runs.train import TrainConfig, TrainingRun, grpo_update, sampling_rounds, sft_step

#: Settings the runs trained together must share: the model and what shapes their batches.
SHARED = ("model", "device", "bf16", "threads", "max_new_tokens", "temperature")


def check_together(cfgs: list[TrainConfig]) -> None:
    """Refuse runs that cannot be batched, naming the run and the field that differs from the first's."""
    if not cfgs:
        raise ValueError("train_together: no runs given")
    dirs = [str(Path(c.run_dir).resolve()) for c in cfgs]
    if len(set(dirs)) < len(dirs):
        raise ValueError(f"train_together: two runs write the same run_dir ({sorted(d for d in dirs if dirs.count(d) > 1)[0]})")
    for c in cfgs[1:]:
        for name in SHARED:
            if getattr(c, name) != getattr(cfgs[0], name):
                raise ValueError(f"train_together: {c.run_dir} has {name}={getattr(c, name)!r} but {cfgs[0].run_dir} has "
                                 f"{getattr(cfgs[0], name)!r}; runs trained together share {', '.join(SHARED)}")


def generate_together(models: list, tokenizer, segments: list[Segment], max_new_tokens: int,
                      temperature: float) -> list[list[Episode]]:
    """Segment ``k`` rolled out by ``models[k]``, all in one batch; scored episodes per segment.

    The models are LoRA-wrapped copies of one base model (:class:`~skillgate_lib.policy.decoder.MultiLlama`);
    any other set is rolled out one segment after another with :func:`~skillgate_lib.policy.rollout.generate`.
    """
    for m in models:
        m.eval()
    max_new_tokens = max(response_limit(s.env, max_new_tokens) for s in segments) if segments else max_new_tokens
    try:  # the decoder is opened before any draw: a model it cannot batch leaves every generator untouched
        with torch.inference_mode():
            return decode(lambda runs: MultiLlama(models, runs, room=max_new_tokens), tokenizer, segments,
                          max_new_tokens, temperature)
    except Unsupported:
        return [generate(m, tokenizer, s.env, s.items, max_new_tokens, temperature, s.generator, score_rng=s.score_rng)
                for m, s in zip(models, segments)]


def sample_together(runs: list[TrainingRun], step: int) -> list[tuple]:
    """Each run's :func:`~skillgate_lib.runs.train.sample_batch` triple of step ``step``, the draws rolled out together."""
    tokenizer, cfg = runs[0].tokenizer, runs[0].cfg
    rounds = [sampling_rounds(r.env, r.cfg, step, tokenizer.pad_token_id) for r in runs]
    requests = {k: next(g) for k, g in enumerate(rounds)}
    results: dict[int, tuple] = {}
    while requests:
        t0 = time.perf_counter()
        waiting = list(requests)
        segments = [Segment(runs[k].env, *requests[k]) for k in waiting]
        with devices.autocast(next(runs[0].model.parameters()).device, cfg.bf16):  # the update's precision
            episodes = generate_together([runs[k].model for k in waiting], tokenizer, segments, cfg.max_new_tokens,
                                         cfg.temperature)
        seconds = time.perf_counter() - t0
        requests = {}
        for k, eps in zip(waiting, episodes):
            try:
                requests[k] = rounds[k].send((eps, seconds))
            except StopIteration as done:
                results[k] = done.value
    return [results[k] for k in range(len(runs))]


def train_together(cfgs: list[TrainConfig], resume: bool | list[bool] = False, progress: bool = False,
                   eval_cache=None) -> list[pd.DataFrame]:
    """Train the runs ``cfgs`` together (module docstring); each run's metrics table, as :func:`~skillgate_lib.runs.train.train`
    returns it.

    ``resume``: as :func:`~skillgate_lib.runs.train.train`'s, for every run or one flag per run (each continues from its
    own checkpoint). The runs may differ in every setting but :data:`SHARED`; the ones with fewer steps finish first.
    ``eval_cache``: as :func:`~skillgate_lib.runs.train.train`'s (the step-0 evaluation shared, :mod:`~skillgate_lib.runs.warm_eval`).
    """
    from tqdm.auto import tqdm

    check_together(cfgs)
    resumes = list(resume) if isinstance(resume, (list, tuple)) else [resume] * len(cfgs)
    if len(resumes) != len(cfgs):
        raise ValueError(f"train_together: {len(resumes)} resume flags for {len(cfgs)} runs")
    base, tokenizer = load_policy(cfgs[0].model)
    runs = [TrainingRun(c, r, (copy.deepcopy(base), tokenizer)) for c, r in zip(cfgs, resumes)]
    for r in runs:
        if r.start == 0:
            r.log_eval(0, *r.first_evaluation(eval_cache))
    steps = max(c.steps for c in cfgs)
    start = min(r.start for r in runs)
    for step in tqdm(range(start, steps), desc=f"{len(runs)} runs together", disable=not progress, initial=start,
                     total=steps):
        active = [r for r in runs if r.start <= step < r.cfg.steps]
        rl = [r for r in active if not r.finetune]
        t0 = time.perf_counter()
        sampled = sample_together(rl, step) if rl else []
        results = {id(r): grpo_update(r.model, r.tokenizer, r.env, r.opt, r.params, r.cfg, r.ccfg, step, s,
                                      r.skill_values, t0) for r, s in zip(rl, sampled)}
        for r in active:
            if r.finetune:
                results[id(r)] = sft_step(r.model, r.tokenizer, r.env, r.opt, r.params, r.cfg, step)
            r.log_step(step, results[id(r)])
        for r in active:
            if r.eval_due(step + 1):
                r.log_eval(step + 1, r.evaluate())
            r.checkpoint(step + 1)
    return [r.finish() for r in runs]
