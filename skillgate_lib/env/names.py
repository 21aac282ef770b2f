"""How a read call's words name a skill: the one matching rule every engine uses.

A skill is stored under its hyphenated name (``ledger-negate-ruby``, the folder of its
SKILL.md); prompts list it, and the policy writes it, as the name's words
(``ledger negate ruby``), so the cue ``mark ruby`` can be copied into the read call.
:func:`skill_name` turns what a read call wrote into the name looked up on the slate;
:func:`display_name` is its inverse. The kit's environment (serving bodies, the
verifier), the TRL trainer and verl's reward manager all match reads with
:func:`skill_name`, so a read that the environment answers with a body is the read
the credit calls ``oracle``.
"""

from __future__ import annotations

from typing import Sequence

SEPARATOR = "-"
"""Joins a skill name's words in its stored form."""


def skill_name(written: str | Sequence[str]) -> str:
    """The slate name a read call names: its words (a string, split on whitespace, or a word list) joined by ``-``.

    ``skill_name("ledger  negate ruby") == skill_name(["ledger", "negate", "ruby"]) == "ledger-negate-ruby"``;
    a stored name maps to itself (``skill_name("ledger-negate-ruby") == "ledger-negate-ruby"``), so slates may be
    keyed by either form. An empty read gives ``""``, which names no skill.
    """
    words = written.split() if isinstance(written, str) else list(written)
    return SEPARATOR.join(words)


def display_name(name: str) -> str:
    """How prompts and read calls write a skill name: its hyphen-separated words (inverse of :func:`skill_name`)."""
    return name.replace(SEPARATOR, " ")
