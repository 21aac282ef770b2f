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
the kit's :class:`ReadFormat` (``<read> words </read>``) or :class:`JsonReadFormat` (a JSON tool
call as chat templates render it; :mod:`~skillgate_lib.integrations.read_formats`). A read's words
name the skill of the same :func:`~skillgate_lib.integrations.skill_keys.skill_key` (case and
separators ignored); the tools that serve bodies resolve names the same way. The credit itself is always :func:`skillgate_lib.credit.assign`; nothing here
re-implements it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence, Union

import torch

from skillgate_lib.credit import Credit, CreditConfig, CreditInputs, ReadSpan, assign, kept_groups
from skillgate_lib.env.names import skill_name
from skillgate_lib.integrations.read_formats import CallSpan, JsonReadFormat, ReadFormat
from skillgate_lib.integrations.skill_keys import SkillIndex, SkillNameCollision, skill_key

AnyReadFormat = Union[ReadFormat, JsonReadFormat]
"""A read syntax: anything with ``calls(text) -> list[CallSpan]`` (:mod:`~skillgate_lib.integrations.read_formats`)."""


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


def find_reads(token_ids: Sequence[int], tokenizer, fmt: AnyReadFormat = ReadFormat()) -> list[FoundRead]:
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


def read_spans(token_ids: Sequence[int], tokenizer, categories: Mapping[str, str],
               fmt: AnyReadFormat = ReadFormat(), max_reads: int = 4) -> tuple[list[ReadSpan], list[str]]:
    """:func:`find_reads` with each read's slate category (``"invalid"`` when not on the slate).

    ``categories`` maps skill name -> ``oracle`` / ``misleading`` / ``relevant`` /
    ``irrelevant``, keyed by the stored name (``ledger-negate-ruby``) or its words
    (:func:`~skillgate_lib.env.names.skill_name` gives the stored form). A read
    names the slate skill whose :func:`~skillgate_lib.integrations.skill_keys.skill_key` equals
    its words' (case and separators ignored: ``Ledger Negate_Ruby`` names ``ledger-negate-ruby``);
    a slate with two names of one key is refused (:class:`SkillNameCollision`). Returns the kit's
    :class:`~skillgate_lib.credit.ReadSpan` list and the skill names read (stored form; the key for
    an off-slate read), in order. A read is ``served`` (its body inserted) when it is on the slate
    and among the first ``max_reads`` reads (the environment's limit; :class:`~skillgate_lib.env.SkillSlateEnv`'s default is 4).
    """
    table = {skill_name(k): v for k, v in categories.items()}
    index = SkillIndex(table, where="slate")
    found = find_reads(token_ids, tokenizer, fmt)
    names = [index.stored(r.name) or skill_key(r.name) for r in found]
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


__all__ = ["AnyReadFormat", "CallSpan", "FoundRead", "JsonReadFormat", "ReadFormat", "SkillIndex", "SkillNameCollision",
           "assign_kept", "find_reads", "first_call_end", "read_spans", "skill_key"]
