"""Writing the embedded skill library (``data/skills``) and splitting instances into train / eval.

One SKILL.md per (domain, family, variant), 5 x 6 x 6 = 180 files::

    ---
    name: ledger-credit-amber
    description: credit total
    metadata:
      domain: ledger
      family: credit
      variant: amber
    ---
    0>3 1>9 2>0 3>5 4>8 5>1 6>2 7>6 8>4 9>7

The description is the same for the six variants of a family: a misleading
look-alike differs from the oracle only in the variant word of its name (and in
its table), which is what makes it plausible by surface features.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from skillgate_lib import paths
from skillgate_lib.env.domains import DOMAINS, family_tables, render_table

#: Percent of instances (by a hash of the task id) that belong to the eval split.
EVAL_PERCENT = 20
#: Percent of the eval split's instances (by a second hash) that form the validation set;
#: the rest is the test set. Selection (learning rate, lambda, steps) reads only the first,
#: reported numbers only the second.
VAL_PERCENT = 40
#: The held-out splits: ``eval`` is the whole held-out pool, ``val`` and ``test`` its two disjoint parts.
SPLITS = ("train", "eval", "val", "test")


def name_of(domain: str, family: str, variant: str) -> str:
    """A library skill's name, ``<domain>-<family>-<variant>`` (what ``names.skill_name`` maps a read to)."""
    return f"{domain}-{family}-{variant}"


def description(domain: str, family: str) -> str:
    """What the slate shows after a skill's name: the family's verb and the domain's object."""
    return f"{family} {DOMAINS[domain].obj}"


def skill_md(domain: str, family: str, variant: str) -> str:
    """The SKILL.md text of one embedded skill."""
    tables, _ = family_tables(domain, family)
    return (
        f"---\nname: {name_of(domain, family, variant)}\ndescription: {description(domain, family)}\n"
        f"metadata:\n  domain: {domain}\n  family: {family}\n  variant: {variant}\n---\n"
        f"{render_table(tables[variant])}\n"
    )


def write_library(root: str | Path = paths.DATA_DIR / "skills") -> list[Path]:
    """Write the embedded library as SKILL.md files under ``root``; returns the written paths.

    Deterministic: the same bytes on every run. Skill directories of these domains that
    the spec no longer produces are removed (only their SKILL.md and the empty directory).
    """
    root = Path(root)
    written = []
    for dom in DOMAINS.values():
        keep = set()
        for family in dom.families:
            for variant in family_tables(dom.name, family)[0]:
                name = name_of(dom.name, family, variant)
                keep.add(name)
                path = root / dom.name / name / "SKILL.md"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(skill_md(dom.name, family, variant), encoding="utf-8")
                written.append(path)
        for stale in (root / dom.name).iterdir():
            if stale.is_dir() and stale.name not in keep:
                (stale / "SKILL.md").unlink(missing_ok=True)
                stale.rmdir()
    return written


def _bucket(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") % 100


def split_of(task_id: str) -> str:
    """``"eval"`` for EVAL_PERCENT % of instances (by a hash of the id), else ``"train"``."""
    return "eval" if _bucket(task_id) < EVAL_PERCENT else "train"


def heldout_part(task_id: str) -> str:
    """Of an eval-split instance: ``"val"`` for VAL_PERCENT % (by a second hash), else ``"test"``."""
    return "val" if _bucket(f"heldout:{task_id}") < VAL_PERCENT else "test"


def in_split(task_id: str, split: str) -> bool:
    """Whether ``task_id`` belongs to ``split`` (one of :data:`SPLITS`); ``eval`` holds both ``val`` and ``test``."""
    top = split_of(task_id)
    if split in ("train", "eval"):
        return top == split
    return top == "eval" and heldout_part(task_id) == split
