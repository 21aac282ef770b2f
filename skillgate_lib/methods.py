"""The registry of methods: one entry per row of the comparison, read by every part of the kit.

A :class:`Method` is what the comparison trains and the report shows: the credit assigner
it trains with (a name in :data:`skillgate_lib.credit.ASSIGNERS`), what else its training
needs, and how it is displayed. The trainer's validation, the CLI's choices (``train
--method``, ``compare --methods``), the comparison's default list, the report's row order
and paper rows, the figures' colours and the TRL / verl adapters all read :data:`METHODS`;
adding a baseline is one :func:`register` call (or one entry below), and a capability is a
field of the entry, never a comparison with a method's name.

``sft`` is a results-only row (``credit=None``): the warm start itself, which every run's
step-0 evaluation measures. It has a label, a colour and a paper row, and no trainer.

This module imports nothing heavy, so a results reader can use it without the trainer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping


@dataclass(frozen=True)
class Method:
    """One method of the comparison and what training and reporting it needs."""

    name: str
    """Identifier: run directories, ``config.json``'s ``method``, table rows and CLI choices."""
    label: str
    """Human-readable name for tables and legends."""
    color: str
    """Matplotlib colour, the same in every figure."""
    credit: str | None
    """The credit assigner it trains with (``skillgate_lib.credit.ASSIGNERS``); None for a results-only row."""
    skill_free: bool = False
    """Trained with no slate in the prompt and every read refused."""
    needs_skill_values: bool = False
    """Its assigner reads running per-skill values carried across steps (``credit.SkillValues``)."""
    supervised_term: bool = False
    """RL plus a supervised cross-entropy on the selector (an engine without that loss term cannot train it)."""
    separate_finetune: bool = False
    """A supervised fine-tune instead of RL."""
    paper_row: str | None = None
    """The reference paper's table row this method stands for, if any."""
    ablation: bool = False
    """An ablation of the kit's own (no row of the paper's table stands for it)."""
    in_comparison: bool = True
    """Trained by the default comparison (``compare`` without ``--methods``, ``make reproduce``)."""

    @property
    def trainable(self) -> bool:
        """Whether a run trains this method (False for results-only rows such as ``sft``)."""
        return self.credit is not None


#: Every method by name, in the results table's display order.
METHODS: dict[str, Method] = {}


def register(method: Method, replace: bool = False) -> Method:
    """Add ``method`` to :data:`METHODS` (at the end of the display order); returns it.

    Its ``credit`` must name an assigner of :data:`skillgate_lib.credit.ASSIGNERS` (checked
    when a run is configured, so this module stays free of torch). Registering a name twice
    is an error unless ``replace``.
    """
    if method.name in METHODS and not replace:
        raise ValueError(f"method {method.name!r} is already registered; pass replace=True to redefine it")
    METHODS[method.name] = method
    return method


def get(name: str) -> Method:
    """The registered method ``name``; an unknown name is an error listing the choices."""
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; choose one of: {', '.join(METHODS)}") from None


def trainable() -> tuple[str, ...]:
    """Names of every method a run can train, in display order (the CLI's choices)."""
    return tuple(m.name for m in METHODS.values() if m.trainable)


def compared() -> tuple[str, ...]:
    """The default comparison: every trainable method marked ``in_comparison``, in display order."""
    return tuple(m.name for m in METHODS.values() if m.trainable and m.in_comparison)


def in_order(names) -> list[str]:
    """``names`` in the registry's display order; names it does not know come last, sorted."""
    known = [m for m in METHODS if m in set(names)]
    return known + sorted(set(names) - set(known))


def of_config(config: Mapping) -> str:
    """The method name of a run from its ``config.json`` (or ``TrainConfig`` fields).

    Runs record ``method``; runs written before it was recorded are identified by their
    ``credit`` and ``skill_free`` settings: the first registered method that trains with both.
    """
    if config.get("method"):
        return config["method"]
    credit, skill_free = config["credit"], bool(config.get("skill_free", False))
    for m in METHODS.values():  # runs without ``method`` predate the separate fine-tune: they trained RL
        if m.credit == credit and m.skill_free == skill_free and not m.separate_finetune:
            return m.name
    raise ValueError(f"no registered method trains credit {credit!r} with skill_free={skill_free}")


class _Colors(Mapping):
    """Method name -> colour, a live view of :data:`METHODS` plus a few non-method series."""

    def __init__(self, extra: Mapping[str, str]) -> None:
        self._extra = dict(extra)

    def __getitem__(self, name: str) -> str:
        return METHODS[name].color if name in METHODS else self._extra[name]

    def __iter__(self) -> Iterator[str]:
        yield from METHODS
        yield from (k for k in self._extra if k not in METHODS)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def label(name: str) -> str:
    """A method's display name from the registry (the name itself for a series it does not know)."""
    return METHODS[name].label if name in METHODS else name


def colors(**extra: str) -> Mapping[str, str]:
    """A read-only ``name -> colour`` mapping over the registry (methods registered later included) and ``extra``."""
    return _Colors(extra)


# Display order: the paper's table first (sft, selection_bc, skill_free, outcome, utility,
# skillgate), then the kit's ablations. The first seven trainable ones are `make reproduce`'s.
for _m in (
    Method("sft", "SFT warm start", "#7f7f7f", credit=None, paper_row="SFT (RL init)"),
    Method("selection_bc", "selection BC", "#8c564b", credit="selection_bc", separate_finetune=True,
           paper_row="Selection BC"),
    Method("skill_free", "skill-free RL", "#bcbd22", credit="outcome", skill_free=True, paper_row="Skill-free RL"),
    Method("outcome", "outcome-only GRPO", "#d62728", credit="outcome", paper_row="outcome-only RL"),
    Method("utility", "Skill1-style utility credit", "#e377c2", credit="utility", needs_skill_values=True,
           paper_row="Skill1-style utility credit"),
    Method("skillgate", "SkillGate", "#1f77b4", credit="skillgate", paper_row="SkillGate"),
    Method("masked_exec", "execution channel only", "#ff7f0e", credit="masked_exec", ablation=True),
    Method("shaped", "oracle-read reward bonus", "#9467bd", credit="shaped", ablation=True),
    Method("skillgate_tokenmean", "SkillGate, token-mean selector", "#17becf", credit="skillgate_tokenmean",
           ablation=True, in_comparison=False),
    Method("selection_bc_rl", "RL + selection cross-entropy", "#c49c94", credit="selection_bc", supervised_term=True,
           ablation=True, in_comparison=False),
    Method("selector_only", "SkillGate, selector channel only", "#aec7e8", credit="selector_only", ablation=True,
           in_comparison=False),
    Method("skillgate_opener", "SkillGate, read opener in the selector channel", "#393b79", credit="skillgate_opener",
           ablation=True, in_comparison=False),
    Method("skillgate_exec_read", "SkillGate, read call in the execution channel", "#637939",
           credit="skillgate_exec_read", ablation=True, in_comparison=False),
):
    register(_m)
del _m
