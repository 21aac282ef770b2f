"""Which skill a read names, however its name was written: case- and separator-insensitive keys.

A policy writes a skill's name as it likes: ``ledger negate ruby``, ``Ledger-Negate-Ruby``,
``ledger_negate_ruby``. :func:`skill_key` maps all of them to one key (``ledger-negate-ruby``:
lower case, runs of whitespace, ``-`` and ``_`` as one ``-``), and a :class:`SkillIndex` maps a
key back to the stored name of the skill it names. Two skills of one library whose names give
the same key (``PDF Tools`` and ``pdf-tools``) could not be told apart by a read, so the index
refuses such a library with an error naming both files (or both names as written, when no files are known),
and a list that names one skill twice.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable, Mapping

from skillgate_lib.env.names import display_name

_SEPARATORS = re.compile(r"[\s_\-]+")


def skill_key(written: str) -> str:
    """The key a written skill name is matched by: lower case, words joined by ``-`` (``""`` for no words)."""
    return "-".join(w for w in _SEPARATORS.split(written.strip().lower()) if w)


class SkillNameCollision(ValueError):
    """Two skills whose names give the same :func:`skill_key`."""


class SkillIndex:
    """Stored skill names by :func:`skill_key`, collisions refused.

    ``names``: the stored names; ``files``: optional name -> the file it came from (its SKILL.md),
    named in the collision error; ``where``: what the names are (``"library"``, ``"row 3's slate"``).
    """

    def __init__(self, names: Iterable[str], files: Mapping[str, Any] | None = None, where: str = "library"):
        self.names: dict[str, str] = {}
        files = files or {}
        for name in names:
            key = skill_key(name)
            first = self.names.get(key)
            if first == name:
                raise SkillNameCollision(f"{where}: skill {name!r} is listed twice")
            if first is not None:
                what = (f"{files[first]} and {files[name]}" if first in files and name in files
                        else f"{first!r} and {name!r}")
                raise SkillNameCollision(f"{where}: skills {what} both normalise to the key {key!r} (case and "
                                         "separators are ignored when matching a read), so a read could not tell them "
                                         "apart; rename one of them")
            self.names[key] = name

    @classmethod
    def of_library(cls, library: Mapping[str, Any], where: str = "library") -> "SkillIndex":
        """The index of a skill library (name -> an object with a ``path``, as :func:`skillgate_lib.env.skills.load_library` gives)."""
        files = {n: Path(getattr(s, "path")) for n, s in library.items() if getattr(s, "path", None) is not None}
        return cls(library, files, where)

    def stored(self, written: str) -> str | None:
        """The stored name ``written`` names, or ``None`` when it names no skill of the index."""
        return self.names.get(skill_key(written))

    def canonical_words(self, written: str) -> str:
        """How the kit's environment writes the skill ``written`` names (its display words); ``written`` unchanged if none."""
        name = self.stored(written)
        return written if name is None else display_name(name)
