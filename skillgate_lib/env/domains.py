"""The five task domains: their symbols, procedure families and lookup tables.

Every skill's body is a *lookup table* over its domain's symbols, written as one
token per entry (``3>7`` maps ``3`` to ``7``). A task gives a start symbol and a
horizon ``H``; executing a skill is ``H`` chained lookups::

    state_0 = start,  state_k = table[state_{k-1}],   step line k:  step k : state_{k-1} state_k

The domains differ in alphabet and size (so each has its own symbols, tables and
step lines), not in the shape of the procedure: a chained in-context lookup is the
retrieval a from-scratch ~1 M-parameter model learns on a CPU (per-skill arithmetic
memorised in weights is not; ``docs/results.md``).

Tables are built so that selection matters at every horizon: within a family the
six variants' tables disagree on *every* key (``table_v(x) = sigma(x + o_v)`` with
one permutation ``sigma`` per family and distinct offsets ``o_v``), so a misleading
read gets step 1 wrong on every instance. A table no variant uses (another offset)
is what a policy executes when it has nothing to follow.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

VARIANTS = ("amber", "coral", "jade", "ruby", "teal", "ivory")
ENTRY_SEP = ">"


@dataclass(frozen=True)
class Domain:
    """A task domain: the object word of descriptions, six family words, the alphabet of its tables."""

    name: str
    obj: str
    families: tuple[str, ...]
    symbols: tuple[str, ...]

    @property
    def entries(self) -> tuple[str, ...]:
        """Every table-entry token of this domain (``key>value``)."""
        return tuple(f"{a}{ENTRY_SEP}{b}" for a in self.symbols for b in self.symbols)


DOMAINS: dict[str, Domain] = {
    d.name: d
    for d in (
        Domain("ledger", "total", ("credit", "debit", "rebate", "double", "triple", "negate"),
               tuple("0123456789")),
        Domain("cipher", "letters", ("shift", "unshift", "reflect", "stride", "recoil", "triad"),
               tuple("abcdefghij")),
        Domain("grid", "robot", ("march", "retreat", "port", "starboard", "slant", "bound"),
               ("a1", "a2", "a3", "b1", "b2", "b3", "c1", "c2", "c3")),
        Domain("filter", "items", ("upper", "lower", "nearby", "remote", "divisor", "modular"),
               ("ant", "bee", "cat", "dog", "eel", "fox", "gnu", "hen")),
        Domain("calendar", "day", ("advance", "rewind", "mirror", "hasten", "stagger", "surge"),
               ("mon", "tue", "wed", "thu", "fri", "sat", "sun")),
    )
}

Table = dict[str, str]


def _seeded(*parts: str) -> np.random.Generator:
    digest = hashlib.sha256("/".join(parts).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def family_tables(domain: str, family: str, table_seed: int = 0) -> tuple[dict[str, Table], Table]:
    """``({variant: table}, unused_table)`` of one family; stable across runs (seeded by its name).

    For every key the six variants and the unused table give seven distinct values.
    ``table_seed`` > 0 draws another set of tables of the same kind (a base trained on many
    such sets has to look values up in the body it read rather than recall them).
    """
    dom = DOMAINS[domain]
    n = len(dom.symbols)
    rng = _seeded(domain, family) if table_seed == 0 else _seeded(domain, family, f"tables-{table_seed}")
    sigma = rng.permutation(n)
    offsets = rng.choice(n, size=len(VARIANTS) + 1, replace=False)

    def table(offset: int) -> Table:
        return {dom.symbols[i]: dom.symbols[sigma[(i + offset) % n]] for i in range(n)}

    return {v: table(int(o)) for v, o in zip(VARIANTS, offsets)}, table(int(offsets[-1]))


def lookalike_tables(domain: str, family: str, agreement: float, table_seed: int = 0) -> dict[str, Table]:
    """The family's variant tables when look-alikes agree on part of their keys.

    ``agreement`` is the expected fraction of keys on which two variants of the family
    give the same value (0 gives :func:`family_tables`' variants, which disagree on every
    key). Each variant keeps its own value at a key with probability ``1 - sqrt(agreement)``
    and otherwise takes the family's shared value there (the unused table's), so two variants
    agree at a key exactly when both took the shared value. The draws are seeded by the
    family and variant names (and ``table_seed``, see :func:`family_tables`), so the tables
    are stable across runs.

    A look-alike then executes the oracle's chain exactly while the chain stays on keys the
    two agree on: at horizon ``H`` it succeeds with probability about ``agreement ** H``,
    which gives misleading reads a success rate that falls with the horizon.
    """
    if not 0.0 <= agreement <= 1.0:
        raise ValueError(f"lookalike_agreement must lie in [0, 1], got {agreement}")
    variants, shared = family_tables(domain, family, table_seed)
    if agreement == 0.0:
        return variants
    p = float(np.sqrt(agreement))
    out = {}
    for v, table in variants.items():
        rng = _seeded(domain, family, v, "agree", *([f"tables-{table_seed}"] if table_seed else []))
        take = rng.random(len(table)) < p
        out[v] = {k: (shared[k] if t else val) for (k, val), t in zip(table.items(), take)}
    return out


def render_table(table: Table) -> str:
    """The body line of a table: ``k>v`` entries in the alphabet's order."""
    return " ".join(f"{k}{ENTRY_SEP}{v}" for k, v in table.items())


def parse_table(body: str, domain: str) -> Table:
    """The table a body states; raises ``ValueError`` saying which entry is wrong."""
    dom = DOMAINS[domain]
    table: Table = {}
    for word in body.split():
        key, sep, value = word.partition(ENTRY_SEP)
        if not sep or key not in dom.symbols or value not in dom.symbols:
            raise ValueError(f"entry {word!r} is not '<key>{ENTRY_SEP}<value>' over the {domain} symbols {' '.join(dom.symbols)}")
        if key in table:
            raise ValueError(f"key {key!r} appears twice")
        table[key] = value
    missing = [s for s in dom.symbols if s not in table]
    if missing:
        raise ValueError(f"no entry for key(s) {' '.join(missing)}")
    return table


def run_chain(table: Table, start: str, horizon: int) -> tuple[tuple[str, ...], str]:
    """The ``horizon`` step lines and the answer of following ``table`` from ``start``."""
    state, lines = start, []
    for k in range(1, horizon + 1):
        nxt = table[state]
        lines.append(f"step {k} : {state} {nxt}")
        state = nxt
    return tuple(lines), state
