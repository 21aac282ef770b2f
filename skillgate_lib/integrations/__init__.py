"""SkillGate's two-channel credit inside the engines people scale on: TRL and verl.

* :mod:`skillgate_lib.integrations.trl`: ``SkillGateGRPOTrainer`` (a TRL ``GRPOTrainer``
  giving each completion token its own advantage), a reward function and a dataset
  adapter for the kit's environment. Needs the ``scale`` extra.
* :mod:`skillgate_lib.integrations.verl`: the ``skillgate`` advantage estimator in verl's
  registry, the reward-side read annotation it consumes, and (in
  :mod:`~skillgate_lib.integrations.verl_runner`) the task runner that registers them
  inside verl's Ray workers. Needs the ``verl`` extra.

Both engines assign credit with :func:`assign_kept`: the kit's dynamic sampling (groups whose
rewards all agree dropped before the credit, in every method) without the refill, which
TRL's fixed generation batch cannot do (verl's own ``algorithm.filter_groups`` can).

Both engines hand over token ids, never the kit's read annotations, so both recover
read actions the same way, with :func:`find_reads` below: one function, one
configurable :class:`ReadFormat`; a read's words name a skill by
:func:`skillgate_lib.env.names.skill_name`, the rule the kit's environment serves bodies
by. The credit itself is always :func:`skillgate_lib.credit.assign`; nothing here
re-implements it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Sequence

import torch

from skillgate_lib.credit import Credit, CreditConfig, CreditInputs, ReadSpan, assign, kept_groups
from skillgate_lib.env.names import skill_name


@dataclass(frozen=True)
class ReadFormat:
    """How a read action is written: ``<open_tag> skill name words <close_tag>``."""

    open_tag: str = "<read>"
    """Text that opens a read call."""
    close_tag: str = "</read>"
    """Text that closes it; an unclosed call (a truncated completion) is not a read."""

    @property
    def pattern(self) -> re.Pattern[str]:
        return re.compile(re.escape(self.open_tag) + r"\s*(.*?)\s*" + re.escape(self.close_tag), re.S)


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


def find_reads(token_ids: Sequence[int], tokenizer, fmt: ReadFormat = ReadFormat()) -> list[FoundRead]:
    """Every read call in ``token_ids`` (a response), in order, with exact token positions.

    The text is ``tokenizer.decode(token_ids, skip_special_tokens=True)`` (what TRL logs
    and what the reward function scores); positions come from :class:`_TokenPositions`.
    Empty names (``<read> </read>``) are skipped: they name no skill.
    """
    pos = _TokenPositions(token_ids, tokenizer)
    found = []
    for m in fmt.pattern.finditer(pos.text):
        name = " ".join(m.group(1).split())
        if not name:
            continue
        found.append(FoundRead(name, pos.token_of(m.start(1)), pos.token_of(m.end(1) - 1) + 1,
                               pos.token_of(m.start()), pos.token_of(m.end() - 1) + 1))
    return found


def first_call_end(token_ids: Sequence[int], tokenizer, fmt: ReadFormat = ReadFormat()) -> int | None:
    """Tokens up to and including the close tag of the first read call (empty or not), or ``None``.

    Where generation must stop for the environment to answer: a multi-turn engine cuts a
    sampled turn here, whatever the tokenizer splits the close tag into.
    """
    pos = _TokenPositions(token_ids, tokenizer)
    m = fmt.pattern.search(pos.text)
    return None if m is None else pos.token_of(m.end() - 1) + 1


def read_spans(token_ids: Sequence[int], tokenizer, categories: Mapping[str, str],
               fmt: ReadFormat = ReadFormat(), max_reads: int = 4) -> tuple[list[ReadSpan], list[str]]:
    """:func:`find_reads` with each read's slate category (``"invalid"`` when not on the slate).

    ``categories`` maps skill name -> ``oracle`` / ``misleading`` / ``relevant`` /
    ``irrelevant``, keyed by the stored name (``ledger-negate-ruby``) or its words; a read
    of the words ``ledger negate ruby`` names ``skill_name("ledger negate ruby")``, exactly
    as the kit's environment matches it. Returns the kit's
    :class:`~skillgate_lib.credit.ReadSpan` list and the skill names read (stored form), in order.
    A read is ``served`` (its body inserted) when it is on the slate and among the first
    ``max_reads`` reads (the environment's limit; :class:`~skillgate_lib.env.SkillSlateEnv`'s default is 4).
    """
    table = {skill_name(k): v for k, v in categories.items()}
    found = find_reads(token_ids, tokenizer, fmt)
    names = [skill_name(r.name) for r in found]
    spans = [ReadSpan(table.get(n, "invalid"), r.name_start, r.name_end, r.call_start, r.call_end,
                      served=n in table and k < max_reads)
             for k, (n, r) in enumerate(zip(names, found))]
    return spans, names


def assign_kept(method_credit: str, inputs: CreditInputs, cfg: CreditConfig) -> tuple[Credit, CreditInputs | None]:
    """The kit trainer's credit of a batch: ``assign`` on the trajectories of the groups dynamic sampling keeps.

    With ``cfg.filter_groups`` (the default, every method), groups whose rewards all agree
    are dropped and the assigner sees the kept groups only, exactly as the kit's trainer
    trains on the groups its draws kept; without it every group is kept. Returns the
    credit over the whole batch (zero advantage, weight and logged advantages on dropped
    rows; ``groups_filtered`` counts the dropped groups) and the kept rows' inputs (``None``
    when no group is kept: no optimizer step), from which per-skill values are updated.
    """
    B, T = inputs.response_mask.shape
    keep = kept_groups(inputs) if cfg.filter_groups else torch.ones(B, dtype=torch.bool)
    rows = keep.nonzero().flatten().tolist()
    dropped = len(set(inputs.group.tolist())) - len(set(inputs.group[keep].tolist()))
    full = Credit(torch.zeros(B, T, dtype=torch.float64), torch.zeros(B, T, dtype=torch.float64),
                  torch.zeros(B, dtype=torch.float64), [[0.0] * len(r) for r in inputs.reads], 0.0, dropped)
    if not rows:
        return full, None
    kept = CreditInputs(inputs.rewards[rows], inputs.group[rows], inputs.response_mask[rows], [inputs.reads[i] for i in rows],
                        None if inputs.read_names is None else [inputs.read_names[i] for i in rows], inputs.skill_values)
    credit = assign(method_credit, kept, cfg)
    full.advantages[rows] = credit.advantages.to(torch.float64)
    full.weights[rows] = credit.weights.to(torch.float64)
    full.adv_exec[rows] = credit.adv_exec.to(torch.float64)
    for i, adv in zip(rows, credit.read_adv):
        full.read_adv[i] = list(adv)
    full.bc_coef, full.groups_filtered = credit.bc_coef, dropped + credit.groups_filtered
    return full, kept
