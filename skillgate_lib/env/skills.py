"""SKILL.md files, skill libraries and 16-candidate slates.

A skill is one ``SKILL.md`` file (the Agent Skills convention): a YAML front
matter with ``name`` and ``description`` (plus an optional ``metadata`` map), then
a Markdown body that states the procedure::

    ---
    name: ledger-credit-amber
    description: credit total
    metadata:
      domain: ledger
      family: credit
      variant: amber
    ---
    0>2 1>3 2>8 3>6 4>0 5>5 6>4 7>7 8>9 9>1

The library lives at ``data/skills/<domain>/<name>/SKILL.md``; the directory name
must equal ``name``. A *slate* is what the policy sees for one task: the oracle
(same domain, family and variant as the task), *misleading* look-alikes (same
family, other variants: the same description, another variant word in the name,
another body), *relevant* skills (same domain, other families) and *irrelevant* ones
(other domains). Relevant and irrelevant candidates never carry the oracle's variant
word, so the task's cue ``mark <variant>`` names exactly one slate candidate: the oracle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np
import yaml

from skillgate_lib import paths

SLATE_CATEGORIES = ("oracle", "misleading", "relevant", "irrelevant")
_NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


class SkillFileError(ValueError):
    """A SKILL.md file breaks the format; the message names the file and the field."""


class LibraryError(ValueError):
    """A skill library is inconsistent (no files, a duplicate name); the message names the files."""


class SlateError(ValueError):
    """A slate cannot be built or is inconsistent; the message names the task and the category."""


@dataclass(frozen=True)
class Skill:
    """One parsed SKILL.md. ``family`` and ``variant`` come from ``metadata`` ("" when absent)."""

    name: str
    description: str
    body: str
    domain: str
    path: Path
    family: str = ""
    variant: str = ""


def parse_skill_md(path: str | Path) -> Skill:
    """Parse one SKILL.md with ``yaml.safe_load``; raise :class:`SkillFileError` naming file and field."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise SkillFileError(f"{path}: cannot read ({err.strerror})") from None
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise SkillFileError(f"{path}: missing YAML front matter (expected '---' on line 1)")
    try:
        close = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise SkillFileError(f"{path}: front matter opened on line 1 is never closed by a '---' line") from None
    try:
        meta = yaml.safe_load("\n".join(lines[1:close]))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 2}: " if mark is not None else ""
        raise SkillFileError(f"{path}: {where}front matter is not valid YAML ({getattr(err, 'problem', err)})") from None
    if not isinstance(meta, dict):
        raise SkillFileError(f"{path}: front matter must be a mapping with 'name' and 'description'")
    for field in ("name", "description"):
        value = meta.get(field)
        if not isinstance(value, str) or not value.strip():
            raise SkillFileError(f"{path}: field {field!r} is missing or empty in the front matter")
    name = meta["name"].strip()
    if not _NAME_RE.match(name):
        raise SkillFileError(f"{path}: field 'name' is {name!r}; expected lowercase letters, digits and hyphens")
    if path.parent.name != name:
        raise SkillFileError(f"{path}: field 'name' is {name!r} but the directory is {path.parent.name!r}; they must match")
    extra = meta.get("metadata") or {}
    if not isinstance(extra, dict):
        raise SkillFileError(f"{path}: field 'metadata' must be a mapping")
    body = "\n".join(lines[close + 1 :]).strip()
    if not body:
        raise SkillFileError(f"{path}: the body (after the front matter) is empty")
    return Skill(
        name=name,
        description=" ".join(meta["description"].split()),
        body=body,
        domain=str(extra.get("domain") or path.parent.parent.name),
        path=path,
        family=str(extra.get("family") or ""),
        variant=str(extra.get("variant") or ""),
    )


def load_library(root: str | Path = paths.DATA_DIR / "skills") -> dict[str, Skill]:
    """Every ``SKILL.md`` under ``root`` by name (sorted by path); duplicates are an error naming both files."""
    root = Path(root)
    files = sorted(root.rglob("SKILL.md"))
    if not files:
        raise LibraryError(f"{root}: no SKILL.md files found (expected <domain>/<name>/SKILL.md)")
    library: dict[str, Skill] = {}
    for f in files:
        skill = parse_skill_md(f)
        if skill.name in library:
            raise LibraryError(f"duplicate skill name {skill.name!r}: {library[skill.name].path} and {f}")
        library[skill.name] = skill
    return library


@dataclass(frozen=True)
class Candidate:
    """One slate line: what the policy sees (name, description) and the hidden category."""

    name: str
    description: str
    category: str  # one of SLATE_CATEGORIES


@dataclass(frozen=True)
class Slate:
    """The candidates shown for one task, in display order; exactly one is the oracle."""

    candidates: tuple[Candidate, ...]

    def __post_init__(self) -> None:
        names = [c.name for c in self.candidates]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise SlateError(f"slate lists {dup!r} twice")
        for c in self.candidates:
            if c.category not in SLATE_CATEGORIES:
                raise SlateError(f"slate candidate {c.name!r}: field 'category' is {c.category!r}; expected one of {SLATE_CATEGORIES}")
        n_oracle = sum(c.category == "oracle" for c in self.candidates)
        if n_oracle != 1:
            raise SlateError(f"slate has {n_oracle} oracle candidates; expected exactly 1")

    def category(self, name: str) -> str | None:
        """The category of ``name`` on this slate, or ``None`` when it is not on the slate."""
        for c in self.candidates:
            if c.name == name:
                return c.category
        return None

    @property
    def oracle(self) -> str:
        """The oracle's skill name."""
        return next(c.name for c in self.candidates if c.category == "oracle")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.candidates)

    def of(self, category: str) -> tuple[str, ...]:
        """Names of the candidates in ``category``, in display order."""
        return tuple(c.name for c in self.candidates if c.category == category)


def make_slate(
    library: Mapping[str, Skill],
    task,
    rng: np.random.Generator,
    sizes: tuple[int, int, int, int] = (1, 5, 5, 5),
) -> Slate:
    """Sample a shuffled slate for ``task`` (anything with an ``oracle`` skill name).

    ``sizes`` = (oracle, misleading, relevant, irrelevant) counts; the oracle count must
    be 1. Pools: misleading = same domain and family, other variant; relevant = same
    domain, other family; irrelevant = other domains; relevant and irrelevant exclude
    the oracle's variant. Raises :class:`SlateError` naming the task and the category
    that cannot be filled.
    """
    if len(sizes) != 4 or any(int(s) < 0 for s in sizes):
        raise SlateError(f"sizes must be four non-negative counts (oracle, misleading, relevant, irrelevant), got {sizes!r}")
    task_id = getattr(task, "task_id", "?")
    if sizes[0] != 1:
        raise SlateError(f"task {task_id}: sizes[0] (oracle) is {sizes[0]}; a slate needs exactly one oracle")
    oracle = library.get(task.oracle)
    if oracle is None:
        raise SlateError(f"task {task_id}: field 'oracle' names {task.oracle!r}, which is not in the library")
    if not oracle.family or not oracle.variant:
        raise SlateError(f"{oracle.path}: field 'metadata' needs 'family' and 'variant' for the skill to be an oracle")
    others = [s for s in library.values() if s.name != oracle.name]
    pools = {
        "misleading": [s for s in others if s.domain == oracle.domain and s.family == oracle.family],
        "relevant": [s for s in others if s.domain == oracle.domain and s.family != oracle.family and s.variant != oracle.variant],
        "irrelevant": [s for s in others if s.domain != oracle.domain and s.variant != oracle.variant],
    }
    picked = [Candidate(oracle.name, oracle.description, "oracle")]
    for category, size in zip(SLATE_CATEGORIES[1:], sizes[1:]):
        pool = pools[category]
        if size > len(pool):
            raise SlateError(
                f"task {task_id}: asked for {size} {category} candidates, the library has {len(pool)} "
                f"(oracle {oracle.name!r}, domain {oracle.domain!r}, family {oracle.family!r})"
            )
        for i in sorted(rng.choice(len(pool), size=size, replace=False)):
            picked.append(Candidate(pool[i].name, pool[i].description, category))
    order = rng.permutation(len(picked))
    return Slate(tuple(picked[i] for i in order))
