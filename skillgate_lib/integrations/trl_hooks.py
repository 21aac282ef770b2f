"""The private TRL internals :class:`~skillgate_lib.integrations.trl.SkillGateGRPOTrainer` relies on, checked by name.

The trainer overrides four private ``GRPOTrainer`` methods and writes to two private
attributes. TRL may change any of them in a release without notice, so the trainer checks
them when it is built (:func:`check_trl_hooks`) and refuses a TRL whose hooks differ, naming
the hook, the parameters it expected and those it found. ``tests/test_trl_integration.py``
runs the same check once per hook, so a TRL upgrade that breaks one fails a test named after it.
Tested against TRL 1.16.0 (``pyproject.toml`` bounds the ``scale`` extra below 1.17).
"""

from __future__ import annotations

import inspect
from typing import Any

TESTED_TRL = "1.16.0"
"""The newest TRL these hooks were checked against."""

METHOD_HOOKS: dict[str, tuple[str, ...]] = {
    "_generate_single_turn": ("self", "prompt_ids", "images", "multimodal_fields", "num_generations", "has_tool_images"),
    "_generate_and_score_completions": ("self", "inputs"),
    "_calculate_rewards": ("self", "inputs", "prompts", "completions", "completion_ids_list"),
    "_tool_call_loop": ("self", "prompts", "prompt_ids", "completion_ids", "completions", "logprobs", "images",
                        "multimodal_fields"),
    "compute_loss": ("self", "model", "inputs", "return_outputs", "num_items_in_batch"),
}
"""Overridden ``GRPOTrainer`` methods -> the parameter names the override is written for."""

ATTRIBUTE_HOOKS: dict[str, tuple[str, ...]] = {
    "_metrics": ("train", "eval"),
    "_logs": ("completion", "extra"),
}
"""Private ``GRPOTrainer`` attributes written to -> the keys written under (checked on a built trainer)."""


def method_problem(cls: type, name: str) -> str | None:
    """Why ``cls.<name>`` is not the hook the trainer overrides, or ``None`` when it is."""
    fn = getattr(cls, name, None)
    if fn is None:
        return f"GRPOTrainer.{name} no longer exists"
    found = tuple(inspect.signature(fn).parameters)
    expected = METHOD_HOOKS[name]
    if found != expected:
        return f"GRPOTrainer.{name}{found} differs from the {expected} SkillGateGRPOTrainer overrides"
    return None


def attribute_problem(trainer: Any, name: str) -> str | None:
    """Why ``trainer.<name>`` is not the mapping the trainer writes to, or ``None`` when it is."""
    value = getattr(trainer, name, None)
    missing = [k for k in ATTRIBUTE_HOOKS[name] if not hasattr(value, "__getitem__") or k not in value]
    if value is None or missing:
        return f"GRPOTrainer.{name} has no {missing or list(ATTRIBUTE_HOOKS[name])} entries"
    return None


def check_trl_hooks(cls: type, trainer: Any | None = None) -> None:
    """Raise ``RuntimeError`` naming every private hook of ``cls`` (and of a built ``trainer``) that changed."""
    problems = [p for name in METHOD_HOOKS if (p := method_problem(cls, name))]
    if trainer is not None:
        problems += [p for name in ATTRIBUTE_HOOKS if (p := attribute_problem(trainer, name))]
    if problems:
        import trl

        raise RuntimeError(f"TRL {trl.__version__}: SkillGateGRPOTrainer is written against TRL {TESTED_TRL}'s private "
                           "hooks and these changed: " + "; ".join(problems) + ". Install trl==" + TESTED_TRL)
