"""SkillGate GRPO in TRL on the kit's environment: the skill read is a tool, TRL inserts its body and masks it.

CPU smoke test (the embedded model, the defaults: 4 steps of 16 episodes, about two minutes on 2 CPU
cores; at least one step must find a prompt group whose rewards differ, or no optimizer step is taken)::

    python examples/trl/train_skillgate.py

A real model on GPUs (any Hugging Face id or local path; see README "Scaling out")::

    accelerate launch examples/trl/train_skillgate.py --model Qwen/Qwen2.5-0.5B-Instruct \\
        --n-tasks 20000 --max-steps 100 --num-generations 8 --per-device-train-batch-size 8 \\
        --max-completion-length 1024 --learning-rate 1e-6 --beta 3e-5 --bf16 --report-to tensorboard

A run writes, under ``--output-dir``: ``config.json`` (every setting, package versions),
``metrics.jsonl`` (one line per logged step), ``completions/completions_<step>.parquet``
(every completion with the kit's per-read columns), ``tasks.jsonl`` (the slates) and
``tokenizer/`` (with the chat template the episodes were rendered with), both for the
audit, and, with ``--report-to tensorboard``, TensorBoard event files under ``runs/``.
The script ends by printing the audit command for the run,
``python -m skillgate_lib audit RUN --format trl --tasks RUN/tasks.jsonl``, or, when every step was
skipped (each group's rewards all equal: nothing to learn from), a loud message and exit status 1.
TRL prints ``--print-completions`` completions per step (default 2; -1 prints every one); the
parquet files keep them all.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is experimental in TRL 1.16

import torch  # noqa: E402
from accelerate import PartialState  # noqa: E402
from peft import LoraConfig  # noqa: E402
from trl import GRPOConfig  # noqa: E402

from skillgate_lib import cli, logs  # noqa: E402
from skillgate_lib.credit import CreditConfig  # noqa: E402
from skillgate_lib.env import regimes  # noqa: E402
from skillgate_lib.integrations.trl import (  # noqa: E402
    MetricsJsonl,
    SkillGateGRPOTrainer,
    env_dataset,
    trl_method,
    use_kit_chat_format,
    write_task_table,
)
from skillgate_lib.policy.models import load_policy  # noqa: E402
from skillgate_lib.seeding import seed_everything  # noqa: E402


@dataclass(frozen=True)
class Args:
    """Every setting of a run; each is a ``--flag``."""

    model: str = "tiny"
    """tiny (the committed RL warm start), tiny-base, smollm2-135m, or a Hugging Face id / local path"""
    method: str = "skillgate"
    """a method SkillGateGRPOTrainer trains (skillgate_lib.integrations.trl.trl_methods: skillgate, utility, outcome, ...)"""
    regime: str = "easy"
    """environment preset of skillgate_lib.env.regimes.REGIMES (step failure, look-alike agreement, horizons)"""
    output_dir: str = "runs/trl_skillgate"
    """run directory"""
    n_tasks: int = 64
    """training tasks drawn from the environment"""
    max_steps: int = 4
    """GRPO steps (one generation batch each)"""
    num_generations: int = 4
    """rollouts per prompt (the GRPO group)"""
    per_device_train_batch_size: int = 16
    """completions per device per step (a multiple of num_generations)"""
    max_completion_length: int | None = None
    """tokens per episode, policy and inserted bodies together (default: the regime's)"""
    learning_rate: float = 1e-3
    """LoRA learning rate (the smoke test's; 1e-6 for a real model)"""
    beta: float = 0.0
    """KL coefficient to the reference (3e-5 in the reference recipe)"""
    temperature: float = 1.0
    """sampling temperature"""
    selector_coef: float = 0.2
    """lambda: weight of the selector channel"""
    lora_r: int = 8
    """LoRA rank (alpha = 2 r) on every linear projection"""
    bf16: bool = False
    """bfloat16 autocast (GPU)"""
    report_to: str = "none"
    """tracker beside metrics.jsonl: none, tensorboard, wandb or trackio (TRL's report_to)"""
    seed: int = 0
    """seeds the tasks, LoRA init and sampling"""
    print_completions: int = 2
    """completions TRL prints per step (its num_completions_to_print; -1: every one)"""


def parse(argv: list[str] | None = None) -> Args:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_fields(parser, Args)
    return cli.from_args(Args, parser.parse_args(argv))


def audit_command(run_dir: Path) -> str:
    """The audit of this run: ``python -m skillgate_lib audit RUN --format trl --tasks RUN/tasks.jsonl``.

    The completions carry each read as the trainer found it (category, token positions), which the audit
    uses as logged; ``tasks.jsonl`` holds the slates, as for any TRL run.
    """
    return shlex.join(["python", "-m", "skillgate_lib", "audit", str(run_dir), "--format", "trl",
                       "--tasks", str(run_dir / "tasks.jsonl")])


def updated_steps(trainer: SkillGateGRPOTrainer) -> tuple[int, int]:
    """``(steps that took an optimizer step, steps logged)`` from the trainer's ``credit/update_skipped`` log."""
    skipped = [h["credit/update_skipped"] for h in trainer.state.log_history if "credit/update_skipped" in h]
    return sum(s == 0 for s in skipped), len(skipped)


def main(argv: list[str] | None = None) -> SkillGateGRPOTrainer:
    args = parse(argv)
    method, regime = trl_method(args.method), regimes.get(args.regime)
    seed_everything(args.seed)
    out = Path(args.output_dir)
    state = PartialState()
    model, tokenizer = load_policy(args.model)
    use_kit_chat_format(tokenizer)
    dataset, reward = env_dataset(regime.env(show_slate=not method.skill_free), args.n_tasks, seed=args.seed, tools=True)
    max_completion_length = args.max_completion_length or regime.max_new_tokens
    if state.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.jsonl").unlink(missing_ok=True)
        write_task_table(dataset, out / "tasks.jsonl")
        tokenizer.save_pretrained(out / "tokenizer")
        config = {**asdict(args), "max_completion_length": max_completion_length, "credit": method.credit,
                  "skill_free": method.skill_free, **regime.knobs(), "engine": "trl", "versions": logs.package_versions()}
        (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    grpo = GRPOConfig(
        output_dir=str(out), max_steps=args.max_steps, num_generations=args.num_generations,
        per_device_train_batch_size=args.per_device_train_batch_size, max_completion_length=max_completion_length,
        learning_rate=args.learning_rate, beta=args.beta, temperature=args.temperature, loss_type="dapo",
        scale_rewards="group", logging_steps=1, log_completions=True, report_to=args.report_to, bf16=args.bf16,
        num_completions_to_print=None if args.print_completions < 0 else args.print_completions,
        use_cpu=not torch.cuda.is_available(), save_strategy="no", seed=args.seed,
    )
    trainer = SkillGateGRPOTrainer(
        model=model, args=grpo, processing_class=tokenizer, reward_funcs=reward, train_dataset=dataset,
        environment_factory=reward.environment, callbacks=[MetricsJsonl(out)], credit=args.method,
        credit_config=CreditConfig(selector_coef=args.selector_coef),
        peft_config=LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, target_modules="all-linear", task_type="CAUSAL_LM"),
    )
    trainer.train()
    updated, steps = updated_steps(trainer)
    if state.is_main_process and updated == 0:
        bar = "!" * 78
        print(f"\n{bar}\nNO OPTIMIZER STEP WAS TAKEN: all {steps} steps were skipped (credit/update_skipped = 1), because "
              f"in every step each prompt group's rewards were equal, so no group carried a learning signal. The policy "
              f"is unchanged. Draw more episodes per step (--per-device-train-batch-size, --num-generations) or more "
              f"steps (--max-steps), or choose an easier --regime.\n{bar}", file=sys.stderr, flush=True)
    elif state.is_main_process:
        print(f"\n{out}: {updated} of {steps} steps took an optimizer step (the others had no prompt group whose "
              f"rewards differ); config.json, metrics.jsonl, completions/, tasks.jsonl, tokenizer/; audit it with\n"
              f"  {audit_command(out)}")
    return trainer


if __name__ == "__main__":
    sys.exit(0 if updated_steps(main())[0] else 1)
