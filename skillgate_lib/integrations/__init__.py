"""SkillGate's two-channel credit inside the engines people scale on: TRL and verl.

* :mod:`skillgate_lib.integrations.trl`: ``SkillGateGRPOTrainer`` (a TRL ``GRPOTrainer``
  giving each completion token its own advantage), a reward function and a dataset
  adapter for the kit's environment. Needs the ``scale`` extra.
* :mod:`skillgate_lib.integrations.verl`: the ``skillgate`` advantage estimator in verl's
  registry, the reward-side read annotation it consumes, and (in
  :mod:`~skillgate_lib.integrations.verl_runner`) the task runner that registers them
  inside verl's Ray workers, with :mod:`~skillgate_lib.integrations.verl_tool` (the ``read`` tool
  and the kit-syntax tool parser of verl's multi-turn tool agent loop). Importing
  :mod:`~skillgate_lib.integrations.verl` needs neither verl nor Ray; its ``register()`` needs verl.

Both engines assign credit with :func:`assign_kept`: the kit's dynamic sampling (groups whose
rewards all agree dropped before the credit, in every method) without the refill, which
TRL's fixed generation batch cannot do (verl's own ``algorithm.filter_groups`` can).

Both engines hand over token ids, never the kit's read annotations, so both recover
read actions the same way, with :func:`find_reads` below: one function and a read syntax,
by default :data:`DEFAULT_READ_FORMAT` (:class:`EitherReadFormat`: the kit's ``<read> words </read>``
and JSON tool calls as chat templates render them), or one of them alone, :class:`ReadFormat` or
:class:`JsonReadFormat` (:mod:`~skillgate_lib.env.read_formats`). A read's words
name the skill of the same :func:`~skillgate_lib.integrations.skill_keys.skill_key` (case and
separators ignored); the tools that serve bodies resolve names the same way, and a slate with two
names of one key is refused (:func:`slate_index`). The credit itself is always
:func:`skillgate_lib.credit.assign`; nothing here re-implements it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Collection, Mapping, Sequence, Union

import torch

from skillgate_lib.credit import Credit, CreditConfig, CreditInputs, ReadSpan, assign, kept_groups
from skillgate_lib.env.names import skill_name
from skillgate_lib.env.read_formats import (
    DEFAULT_READ_FORMAT,
    CallSpan,
    EitherReadFormat,
    JsonReadFormat,
    ReadFormat,
    call_arguments,
    turn_cut_format,
)
from skillgate_lib.integrations.skill_keys import SkillIndex, SkillNameCollision, skill_key

AnyReadFormat = Union[ReadFormat, JsonReadFormat, EitherReadFormat]
"""A read syntax: anything with ``calls(text) -> list[CallSpan]`` (:mod:`~skillgate_lib.env.read_formats`)."""


@dataclass(frozen=True)
class FoundRead:
    """A read action located in a token sequence: its words as written and token index ranges ``[start, end)``."""

    name: str
    name_start: int
    name_end: int
    call_start: int
    call_end: int


class _TokenPositions:
    """Character -> token index over ``tokenizer.decode(token_ids, skip_special_tokens=True)``.

    A character belongs to token ``k`` when the decoded prefix ``token_ids[:k]`` is no
    longer than its position and the prefix ``token_ids[:k + 1]`` is; prefix lengths grow
    monotonically, so each lookup is a binary search over prefixes. This works for any
    tokenizer (word-level, byte-level BPE, SentencePiece) without offset mappings, and
    indexes the ids actually sampled rather than a re-tokenisation of their text.
    """

    def __init__(self, token_ids: Sequence[int], tokenizer):
        self.ids, self.tokenizer = list(token_ids), tokenizer
        self.text = tokenizer.decode(self.ids, skip_special_tokens=True)
        self._lengths: dict[int, int] = {}

    def _prefix_len(self, k: int) -> int:
        if k not in self._lengths:
            self._lengths[k] = len(self.tokenizer.decode(self.ids[:k], skip_special_tokens=True))
        return self._lengths[k]

    def token_of(self, char: int) -> int:
        lo, hi = 0, len(self.ids) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if self._prefix_len(mid + 1) > char:
                hi = mid
            else:
                lo = mid + 1
        return lo


def find_reads(token_ids: Sequence[int], tokenizer, fmt: AnyReadFormat = DEFAULT_READ_FORMAT) -> list[FoundRead]:
    """Every read call in ``token_ids`` (a response), in order, with exact token positions.

    The text is ``tokenizer.decode(token_ids, skip_special_tokens=True)`` (what TRL logs
    and what the reward function scores); positions come from :class:`_TokenPositions`.
    Empty names (``<read> </read>``) and calls of other tools are skipped: they name no skill.
    With :class:`JsonReadFormat` the name tokens are those of the argument's value inside the JSON.
    """
    pos = _TokenPositions(token_ids, tokenizer)
    return [FoundRead(c.name, pos.token_of(c.name_start), pos.token_of(c.name_end - 1) + 1,
                      pos.token_of(c.call_start), pos.token_of(c.call_end - 1) + 1)
            for c in fmt.calls(pos.text) if c.is_read and c.name]


def first_call_end(token_ids: Sequence[int], tokenizer, fmt: AnyReadFormat = ReadFormat()) -> int | None:
    """Tokens up to and including the end of the first tool call (empty or not, any tool), or ``None``.

    Where generation must stop for the environment to answer: a multi-turn engine cuts a
    sampled turn here, whatever the tokenizer splits the close tag into.
    """
    pos = _TokenPositions(token_ids, tokenizer)
    calls = fmt.calls(pos.text)
    return None if not calls else pos.token_of(calls[0].call_end - 1) + 1


@dataclass(frozen=True)
class SlateReads:
    """A response's reads, categorised by its slate (:func:`slate_reads`)."""

    spans: list[ReadSpan]
    """The reads the credit sees, in order (the kit's :class:`~skillgate_lib.credit.ReadSpan`)."""
    names: list[str]
    """The skill each of ``spans`` names (stored form; the key for an off-slate read)."""
    failed: list[str] = field(default_factory=list)
    """The words of read calls the engine failed to execute (no body, no reply from the environment): left out
    of ``spans``, so they get no selector credit; counted and logged."""


def slate_index(categories: Mapping[str, str], where: str = "slate") -> SkillIndex:
    """The index of a slate's names as written (``categories``: name -> category).

    Two names of one :func:`~skillgate_lib.integrations.skill_keys.skill_key` (``"pdf tools"`` and
    ``"pdf-tools"``) are refused with :class:`SkillNameCollision` naming both as written: a read
    could not tell them apart, and merging them would keep one category silently.
    """
    return SkillIndex(categories, where=where)


def slate_categories(names: Sequence[str], categories: Sequence[str], where: str = "slate") -> dict[str, str]:
    """Parallel name / category lists as a mapping; unequal lengths, a name listed twice or two names of one key are refused."""
    names, categories = list(names), list(categories)
    if len(names) != len(categories):
        raise ValueError(f"{where}: {len(names)} skill names but {len(categories)} categories")
    SkillIndex(names, where=where)
    return dict(zip(names, categories))


def slate_reads(found: Sequence[FoundRead], categories: Mapping[str, str], max_reads: int = 4,
                failed: Collection[int] = ()) -> SlateReads:
    """``found`` (:func:`find_reads`) with each read's slate category (``"invalid"`` when not on the slate).

    ``categories`` maps skill name -> ``oracle`` / ``misleading`` / ``relevant`` / ``irrelevant``,
    keyed by the stored name (``ledger-negate-ruby``) or its words; a read names the slate skill whose
    :func:`~skillgate_lib.integrations.skill_keys.skill_key` equals its words' (case and separators
    ignored: ``Ledger Negate_Ruby`` names ``ledger-negate-ruby``); a slate with two names of one key is
    refused (:func:`slate_index`). ``failed``: indices into ``found`` of calls the engine failed to
    execute (TRL's tool loop answered them with an error): they go to :attr:`SlateReads.failed`, not to
    the credit. A read is ``served`` (its body inserted) when it is on the slate and among the first
    ``max_reads`` executed reads (the environment's limit; :class:`~skillgate_lib.env.SkillSlateEnv`'s default is 4).
    """
    index = slate_index(categories)
    spans, names, lost = [], [], []
    for j, r in enumerate(found):
        if j in failed:
            lost.append(r.name)
            continue
        written = index.stored(r.name)
        spans.append(ReadSpan("invalid" if written is None else categories[written], r.name_start, r.name_end,
                              r.call_start, r.call_end, served=written is not None and len(spans) < max_reads))
        names.append(skill_key(r.name) if written is None else skill_name(written))
    return SlateReads(spans, names, lost)


def read_spans(token_ids: Sequence[int], tokenizer, categories: Mapping[str, str],
               fmt: AnyReadFormat = DEFAULT_READ_FORMAT, max_reads: int = 4) -> tuple[list[ReadSpan], list[str]]:
    """:func:`find_reads` categorised by :func:`slate_reads`: the kit's :class:`~skillgate_lib.credit.ReadSpan`
    list and the skill names read (stored form; the key for an off-slate read), in order."""
    found = slate_reads(find_reads(token_ids, tokenizer, fmt), categories, max_reads)
    return found.spans, found.names


def _rows(inputs: CreditInputs, rows: Sequence[int]) -> CreditInputs:
    return CreditInputs(inputs.rewards[rows], inputs.group[rows], inputs.response_mask[rows], [inputs.reads[i] for i in rows],
                        None if inputs.read_names is None else [inputs.read_names[i] for i in rows], inputs.skill_values)


def assign_kept(method_credit: str, inputs: CreditInputs, cfg: CreditConfig,
                scorable: torch.Tensor | None = None) -> tuple[Credit, CreditInputs | None]:
    """The kit trainer's credit of a batch: ``assign`` on the trajectories of the groups dynamic sampling keeps.

    With ``cfg.filter_groups`` (the default, every method), groups whose rewards all agree
    are dropped and the assigner sees the kept groups only, exactly as the kit's trainer
    trains on the groups its draws kept; without it every group is kept. ``scorable`` ((B,) bool,
    default all): rows without a reward (every reward function returned ``None``) leave the batch
    before that, as in TRL's ``GRPOTrainer``: no advantage, no weight, and no part in their group's
    baseline. Returns the credit over the whole batch (zero advantage, weight and logged advantages
    on dropped rows; ``groups_filtered`` counts the groups left without a row) and the kept rows'
    inputs (``None`` when no row is kept: no optimizer step), from which per-skill values are updated.
    """
    B, T = inputs.response_mask.shape
    usable = torch.ones(B, dtype=torch.bool) if scorable is None else scorable.to(torch.bool).cpu()
    candidates = usable.nonzero().flatten().tolist()
    keep = usable.clone()
    if cfg.filter_groups and candidates:
        keep[candidates] = kept_groups(_rows(inputs, candidates))
    rows = keep.nonzero().flatten().tolist()
    dropped = len(set(inputs.group.tolist())) - len(set(inputs.group[keep].tolist()))
    full = Credit(torch.zeros(B, T, dtype=torch.float64), torch.zeros(B, T, dtype=torch.float64),
                  torch.zeros(B, dtype=torch.float64), [[0.0] * len(r) for r in inputs.reads], 0.0, dropped)
    if not rows:
        return full, None
    kept = _rows(inputs, rows)
    credit = assign(method_credit, kept, cfg)
    full.advantages[rows] = credit.advantages.to(torch.float64)
    full.weights[rows] = credit.weights.to(torch.float64)
    full.adv_exec[rows] = credit.adv_exec.to(torch.float64)
    for i, adv in zip(rows, credit.read_adv):
        full.read_adv[i] = list(adv)
    full.bc_coef, full.groups_filtered = credit.bc_coef, dropped + credit.groups_filtered
    return full, kept


__all__ = ["AnyReadFormat", "CallSpan", "DEFAULT_READ_FORMAT", "EitherReadFormat", "FoundRead", "JsonReadFormat", "ReadFormat",
           "SkillIndex", "SkillNameCollision", "SlateReads", "assign_kept", "call_arguments", "find_reads", "first_call_end",
           "read_spans", "skill_key", "slate_categories", "slate_index", "slate_reads", "turn_cut_format"]
