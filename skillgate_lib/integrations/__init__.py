"""SkillGate's two-channel credit inside the engines people scale on: TRL and verl.

* :mod:`skillgate_lib.integrations.trl`: ``SkillGateGRPOTrainer`` (a TRL ``GRPOTrainer``
  giving each completion token its own advantage), a reward function and a dataset
  adapter for the kit's environment. Needs the ``scale`` extra.
* :mod:`skillgate_lib.integrations.verl`: the ``skillgate`` advantage estimator in verl's
  registry, the reward-side read annotation it consumes, and (in
  :mod:`~skillgate_lib.integrations.verl_runner`) the task runner that registers them
  inside verl's Ray workers. Needs the ``verl`` extra.

Both engines hand over token ids, never the kit's read annotations, so both recover
read actions the same way, with :func:`find_reads` below: one function, one
configurable :class:`ReadFormat`. The credit itself is always
:func:`skillgate_lib.credit.assign`; nothing here re-implements it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from skillgate_lib.credit import ReadSpan


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
    """A read action located in a token sequence: its name and token index ranges ``[start, end)``."""

    name: str
    name_start: int
    name_end: int
    call_start: int
    call_end: int


def normalise_name(name: str) -> str:
    """Skill names compare with runs of whitespace collapsed (names are whitespace-separated words)."""
    return " ".join(name.split())


def find_reads(token_ids: Sequence[int], tokenizer, fmt: ReadFormat = ReadFormat()) -> list[FoundRead]:
    """Every read call in ``token_ids`` (a response), in order, with exact token positions.

    The text is ``tokenizer.decode(token_ids, skip_special_tokens=True)`` (what TRL logs
    and what the reward function scores). A character belongs to token ``k`` when the
    decoded prefix ``token_ids[:k]`` is no longer than its position and the prefix
    ``token_ids[:k + 1]`` is; prefix lengths grow monotonically, so each boundary is a
    binary search over prefixes. This works for any tokenizer (word-level, byte-level
    BPE, SentencePiece) without offset mappings, and indexes the ids actually sampled
    rather than a re-tokenisation of their text. Empty names (``<read> </read>``) are
    skipped: they name no skill.
    """
    ids = list(token_ids)
    text = tokenizer.decode(ids, skip_special_tokens=True)
    lengths: dict[int, int] = {}

    def prefix_len(k: int) -> int:
        if k not in lengths:
            lengths[k] = len(tokenizer.decode(ids[:k], skip_special_tokens=True))
        return lengths[k]

    def token_of(char: int) -> int:
        lo, hi = 0, len(ids) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if prefix_len(mid + 1) > char:
                hi = mid
            else:
                lo = mid + 1
        return lo

    found = []
    for m in fmt.pattern.finditer(text):
        name = normalise_name(m.group(1))
        if not name:
            continue
        found.append(FoundRead(name, token_of(m.start(1)), token_of(m.end(1) - 1) + 1,
                               token_of(m.start()), token_of(m.end() - 1) + 1))
    return found


def read_spans(token_ids: Sequence[int], tokenizer, categories: Mapping[str, str],
               fmt: ReadFormat = ReadFormat()) -> tuple[list[ReadSpan], list[str]]:
    """:func:`find_reads` with each read's slate category (``"invalid"`` when not on the slate).

    ``categories`` maps skill name -> ``oracle`` / ``misleading`` / ``relevant`` /
    ``irrelevant``. Returns the kit's :class:`~skillgate_lib.credit.ReadSpan` list and
    the names read, in order.
    """
    table = {normalise_name(k): v for k, v in categories.items()}
    found = find_reads(token_ids, tokenizer, fmt)
    spans = [ReadSpan(table.get(r.name, "invalid"), r.name_start, r.name_end, r.call_start, r.call_end) for r in found]
    return spans, [r.name for r in found]
