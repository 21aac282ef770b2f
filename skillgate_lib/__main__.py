"""Command line: ``python -m skillgate_lib COMMAND [options]`` (also installed as ``skillgate``).

Each command lives in the module that does the work and exposes ``main(argv)``;
this file only dispatches, so ``--help`` of a command is that module's own.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "notebooks": ("skillgate_lib.notebooks", "execute the notebooks headless with papermill"),
    "warmstart": ("skillgate_lib.policy.warmstart", "SFT warm start of the embedded model (cached)"),
    "warmstart-lora": ("skillgate_lib.policy.lora_warmstart", "LoRA warm start of a pretrained chat model (SmolLM2)"),
    "train": ("skillgate_lib.runs.train", "LoRA GRPO fine-tune with a chosen credit assigner"),
    "evaluate": ("skillgate_lib.runs.evaluate", "held-out metrics of a model or a trained adapter"),
    "compare": ("skillgate_lib.runs.compare", "every method x seeds, same budget"),
    "study": ("skillgate_lib.runs.study", "the powered comparison: equal search on validation, seeds, the test set"),
    "speed": ("skillgate_lib.runs.speed", "the rate study: how fast each arm learns the choice, by regime and optimizer"),
    "predict": ("skillgate_lib.runs.predict", "predict SkillGate's speed-up from a few GRPO steps of each arm (lookahead)"),
    "probe": ("skillgate_lib.runs.probe", "audit the warm start's outcome-only rollouts in a regime, before training"),
    "audit": ("skillgate_lib.audit", "Share / Sign / Value by horizon for any run's logs"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help"}:
        width = max(map(len, COMMANDS))
        lines = [f"  {name:<{width}}  {doc}" for name, (_, doc) in COMMANDS.items()]
        print("usage: python -m skillgate_lib COMMAND [options]\n\ncommands:\n" + "\n".join(lines))
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"unknown command {name!r}; choose one of: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    entry = getattr(module, f"{name}_main", None) or module.main
    return int(entry(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
