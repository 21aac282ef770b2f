"""The lookahead: how much faster SkillGate would learn the choice, predicted from a few steps before a study.

From the warm start with fresh LoRA, each arm (outcome-only GRPO and SkillGate at its lambda)
takes ``steps`` (K) GRPO steps with the trainer's own code (:func:`~skillgate_lib.runs.train.grpo_step`:
dynamic sampling, KL, the optimizer), on several seeds. After every step the choice is measured
on ``eval_tasks`` validation prompts, teacher-forced (:mod:`skillgate_lib.runs.choice`; no
sampling). A seed's change after k steps is ``logit(choice_k) - logit(choice_0)``; the predicted
ratio at k is the mean change under SkillGate over the mean change under outcome-only, seeds
paired (the same seed draws the same first rollouts in both arms: the LoRA init is zero, so both
start as the warm start), with a BCa interval over the seed pairs. Every k up to K is reported;
which k to trust is chosen by leave-one-out over studies (:mod:`skillgate_lib.report.lookahead`).

The cheaper variant (``--rollouts shared``) draws each step's rollouts once per seed, from the warm
start itself, and both arms update on those same rollouts: half the sampling, and no arm's
rollouts depend on its own updates (off-policy after the first step). It is scored against the
on-policy lookahead by the same leave-one-out (docs/results.md, the lookahead block): on the three
AdamW studies it predicts worse, so the on-policy lookahead stays the predictor and the default.

The step size is fixed before any run by one rule: both arms at the middle of the rate study's
initial grid for the optimizer (AdamW 3e-3, SGD 10, normalised SGD 0.18; SmolLM2's AdamW 3e-4,
from its own grid in :data:`~skillgate_lib.runs.speed.MODEL_GRIDS`), unless ``--lr`` says
otherwise; the rate study then searches each arm's own step size, which the prediction does not
know.

Resumable: the output JSON is rewritten (atomically) after each run, and a rerun with the same
settings skips the runs it holds.

Command line::

    python -m skillgate_lib predict --regime paper_note8                     # the rate study's model and settings
    python -m skillgate_lib predict --regime paper_note8 --optimizer nsgd --out data/runs/predict/paper_note8-nsgd.json
    python -m skillgate_lib predict --run build/runs/skillgate-seed0         # a kit run's model, regime, lr and shape
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from skillgate_lib import logs, paths

#: The two arms the prediction compares.
ARMS = ("outcome", "skillgate")
#: Where committed predictions live (one JSON per study).
PREDICT_DIR = paths.DATA_DIR / "runs" / "predict"
#: The settings a prediction reads from a kit run's ``config.json`` (``--run``).
RUN_FIELDS = ("model", "regime", "lr", "optimizer", "prompts_per_step", "group_size", "selector_coef", "kl_coef",
              "filter_groups", "max_draws", "clip_eps", "lora_rank", "lora_alpha", "lora_targets", "temperature",
              "step_failure", "lookalike_agreement", "horizons", "step_echo", "step_note", "max_new_tokens",
              "scale_rewards", "bf16")


@dataclass
class PredictConfig:
    """One lookahead prediction (module docstring); its JSON is the ``config`` of the output file."""

    regime: str
    model: str
    study: str = ""
    """The rate study this predicts (its directory name under data/runs/speed), or empty."""
    adapter: str = ""
    """A LoRA adapter directory merged into the model before the fresh LoRA (a warm start trained as an adapter)."""
    optimizer: str = "adamw"
    lr: dict = field(default_factory=dict)
    """Step size per arm."""
    steps: int = 5
    """K: GRPO steps per run; the ratio is reported after every step up to K."""
    seeds: tuple[int, ...] = tuple(range(8))
    eval_tasks: int = 256
    """Validation prompts the choice is measured on after every step."""
    train: dict = field(default_factory=dict)
    """Further TrainConfig fields of both arms (rollout shape, lambda, KL, the regime's knobs)."""
    threads: int = 2
    device: str = "cpu"
    rollouts: str = "own"
    """``own``: each arm samples its own rollouts on-policy; ``shared``: both arms update on the same rollouts, drawn
    once per seed and step from the warm start (the cheaper variant, module docstring)."""

    def to_json(self) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(self)))

    def comparable(self) -> dict:
        """The fields a resumed prediction must share with the file it continues (not threads or device)."""
        d = self.to_json()
        return {k: v for k, v in d.items() if k not in ("threads", "device", "seeds")}

    def train_config(self, arm: str, seed: int):
        from skillgate_lib.runs.train import TrainConfig

        return TrainConfig(method=arm, seed=seed, steps=self.steps, regime=self.regime, model=self.model,
                           lr=self.lr[arm], optimizer=self.optimizer, threads=self.threads, device=self.device,
                           run_dir=str(paths.BUILD_DIR / "runs" / "predict" / "_unused"), **self.train)


def study_config(regime: str, optimizer: str = "adamw", lr: float | dict | None = None, **kw) -> PredictConfig:
    """The prediction for the rate study of ``regime`` under ``optimizer``: its warm start and settings
    (:mod:`skillgate_lib.runs.speed`), both arms at the middle of its initial grid unless ``lr`` is given."""
    from skillgate_lib.runs.speed import plan_for

    plan = plan_for(regime, optimizer)
    settings = {k: v for k, v in plan.settings.items() if k in ("prompts_per_step", "group_size", "selector_coef")}
    if lr is None:
        lr = plan.grid[len(plan.grid) // 2]
    lrs = dict(lr) if isinstance(lr, dict) else {a: float(lr) for a in ARMS}
    return PredictConfig(regime=regime, model=plan.model, study=plan.name, optimizer=optimizer, lr=lrs, train=settings,
                         **kw)


def run_config(run_dir: str | Path, **kw) -> PredictConfig:
    """The prediction for a kit run: its model, regime knobs, step size, optimizer and rollout shape (``config.json``);
    both arms at the run's step size."""
    cfg = logs.read_config(run_dir)
    missing = [k for k in ("model", "regime", "lr") if k not in cfg]
    if missing:
        raise ValueError(f"{run_dir}/config.json: no field {', '.join(map(repr, missing))}; a kit training run records them")
    train = {k: (tuple(v) if isinstance(v, list) else v) for k, v in cfg.items()
             if k in RUN_FIELDS and k not in ("model", "regime", "lr", "optimizer")}
    return PredictConfig(regime=cfg["regime"], model=cfg["model"], optimizer=cfg.get("optimizer", "adamw"),
                         lr={a: float(cfg["lr"]) for a in ARMS}, train=train, **kw)


# --------------------------------------------------------------------------- running


def _base(cfg: PredictConfig):
    """The warm start (with ``cfg.adapter`` merged in) and its tokenizer."""
    from skillgate_lib.policy.models import load_policy

    base, tokenizer = load_policy(cfg.model)
    if cfg.adapter:
        from peft import PeftModel

        path = Path(cfg.adapter)
        path = path / "adapter" if (path / "adapter" / "adapter_config.json").exists() else path
        if not (path / "adapter_config.json").exists():
            raise FileNotFoundError(f"{cfg.adapter}: no adapter_config.json (a LoRA adapter directory, or a run holding "
                                    "adapter/)")
        base = PeftModel.from_pretrained(base, path).merge_and_unload()
    return base, tokenizer


def lookahead_run(base, tokenizer, cfg: PredictConfig, arm: str, seed: int, pairs: list, progress=None,
                  start: float | None = None) -> dict:
    """One arm on one seed: K GRPO steps from fresh LoRA on a copy of ``base``, the choice on ``pairs`` after each.
    ``start``: the warm start's choice on ``pairs`` where already measured (fresh LoRA adds nothing, so every run
    starts there); measured here otherwise."""
    import torch

    from skillgate_lib.policy import devices
    from skillgate_lib.runs.choice import logit, oracle_choice
    from skillgate_lib.runs.train import grpo_step, make_env, setup_training
    from skillgate_lib.seeding import seed_everything

    tcfg = cfg.train_config(arm, seed)
    torch.set_num_threads(cfg.threads)
    seed_everything(seed)
    device = devices.resolve(cfg.device)
    devices.check_bf16(device, tcfg.bf16)
    model, params, opt, ccfg, values = setup_training(copy.deepcopy(base).to(device), tcfg)
    env, eval_env = make_env(tcfg, tokenizer=tokenizer), make_env(tcfg, False, tokenizer)
    t0 = time.perf_counter()
    if start is None:
        with devices.autocast(device, tcfg.bf16):
            start = float(np.mean(oracle_choice(model, tokenizer, eval_env, pairs)))
    choice = [start]
    kept, updated = [], []
    for step in range(cfg.steps):
        _, _, _, row, _ = grpo_step(model, tokenizer, env, opt, params, tcfg, ccfg, step, values)
        kept.append(int(row.get("groups/kept", 0)))
        updated.append(bool(row["updated"]))
        with devices.autocast(device, tcfg.bf16):
            choice.append(float(np.mean(oracle_choice(model, tokenizer, eval_env, pairs))))
        if progress is not None:
            progress.update(1)
    return {"arm": arm, "seed": seed, "choice": choice, "choice_logit": [logit(p) for p in choice],
            "groups_kept": kept, "updated": updated, "seconds": round(time.perf_counter() - t0, 2)}


def shared_runs(base, tokenizer, cfg: PredictConfig, seed: int, pairs: list, progress=None) -> list[dict]:
    """Both arms on one seed from the same rollouts: step k's batch is drawn once from the warm start (the outcome
    arm's seeds and settings), and each arm makes its own update on it; the choice on ``pairs`` after each step."""
    import torch

    from skillgate_lib.policy import devices
    from skillgate_lib.runs.choice import logit, oracle_choice
    from skillgate_lib.runs.train import grpo_update, make_env, sample_batch, setup_training
    from skillgate_lib.seeding import seed_everything

    torch.set_num_threads(cfg.threads)
    device = devices.resolve(cfg.device)
    arms = {}
    for arm in ARMS:
        tcfg = cfg.train_config(arm, seed)
        devices.check_bf16(device, tcfg.bf16)
        seed_everything(seed)
        arms[arm] = (tcfg, *setup_training(copy.deepcopy(base).to(device), tcfg))
    sampler = copy.deepcopy(base).to(device)
    tcfg0 = arms[ARMS[0]][0]
    env, eval_env = make_env(tcfg0, tokenizer=tokenizer), make_env(tcfg0, False, tokenizer)
    t0 = time.perf_counter()

    def choice_of(model) -> float:
        with devices.autocast(device, tcfg0.bf16):
            return float(np.mean(oracle_choice(model, tokenizer, eval_env, pairs)))

    start = choice_of(arms[ARMS[0]][1])  # fresh LoRA adds nothing: both arms start at the warm start
    out = {arm: {"arm": arm, "seed": seed, "choice": [start], "groups_kept": [], "updated": []} for arm in ARMS}
    for step in range(cfg.steps):
        sampled = sample_batch(sampler, tokenizer, env, tcfg0, step)
        for arm, (tcfg, model, params, opt, ccfg, values) in arms.items():
            _, _, _, row, _ = grpo_update(model, tokenizer, env, opt, params, tcfg, ccfg, step, sampled, values)
            out[arm]["groups_kept"].append(int(row.get("groups/kept", 0)))
            out[arm]["updated"].append(bool(row["updated"]))
            out[arm]["choice"].append(choice_of(model))
        if progress is not None:
            progress.update(2)
    seconds = round((time.perf_counter() - t0) / 2, 2)
    return [{**r, "choice_logit": [logit(p) for p in r["choice"]], "seconds": seconds} for r in out.values()]


def ratios(runs: list[dict], steps: int) -> list[dict]:
    """Per k = 1..``steps``: each arm's mean change in logit(choice) over seeds with its t-interval, and the ratio
    SkillGate / outcome-only with its BCa interval over seed pairs (:func:`~skillgate_lib.report.rates.ratio_interval`)."""
    from skillgate_lib.audit.stats import t_interval
    from skillgate_lib.report.rates import ratio_interval

    by = {a: {r["seed"]: r for r in runs if r["arm"] == a} for a in ARMS}
    seeds = sorted(set(by["outcome"]) & set(by["skillgate"]))
    out = []
    for k in range(1, steps + 1):
        d = {a: np.array([by[a][s]["choice_logit"][k] - by[a][s]["choice_logit"][0] for s in seeds]) for a in ARMS}
        row = {"k": k, "seeds": len(seeds)}
        for a in ARMS:
            row[f"delta_{a}"], row[f"delta_{a}_lo"], row[f"delta_{a}_hi"] = t_interval(d[a]) if seeds else (math.nan,) * 3
        row["ratio"], row["ratio_lo"], row["ratio_hi"] = ratio_interval(d["skillgate"], d["outcome"]) if seeds else (
            math.nan,) * 3
        out.append(row)
    return out


def _commit() -> str | None:
    out = subprocess.run(["git", "-C", str(paths.REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def _write(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    logs.atomic_write_bytes(path, (json.dumps(record, indent=1, allow_nan=True) + "\n").encode())


def predict(cfg: PredictConfig, out: str | Path, command: str = "", progress: bool = True) -> dict:
    """Run (or resume) the prediction into ``out`` (a JSON file); returns its record."""
    from tqdm.auto import tqdm

    from skillgate_lib.runs.evaluate import heldout_pairs
    from skillgate_lib.runs.train import make_env

    out = Path(out)
    record = {"command": command, "config": cfg.to_json(), "commit": _commit(), "runs": []}
    if out.exists():
        old = json.loads(out.read_text())
        old_cfg = PredictConfig(**{**old["config"], "seeds": tuple(old["config"]["seeds"])})
        if old_cfg.comparable() != cfg.comparable():
            diff = sorted(k for k in cfg.comparable() if old_cfg.comparable().get(k) != cfg.comparable()[k])
            raise ValueError(f"{out}: holds a prediction with other settings ({', '.join(diff)} differ); choose another --out")
        record["runs"] = [r for r in old["runs"] if r["seed"] in cfg.seeds]
        record["command"], record["commit"] = old.get("command") or command, old.get("commit") or record["commit"]
    done = {(r["arm"], r["seed"]) for r in record["runs"]}
    todo = [(a, s) for s in cfg.seeds for a in ARMS if (a, s) not in done]
    base, tokenizer = _base(cfg)
    pairs = heldout_pairs(make_env(cfg.train_config(ARMS[0], 0), train=False), cfg.eval_tasks, "val")  # tasks, slates
    t0 = time.perf_counter()
    start = record["runs"][0]["choice"][0] if record["runs"] else None  # the warm start's, shared by every run
    with tqdm(total=len(todo) * cfg.steps, desc=f"lookahead {cfg.study or cfg.regime}", disable=not progress) as bar:
        for arm, seed in todo:
            if cfg.rollouts == "shared":
                if arm != ARMS[0]:
                    continue  # its run came with the first arm's
                record["runs"] = [r for r in record["runs"] if r["seed"] != seed]
                record["runs"] += shared_runs(base, tokenizer, cfg, seed, pairs, bar)
            else:
                record["runs"].append(lookahead_run(base, tokenizer, cfg, arm, seed, pairs, bar, start))
                start = record["runs"][-1]["choice"][0]
            record["runs"].sort(key=lambda r: (r["seed"], ARMS.index(r["arm"])))
            record["ratios"] = ratios(record["runs"], cfg.steps)
            _write(out, record)
    record["ratios"] = ratios(record["runs"], cfg.steps)
    record["wall_s"] = round(sum(r["seconds"] for r in record["runs"]), 1)
    _write(out, record)
    if todo:
        print(f"{len(todo)} runs in {time.perf_counter() - t0:.0f} s")
    return record


def ratio_table(record: dict) -> str:
    """The ratios of a prediction record as a plain-text table, one row per k."""
    lines = [f"{'k':>2}  {'outcome dlogit':>22}  {'skillgate dlogit':>22}  {'ratio [BCa 95 %]':>22}"]
    for r in record["ratios"]:
        def ci(m, lo, hi):
            return f"{m:+.3f} [{lo:+.3f}, {hi:+.3f}]"
        lines.append(f"{r['k']:>2}  {ci(r['delta_outcome'], r['delta_outcome_lo'], r['delta_outcome_hi']):>22}  "
                     f"{ci(r['delta_skillgate'], r['delta_skillgate_lo'], r['delta_skillgate_hi']):>22}  "
                     f"{r['ratio']:.2f} [{r['ratio_lo']:.2f}, {r['ratio_hi']:.2f}]".rjust(22))
    return "\n".join(lines)


def _lr_arg(text: str) -> float | dict:
    """``--lr 3e-3`` (both arms) or ``--lr outcome=3e-3,skillgate=1e-2``."""
    try:
        if "=" not in text:
            return float(text)
        pairs = dict(part.split("=", 1) for part in text.split(","))
        lrs = {k.strip(): float(v) for k, v in pairs.items()}
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or outcome=X,skillgate=Y, got {text!r}") from None
    if set(lrs) != set(ARMS):
        raise argparse.ArgumentTypeError(f"name both arms ({', '.join(ARMS)}), got {', '.join(lrs)}")
    return lrs


def build_parser() -> argparse.ArgumentParser:
    from skillgate_lib.runs.speed import GRIDS, MODELS

    p = argparse.ArgumentParser(prog="python -m skillgate_lib predict", description=__doc__.splitlines()[0],
                                epilog="The prediction rule and its output: the module docstring of skillgate_lib.runs.predict.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--regime", choices=list(MODELS), help="a rate study's regime: its warm start and settings")
    src.add_argument("--run", type=Path, help="a kit training run's directory: its model, regime, lr and rollout shape")
    p.add_argument("--optimizer", default="adamw", choices=list(GRIDS), help="with --regime: adamw (default), sgd, nsgd")
    p.add_argument("--model", help="override the warm start (an embedded model name, HF id or path)")
    p.add_argument("--adapter", default="", help="a LoRA adapter merged into the model first (a warm start adapter)")
    p.add_argument("--lr", type=_lr_arg, help="step size of both arms, or outcome=X,skillgate=Y (default: the middle "
                   "of the rate study's grid; with --run, the run's)")
    p.add_argument("--lambda", dest="selector_coef", type=float, help="SkillGate's lambda (default: the study's 0.2)")
    p.add_argument("--steps", type=int, default=5, help="K, GRPO steps per run (default: 5)")
    p.add_argument("--seeds", type=int, default=8, help="seeds per arm (default: 8)")
    p.add_argument("--eval-tasks", type=int, default=256, help="validation prompts the choice is measured on (default: 256)")
    p.add_argument("--rollouts", choices=("own", "shared"), default="own",
                   help="own: each arm samples on-policy (default); shared: both arms update on the same rollouts, drawn "
                        "once from the warm start (cheaper)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default: 2)")
    p.add_argument("--device", default="cpu", help="auto, cpu (default) or cuda")
    p.add_argument("--out", type=Path, help="the output JSON (default: build/runs/predict/<study>.json); rerun to resume")
    return p


def predict_main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    for name in ("steps", "seeds", "eval_tasks"):
        if getattr(args, name) < 1 or (name == "seeds" and args.seeds < 3):
            p.error(f"--{name.replace('_', '-')} must be >= {3 if name == 'seeds' else 1}, got {getattr(args, name)}")
    kw = dict(steps=args.steps, seeds=tuple(range(args.seeds)), eval_tasks=args.eval_tasks, threads=args.threads,
              device=args.device, adapter=args.adapter, rollouts=args.rollouts)
    try:
        if args.run is not None:
            cfg = run_config(args.run, **kw)
            cfg.study = args.run.name
            if args.lr is not None:
                cfg.lr = dict(args.lr) if isinstance(args.lr, dict) else {a: args.lr for a in ARMS}
        else:
            cfg = study_config(args.regime, args.optimizer, args.lr, **kw)
    except (ValueError, FileNotFoundError) as e:
        p.error(str(e))
    if args.model:
        cfg.model = args.model
    if args.selector_coef is not None:
        cfg.train["selector_coef"] = args.selector_coef
    out = args.out or paths.BUILD_DIR / "runs" / "predict" / f"{cfg.study or cfg.regime}.json"
    command = "python -m skillgate_lib predict " + " ".join(map(shlex.quote, sys.argv[2:] if argv is None else argv))
    print(f"lookahead {cfg.study or cfg.regime}: {cfg.model} in {cfg.regime}, {cfg.optimizer} lr "
          f"{cfg.lr['outcome']:g} / {cfg.lr['skillgate']:g} (outcome / skillgate), K = {cfg.steps}, "
          f"{len(cfg.seeds)} seeds, choice on {cfg.eval_tasks} validation prompts -> {out}", flush=True)
    try:
        record = predict(cfg, out, command)
    except ValueError as e:
        p.error(str(e))
    print(ratio_table(record))
    return 0


main = predict_main
