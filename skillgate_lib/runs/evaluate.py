"""Held-out evaluation of any model or trained adapter, and the ``evaluate`` command.

Everyone checks a model the same way: one sampled trial on each of a fixed set of
held-out instances (the same for every run, seed and method), then the rates below,
overall, by domain and by horizon. Three held-out sets:

* ``eval``: the whole held-out pool, drawn with seed :data:`EVAL_SEED` (runs before the
  validation / test split evaluated on it);
* ``val``: the validation part, drawn with :data:`EVAL_SEED`; training's periodic
  evaluations and every selection (learning rate, lambda, steps) read it;
* ``test``: the other part, distinct instances drawn without replacement with
  :data:`TEST_SEED`; reported numbers come from it and nothing is selected on it.

========================  ===================================================================
measure                   meaning
========================  ===================================================================
``success``               the verifier's verdict (every step line and the answer right)
``oracle_read``           the trial read the oracle at least once (the paper's "oracle read")
``misleading_read``       the trial read at least one misleading look-alike
``invalid_read``          the trial named a skill that is not on the slate (off-slate) or a bad read
``reads``                 read actions per trial
``zero_read``             the trial made no read at all
``last_oracle``           the last served read (the body execution follows) was the oracle
``step_acc``              per-step accuracy: step lines that are a right lookup in the oracle's
                          table given their own input, over H, on trials whose last read is the oracle
``success_only_oracle``   success rate of trials whose only read is the oracle
``success_last_oracle``   success rate of trials whose last served read is the oracle
``success_last_misleading`` success rate of trials whose last served read is misleading
========================  ===================================================================

Conditional rates are NaN when no trial meets the condition.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from skillgate_lib.env import SkillSlateEnv
from skillgate_lib.env.chat import RENDERINGS, rendered
from skillgate_lib.policy import devices
from skillgate_lib.policy.devices import add_device_arguments
from skillgate_lib.policy.rollout import Episode, generate
from skillgate_lib.seeding import stream_seed

#: Held-out evaluation instances are the same for every run, seed and method.
EVAL_SEED = 10_007
#: The test set's draw (distinct instances of the ``test`` split).
TEST_SEED = 20_011
#: The rates reported by domain and by horizon.
BY_GROUP = ("success", "oracle_read", "misleading_read", "reads")


def episode_table(episodes: list[Episode]) -> pd.DataFrame:
    """One row per trial with the per-trial indicators :func:`summarize` averages."""
    rows = []
    for e in episodes:
        o = e.outcome
        cats = [r.category for r in o.reads]
        last = o.last_served
        rows.append({
            "domain": e.task.domain, "horizon": e.task.horizon, "success": float(o.success),
            "oracle_read": float("oracle" in cats), "misleading_read": float("misleading" in cats),
            "invalid_read": float("invalid" in cats), "reads": float(len(cats)), "zero_read": float(not cats),
            "last_oracle": float(last is not None and last.category == "oracle"),
            "last_misleading": float(last is not None and last.category == "misleading"),
            "only_oracle": float(cats == ["oracle"]),
            "step_acc": o.steps_ok / e.task.horizon,
        })
    return pd.DataFrame(rows)


def summarize(episodes: list[Episode], prefix: str = "eval") -> dict[str, float]:
    """The measures of the module docstring as ``{prefix}/{measure}[/{domain|horizon}={value}]``."""
    df = episode_table(episodes)
    out = {f"{prefix}/{m}": float(df[m].mean()) for m in
           ("success", "oracle_read", "misleading_read", "invalid_read", "reads", "zero_read", "last_oracle")}

    def cond(mask: pd.Series, col: str) -> float:
        return float(df.loc[mask, col].mean()) if mask.any() else float("nan")

    out[f"{prefix}/step_acc"] = cond(df["last_oracle"] > 0, "step_acc")
    out[f"{prefix}/success_only_oracle"] = cond(df["only_oracle"] > 0, "success")
    out[f"{prefix}/success_last_oracle"] = cond(df["last_oracle"] > 0, "success")
    out[f"{prefix}/success_last_misleading"] = cond(df["last_misleading"] > 0, "success")
    for key in ("domain", "horizon"):
        for value, sub in df.groupby(key):
            for m in BY_GROUP:
                out[f"{prefix}/{m}/{key}={value}"] = float(sub[m].mean())
    return out


def heldout_tasks(env: SkillSlateEnv, n_tasks: int, split: str = "eval", domains=None, horizons=None):
    """``(tasks, seed)`` of a held-out set (module docstring): ``eval`` / ``val`` drawn with
    replacement under :data:`EVAL_SEED`, ``test`` distinct under :data:`TEST_SEED`. ``train``
    (the training chains, drawn like ``eval``) is no held-out set: beside ``eval`` it measures
    how much of a model's execution is memorised chains rather than table lookups."""
    if split == "test":
        return env.distinct_tasks(n_tasks, "test", TEST_SEED, domains=domains, horizons=horizons), TEST_SEED
    if split not in ("eval", "val", "train"):
        raise ValueError(f"split must be eval, val, test or train; got {split!r}")
    return env.sample_tasks(n_tasks, split=split, seed=EVAL_SEED, domains=domains, horizons=horizons), EVAL_SEED


def heldout_pairs(env: SkillSlateEnv, n_tasks: int, split: str = "val") -> list[tuple]:
    """The ``(task, slate)`` prompts of a held-out evaluation of ``n_tasks`` instances: the same instances and slates
    :func:`evaluate` samples trials on (the choice alone is measured on them, :mod:`skillgate_lib.runs.choice`)."""
    tasks, seed = heldout_tasks(env, n_tasks, split)
    return [(t, env.slate(t, seed=stream_seed(seed, k))) for k, t in enumerate(tasks)]


def evaluate(model, tokenizer, env: SkillSlateEnv, n_tasks: int, max_new_tokens: int = 160, batch: int = 128,
             temperature: float = 1.0, domains=None, horizons=None, split: str = "eval") -> list[Episode]:
    """One sampled trial on each of ``n_tasks`` fixed held-out instances of ``split`` (same for every run).

    ``horizons``: default the environment's (its regime's)."""
    tasks, seed = heldout_tasks(env, n_tasks, split, domains, horizons)
    items = [(t, env.slate(t, seed=stream_seed(seed, k)), k) for k, t in enumerate(tasks)]
    gen = torch.Generator().manual_seed(seed)
    episodes: list[Episode] = []
    for start in range(0, len(items), batch):
        episodes += generate(model, tokenizer, env, items[start: start + batch], max_new_tokens, temperature, gen,
                             score_rng=np.random.default_rng(stream_seed(seed, start)))
    return episodes


def load_adapter(run_dir: str | Path, model_spec: str | None = None):
    """``(model, tokenizer, run config)``: a run's base model with its final LoRA adapter (``run_dir/adapter``)."""
    from peft import PeftModel

    from skillgate_lib.logs import read_config
    from skillgate_lib.policy.models import load_policy, model_fingerprint

    run_dir = Path(run_dir)
    if not (run_dir / "adapter" / "adapter_config.json").exists():
        raise FileNotFoundError(f"{run_dir}: no adapter/adapter_config.json (a finished run saves its final LoRA adapter there)")
    config = read_config(run_dir)
    spec = model_spec or config["model"]
    trained_on, now = config.get("model_fingerprint"), model_fingerprint(spec)
    if trained_on and now and trained_on != now:
        raise ValueError(f"{run_dir}/config.json: the run was trained on model {config['model']!r} with weights "
                         f"{trained_on}, but {spec!r} now holds weights {now}; its adapter only makes sense on the "
                         "weights it was trained on (check out the commit the run came from, or pass --model)")
    base, tokenizer = load_policy(spec)
    return PeftModel.from_pretrained(base, run_dir / "adapter"), tokenizer, config


def evaluate_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m skillgate_lib evaluate", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="tiny (RL warm start), tiny-base, smollm2-135m, or an HF id / path "
                        "(default: tiny, or the run's own model with --adapter)")
    parser.add_argument("--adapter", type=Path, help="a training run directory: evaluate its final LoRA adapter")
    parser.add_argument("--tasks", type=int, default=400, help="held-out instances (default: 400)")
    parser.add_argument("--split", default="eval", choices=("eval", "val", "test", "train"),
                        help="held-out set: the whole pool, its validation part or its test part; or train, the "
                        "training chains, for the generalisation gap (default: eval)")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature; 0 = greedy (default: 1)")
    parser.add_argument("--regime", help="environment preset of skillgate_lib.env.regimes (default: the run's with "
                        "--adapter, else easy)")
    parser.add_argument("--step-failure", type=float, help="injected per-step failure (default: the regime's)")
    parser.add_argument("--domains", nargs="+", help="evaluate on these domains only")
    parser.add_argument("--render", choices=RENDERINGS, help="how the episode is written: auto (the chat rendering for a "
                        "model with a chat template, else the word format), words or chat (default: the run's, else auto)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default: 2)")
    parser.add_argument("--json", action="store_true", help="print every measure as one JSON object")
    parser.add_argument("--out", type=Path, help="also write the measures, with the command and wall time, to this JSON file")
    add_device_arguments(parser)
    args = parser.parse_args(argv)
    if args.tasks < 1:
        parser.error(f"--tasks must be >= 1, got {args.tasks}")
    torch.set_num_threads(args.threads)
    from skillgate_lib.env import regimes

    config: dict = {}
    if args.adapter is not None:
        model, tokenizer, config = load_adapter(args.adapter, args.model)
        label = f"{args.adapter} (adapter)"
    else:
        from skillgate_lib.policy.models import load_policy

        model, tokenizer = load_policy(args.model or "tiny")
        label = args.model or "tiny"
    regime = regimes.get(args.regime or "easy")
    if not args.regime:  # the run's recorded knobs (a run older than a knob: the easy preset's value)
        regime = dataclasses.replace(regime, **{k: tuple(v) if isinstance(v, list) else v for k, v in config.items()
                                                if k in regime.knobs() and v is not None})
    if args.step_failure is not None:
        regime = dataclasses.replace(regime, step_failure=args.step_failure)
    device = devices.resolve(args.device)
    from skillgate_lib.policy.models import is_embedded

    spec = args.model or config.get("model", "tiny")
    bf16 = devices.resolve_bf16(args.bf16 if args.bf16 is not None else config.get("bf16"), device, is_embedded(spec))
    devices.check_bf16(device, bf16)
    print(devices.precision_line(device, bf16), file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    with devices.autocast(device, bf16):
        env = rendered(regime.env(), tokenizer, args.render or config.get("render", "auto"))
        summary = summarize(evaluate(model.to(device), tokenizer, env, args.tasks, regime.max_new_tokens,
                                     temperature=args.temperature, domains=args.domains, split=args.split))
        if args.split != "train" and not args.domains:  # the choice alone, teacher-forced on the same prompts
            from skillgate_lib.runs.choice import choice_summary, oracle_choice

            summary.update(choice_summary(oracle_choice(model, tokenizer, env, heldout_pairs(env, args.tasks, args.split))))
    if args.out is not None:
        import shlex

        command = "python -m skillgate_lib evaluate " + " ".join(map(shlex.quote, sys.argv[2:] if argv is None else argv))
        record = {"command": command, "model": args.model or config.get("model", "tiny"), "regime": regime.name,
                  "tasks": args.tasks, "split": args.split, "temperature": args.temperature,
                  "bf16": bf16, "seconds": round(time.perf_counter() - t0, 1), "summary": summary}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    if args.json:
        print(json.dumps(summary, indent=1))
        return 0
    kind = "training-chain tasks" if args.split == "train" else "held-out tasks"
    print(f"{label}: {args.tasks} {kind} ({args.split}), temperature {args.temperature}")
    for m in ("success", "oracle_read", "misleading_read", "invalid_read", "reads", "last_oracle", "step_acc",
              "success_only_oracle", "success_last_oracle", "success_last_misleading", "choice"):
        if f"eval/{m}" not in summary:
            continue
        v = summary[f"eval/{m}"]
        print(f"  {m:<24} {v:8.3f}")
    table = pd.DataFrame({h: [summary.get(f"eval/{m}/horizon={h}", np.nan) for m in BY_GROUP]
                          for h in sorted({int(k.split("=")[1]) for k in summary if "/horizon=" in k})}, index=BY_GROUP)
    print("by horizon:\n" + table.round(3).to_string())
    return 0


main = evaluate_main
