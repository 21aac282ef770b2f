"""The skill-slate environment: five task domains, their verifier, scripted reference policies.

Example episode (ledger, H = 3, seed 0; the policy reads the oracle)::

    task : ledger credit the total , mark amber , start 4 , steps 3
    skills :
    cipher-unshift-coral : cipher unshift the letters , mark coral
    cipher-stride-teal : cipher stride the letters , mark teal
    ledger-credit-amber : ledger credit the total , mark amber
    filter-remote-coral : filter remote the items , mark coral
    ledger-credit-teal : ledger credit the total , mark teal
    ledger-credit-jade : ledger credit the total , mark jade
    ledger-debit-teal : ledger debit the total , mark teal
    ledger-credit-ruby : ledger credit the total , mark ruby
    ledger-negate-coral : ledger negate the total , mark coral
    ledger-negate-ruby : ledger negate the total , mark ruby
    filter-divisor-coral : filter divisor the items , mark coral
    ledger-credit-ivory : ledger credit the total , mark ivory
    ledger-rebate-ivory : ledger rebate the total , mark ivory
    ledger-credit-coral : ledger credit the total , mark coral
    ledger-debit-ivory : ledger debit the total , mark ivory
    filter-lower-ruby : filter lower the items , mark ruby
    respond :
    <read> ledger-credit-amber </read> <body> rule : add 7 . new total = old total + 7 , last digit . </body>
    step 1 : 4 add 7 = 1
    step 2 : 1 add 7 = 8
    step 3 : 8 add 7 = 5
    <answer> 5 </answer>

The prompt ends at ``respond :``. After ``</read>`` the environment inserted the
`` <body> ... </body>`` text; everything else in the response is the policy's.
A misleading read (``ledger-credit-teal``) would insert another parameter and fail
every step line.

Design (see ../shared/DESIGN.md, "The environment")
----------------------------------------------------
* Five domains, each a different kind of procedure over one-token symbols:
  ``ledger`` (a running digit total, mod 10), ``cipher`` (a per-letter map of the
  task's word, mod 26), ``grid`` (a robot walk over the task's moves on a 7 x 7
  torus), ``filter`` (keep/drop each of the task's digits, the answer is what is
  kept) and ``calendar`` (a running weekday, mod 7).
* Each domain has 6 procedure *families* (an op such as ``add`` or ``walk``) and each
  family 6 *variants* (a colour word naming the parameter, e.g. ``amber`` = 3):
  36 skills per domain, named ``<domain>-<family>-<variant>``, each ONE token.
* The task text carries the oracle's description verbatim, ending in the cue
  ``mark <variant>``. That cue occurs on exactly one slate line (the oracle's):
  misleading look-alikes share every other word, relevant and irrelevant
  candidates never carry the oracle's variant.
* A body states ``rule : <op> <p> .`` plus a one-line explanation; a step line is
  ``step k : <input(s)> <op> <p> = <output(s)>``. Following the body means copying
  ``<op> <p>`` into every step line, so a misleading body (other ``p``) or a
  relevant one (other ``op``) fails the strict verifier on every step.
* Episode protocol: the policy may write ``<read> NAME </read>``; the environment
  appends `` <body> ... </body>`` (or `` <error> ... </error>`` for an unknown name,
  a malformed read, or a read past ``max_reads``, which also ends the read phase).
  Then H step lines and ``<answer> ... </answer>``. Success = no invalid read, no
  malformed action, every step line and the answer right, and no injected
  per-step failure (probability ``step_failure`` each, drawn from ``rng``).

Character and token bookkeeping: the response is the policy's text with the
environment's insertions in place. :class:`Read` records the character span of
each skill name; :func:`token_spans` maps it to the token range of the response.
Every structural piece is separated by whitespace, so tokenizing the pieces one by
one (as a rollout loop inserting tool text does) gives the same tokens as
tokenizing the whole response.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from . import paths
from .skills import Skill, Slate, SlateError, load_library, make_slate
from .tokenizer import load_tokenizer, token_spans

__all__ = [
    "DOMAINS", "VARIANTS", "EpisodeError", "Task", "Read", "Outcome", "SkillSlateEnv",
    "token_spans", "load_tokenizer", "write_library", "split_of",
    "oracle_policy", "random_read_policy", "no_read_policy", "misleading_read_policy", "selector_policy",
    "cue_selector", "name_match_selector", "POLICIES",
]

VARIANTS = ("amber", "coral", "jade", "ruby", "teal", "ivory")
READ_OPEN, READ_CLOSE = "<read>", "</read>"
BODY_OPEN, BODY_CLOSE = "<body>", "</body>"
ERROR_OPEN, ERROR_CLOSE = "<error>", "</error>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
ERR_UNKNOWN, ERR_LIMIT, ERR_BAD = "unknown skill", "read limit", "bad read"
PROMPT_END = "respond :"
#: Percent of instances (by a hash of the task id) that belong to the eval split.
EVAL_PERCENT = 20
#: Words the tokenizer gets besides the library's: step numbers up to this horizon.
MAX_HORIZON = 16
_TRAILING_OK = {"</s>", "<pad>"}


class EpisodeError(ValueError):
    """An episode is inconsistent (its oracle is not on the slate, an unknown domain or split)."""


# ---------------------------------------------------------------------------- domains

DIGITS = tuple(str(d) for d in range(10))
LETTERS = tuple("abcdefghijklmnopqrstuvwxyz")
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
MOVES = {"N": (-1, 0), "E": (0, 1), "S": (1, 0), "W": (0, -1)}
GRID = 7


@dataclass(frozen=True)
class Family:
    """A procedure family: its keyword, the op token of its bodies and step lines, its parameter pool."""

    word: str
    op: str
    pool: tuple[int, ...]  # the variants' parameters are drawn from here
    rule: str  # explanation after "rule : <op> <p> ."; "{p}" stands for the parameter


@dataclass(frozen=True)
class Domain:
    """A task domain: families, how to sample and render inputs, and how to execute a procedure."""

    name: str
    obj: str  # the object word of descriptions: "<domain> <family> the <obj>"
    families: tuple[Family, ...]
    sample: Callable[[np.random.Generator, int], tuple[str, ...]]  # (rng, H) -> inputs
    render: Callable[[tuple[str, ...]], str]  # inputs -> task-text fragment
    run: Callable[[Callable[..., object], str, int, tuple[str, ...], int], tuple[tuple[str, ...], str]]
    ops: Mapping[str, Callable[..., object]]
    symbols: tuple[str, ...]  # every symbol inputs and outputs use (for the vocabulary)


def _fold(show: Callable[[int], str], size: int):
    """Run a running-state domain: state_k = op(state_{k-1}, p) mod size."""

    def run(fn, op, p, inputs, h):
        a, lines = int(inputs[0]), []
        for k in range(1, h + 1):
            b = fn(a, p) % size
            lines.append(f"step {k} : {show(a)} {op} {p} = {show(b)}")
            a = b
        return tuple(lines), show(a)

    return run


def _cipher_run(fn, op, p, inputs, h):
    outs = [LETTERS[fn(LETTERS.index(c), p) % 26] for c in inputs]
    lines = tuple(f"step {k} : {c} {op} {p} = {o}" for k, (c, o) in enumerate(zip(inputs, outs), start=1))
    return lines, " ".join(outs)


def _grid_run(fn, op, p, inputs, h):
    r, c, lines = int(inputs[0]), int(inputs[1]), []
    for k, m in enumerate(inputs[2:], start=1):
        dr, dc = fn(MOVES[m], p)
        r2, c2 = (r + dr) % GRID, (c + dc) % GRID
        lines.append(f"step {k} : {r} {c} {m} {op} {p} = {r2} {c2}")
        r, c = r2, c2
    return tuple(lines), f"{r} {c}"


def _filter_run(fn, op, p, inputs, h):
    keep = [bool(fn(int(x), p)) for x in inputs]
    lines = tuple(f"step {k} : {x} {op} {p} = {'keep' if y else 'drop'}" for k, (x, y) in enumerate(zip(inputs, keep), start=1))
    kept = [x for x, y in zip(inputs, keep) if y]
    return lines, " ".join(kept) if kept else "none"


def _left(d):
    return (-d[1], d[0])


def _right(d):
    return (d[1], -d[0])


DOMAINS: dict[str, Domain] = {
    d.name: d
    for d in (
        Domain(
            "ledger", "total",
            (
                Family("credit", "add", tuple(range(1, 10)), "new total = old total + {p} , last digit ."),
                Family("debit", "sub", tuple(range(1, 10)), "new total = old total - {p} , last digit ."),
                Family("rebate", "from", tuple(range(1, 10)), "new total = {p} - old total , last digit ."),
                Family("double", "dbl", tuple(range(1, 10)), "new total = twice old total + {p} , last digit ."),
                Family("triple", "tri", tuple(range(1, 10)), "new total = three times old total + {p} , last digit ."),
                Family("negate", "neg", tuple(range(1, 10)), "new total = 0 - old total - {p} , last digit ."),
            ),
            sample=lambda rng, h: (str(rng.integers(10)),),
            render=lambda x: f"start {x[0]}",
            run=_fold(str, 10),
            ops={"add": lambda a, p: a + p, "sub": lambda a, p: a - p, "from": lambda a, p: p - a,
                 "dbl": lambda a, p: 2 * a + p, "tri": lambda a, p: 3 * a + p, "neg": lambda a, p: -a - p},
            symbols=DIGITS,
        ),
        Domain(
            "cipher", "letters",
            (
                Family("shift", "fwd", tuple(range(1, 8)), "move each letter {p} places forward , z wraps to a ."),
                Family("unshift", "bwd", tuple(range(1, 8)), "move each letter {p} places back , a wraps to z ."),
                Family("reflect", "flip", tuple(range(1, 8)), "new letter index = {p} - old index , a is 0 , wrap at 26 ."),
                Family("stride", "skip", tuple(range(1, 8)), "move each letter twice {p} places forward , wrap at 26 ."),
                Family("recoil", "hop", tuple(range(1, 8)), "move each letter twice {p} places back , wrap at 26 ."),
                Family("triad", "trio", tuple(range(1, 8)), "move each letter three times {p} places forward , wrap at 26 ."),
            ),
            sample=lambda rng, h: tuple(LETTERS[i] for i in rng.integers(26, size=h)),
            render=lambda x: "word " + " ".join(x),
            run=_cipher_run,
            ops={"fwd": lambda a, p: a + p, "bwd": lambda a, p: a - p, "flip": lambda a, p: p - a,
                 "skip": lambda a, p: a + 2 * p, "hop": lambda a, p: a - 2 * p, "trio": lambda a, p: a + 3 * p},
            symbols=LETTERS,
        ),
        Domain(
            "grid", "robot",
            (
                Family("march", "walk", tuple(range(1, 7)), "go {p} cells along the move , wrap at 7 ."),
                Family("retreat", "back", tuple(range(1, 7)), "go {p} cells against the move , wrap at 7 ."),
                Family("port", "left", tuple(range(1, 7)), "turn left of the move , then go {p} cells , wrap at 7 ."),
                Family("starboard", "right", tuple(range(1, 7)), "turn right of the move , then go {p} cells , wrap at 7 ."),
                Family("slant", "diag", tuple(range(1, 7)), "go {p} cells along the move and {p} to its right , wrap at 7 ."),
                Family("bound", "leap", tuple(range(1, 7)), "go twice {p} cells along the move , wrap at 7 ."),
            ),
            sample=lambda rng, h: (str(rng.integers(GRID)), str(rng.integers(GRID)))
            + tuple("NESW"[i] for i in rng.integers(4, size=h)),
            render=lambda x: f"start {x[0]} {x[1]} , moves " + " ".join(x[2:]),
            run=_grid_run,
            ops={
                "walk": lambda d, p: (d[0] * p, d[1] * p),
                "back": lambda d, p: (-d[0] * p, -d[1] * p),
                "left": lambda d, p: (_left(d)[0] * p, _left(d)[1] * p),
                "right": lambda d, p: (_right(d)[0] * p, _right(d)[1] * p),
                "diag": lambda d, p: ((d[0] + _right(d)[0]) * p, (d[1] + _right(d)[1]) * p),
                "leap": lambda d, p: (2 * d[0] * p, 2 * d[1] * p),
            },
            symbols=tuple(str(i) for i in range(GRID)) + tuple(MOVES),
        ),
        Domain(
            "filter", "items",
            (
                Family("upper", "above", tuple(range(1, 9)), "keep the item if it is more than {p} , else drop ."),
                Family("lower", "below", tuple(range(1, 9)), "keep the item if it is less than {p} , else drop ."),
                Family("nearby", "near", tuple(range(0, 10)), "keep the item if it is within 1 of {p} , else drop ."),
                Family("remote", "far", tuple(range(0, 10)), "keep the item if it is 3 or more from {p} , else drop ."),
                Family("divisor", "div", tuple(range(2, 8)), "keep the item if {p} divides it , else drop ."),
                Family("modular", "wrap", tuple(range(1, 10)), "keep the item if last digit of item + {p} is under 5 , else drop ."),
            ),
            sample=lambda rng, h: tuple(str(v) for v in rng.integers(10, size=h)),
            render=lambda x: "items " + " ".join(x),
            run=_filter_run,
            ops={"above": lambda x, p: x > p, "below": lambda x, p: x < p, "near": lambda x, p: abs(x - p) <= 1,
                 "far": lambda x, p: abs(x - p) >= 3, "div": lambda x, p: x % p == 0,
                 "wrap": lambda x, p: (x + p) % 10 < 5},
            symbols=DIGITS + ("keep", "drop", "none"),
        ),
        Domain(
            "calendar", "day",
            (
                Family("advance", "after", tuple(range(1, 7)), "new day = {p} days after old day , sun wraps to mon ."),
                Family("rewind", "before", tuple(range(1, 7)), "new day = {p} days before old day , mon wraps to sun ."),
                Family("mirror", "opp", tuple(range(1, 7)), "new day index = {p} - old index , mon is 0 , wrap at 7 ."),
                Family("hasten", "twice", tuple(range(1, 7)), "new day index = twice old index + {p} , mon is 0 , wrap at 7 ."),
                Family("stagger", "pace", tuple(range(1, 7)), "new day = twice {p} days after old day , wrap at 7 ."),
                Family("surge", "thrice", tuple(range(1, 7)), "new day index = three times old index + {p} , mon is 0 ."),
            ),
            sample=lambda rng, h: (str(rng.integers(7)),),
            render=lambda x: f"start {DAYS[int(x[0])]}",
            run=_fold(lambda i: DAYS[i], 7),
            ops={"after": lambda a, p: a + p, "before": lambda a, p: a - p, "opp": lambda a, p: p - a,
                 "twice": lambda a, p: 2 * a + p, "pace": lambda a, p: a + 2 * p, "thrice": lambda a, p: 3 * a + p},
            symbols=DAYS,
        ),
    )
}
_OP_DOMAIN = {op: d.name for d in DOMAINS.values() for op in d.ops}


def _variant_params(domain: str, family: Family) -> dict[str, int]:
    """The fixed variant -> parameter map of one family (seeded by its name, so stable across runs)."""
    seed = int.from_bytes(hashlib.sha256(f"{domain}/{family.word}".encode()).digest()[:8], "little")
    chosen = np.random.default_rng(seed).choice(len(family.pool), size=len(VARIANTS), replace=False)
    return {v: family.pool[i] for v, i in zip(VARIANTS, chosen)}


def description(domain: str, family: str, variant: str) -> str:
    return f"{domain} {family} the {DOMAINS[domain].obj} , mark {variant}"


def write_library(root: str | Path = paths.DATA_DIR / "skills") -> list[Path]:
    """Write the embedded library (5 domains x 6 families x 6 variants) as SKILL.md files under ``root``.

    Deterministic: the same bytes on every run. Skill directories of these domains that
    the spec no longer produces are removed. Returns the written paths.
    """
    root = Path(root)
    written = []
    for dom in DOMAINS.values():
        keep = set()
        for fam in dom.families:
            for variant, p in _variant_params(dom.name, fam).items():
                name = f"{dom.name}-{fam.word}-{variant}"
                keep.add(name)
                text = (
                    f"---\nname: {name}\ndescription: {description(dom.name, fam.word, variant)}\n"
                    f"metadata:\n  domain: {dom.name}\n  family: {fam.word}\n  variant: {variant}\n---\n"
                    f"rule : {fam.op} {p} . {fam.rule.format(p=p)}\n"
                )
                path = root / dom.name / name / "SKILL.md"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
                written.append(path)
        for stale in (root / dom.name).iterdir():
            if stale.is_dir() and stale.name not in keep:
                for f in stale.iterdir():
                    f.unlink()
                stale.rmdir()
    return written


def split_of(task_id: str) -> str:
    """``"eval"`` for EVAL_PERCENT % of instances (by a hash of the id), else ``"train"``."""
    h = int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:8], "little")
    return "eval" if h % 100 < EVAL_PERCENT else "train"


# ---------------------------------------------------------------------------- episode records


@dataclass(frozen=True)
class Task:
    """One task instance. ``task_id`` is its content, so equal ids mean equal instances."""

    task_id: str
    domain: str
    horizon: int
    oracle: str  # the oracle skill's name
    family: str
    variant: str
    inputs: tuple[str, ...]  # ledger/calendar: (start,); cipher/filter: H items; grid: (row, col, move_1..move_H)
    text: str  # the task statement shown in the prompt
    gold_steps: tuple[str, ...]  # the H correct step lines
    gold_answer: str  # the correct answer words (space-separated)


@dataclass(frozen=True)
class Read:
    """One read action: the name written, its slate category and its char span in the response."""

    name: str
    category: str  # oracle | misleading | relevant | irrelevant | invalid
    char_start: int
    char_end: int
    served: bool = True  # False when the environment answered with an error instead of the body


@dataclass(frozen=True)
class Outcome:
    """The verifier's verdict on one response."""

    reward: float
    success: bool
    reads: tuple[Read, ...]
    answer: str | None
    malformed: bool
    tool_spans: tuple[tuple[int, int], ...]  # char spans of environment-inserted text in the response
    steps_correct: int = 0  # leading step lines that match the gold lines


def _words(text: str) -> list[tuple[str, int, int]]:
    return [(m.group(), m.start(), m.end()) for m in re.finditer(r"\S+", text)]


def _rng_for(*parts: object) -> np.random.Generator:
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


class SkillSlateEnv:
    """Tasks, slates, prompts, tool responses and the verifier over a skill library.

    ``library``: name -> Skill (default: the committed ``data/skills``).
    ``slate_sizes``: (oracle, misleading, relevant, irrelevant) counts per slate.
    ``max_reads``: reads served; the next read gets an error text and ends the read phase.
    ``max_response_chars``: longer responses score 0 (malformed).
    ``step_failure``: injected probability that each step fails regardless of the text.
    ``domains``: default task domains (a subset of :data:`DOMAINS`; e.g. four for a held-out-domain run).
    """

    def __init__(
        self,
        library: Mapping[str, Skill] | None = None,
        slate_sizes: tuple[int, int, int, int] = (1, 5, 5, 5),
        max_reads: int = 4,
        max_response_chars: int = 2000,
        step_failure: float = 0.0,
        domains: Sequence[str] | None = None,
    ):
        if not 0.0 <= step_failure <= 1.0:
            raise ValueError(f"step_failure must lie in [0, 1], got {step_failure}")
        if max_reads < 1:
            raise ValueError(f"max_reads must be >= 1, got {max_reads}")
        self.library = dict(load_library() if library is None else library)
        self.slate_sizes = tuple(slate_sizes)
        self.max_reads = max_reads
        self.max_response_chars = max_response_chars
        self.step_failure = step_failure
        # (op, p) of every embedded-domain skill, parsed from its body; and the task index.
        self.procedures: dict[str, tuple[str, int]] = {}
        self.index: dict[tuple[str, str, str], str] = {}
        for s in self.library.values():
            if s.domain not in DOMAINS:
                continue  # foreign skills can still appear as irrelevant candidates
            w = s.body.split()
            if len(w) < 4 or w[:2] != ["rule", ":"] or _OP_DOMAIN.get(w[2]) != s.domain or not w[3].isdigit():
                raise ValueError(f"{s.path}: body must start with 'rule : <op> <p>' using an op of domain {s.domain!r}, got {' '.join(w[:4])!r}")
            self.procedures[s.name] = (w[2], int(w[3]))
            self.index[(s.domain, s.family, s.variant)] = s.name
        self.domains = self._check_domains(domains if domains is not None else sorted({d for d, _, _ in self.index}))

    # ------------------------------------------------------------------ tasks

    def _check_domains(self, domains: Iterable[str]) -> tuple[str, ...]:
        domains = tuple(domains)
        present = {d for d, _, _ in self.index}
        bad = [d for d in domains if d not in present]
        if bad or not domains:
            raise EpisodeError(f"domains {bad or domains!r}: expected a non-empty subset of {sorted(present)}")
        return domains

    def make_task(self, domain: str, family: str, variant: str, inputs: tuple[str, ...], horizon: int) -> Task:
        """The task instance for explicit content (gold lines computed from the oracle's body)."""
        oracle = self.index.get((domain, family, variant))
        if oracle is None:
            raise EpisodeError(f"no skill for domain {domain!r}, family {family!r}, variant {variant!r} in the library")
        dom = DOMAINS[domain]
        steps, answer = self.execute(oracle, domain, inputs, horizon)
        return Task(
            task_id=f"{domain}-{family}-{variant}-h{horizon}-{'.'.join(inputs)}",
            domain=domain, horizon=horizon, oracle=oracle, family=family, variant=variant, inputs=tuple(inputs),
            text=f"task : {description(domain, family, variant)} , {dom.render(inputs)} , steps {horizon}",
            gold_steps=steps, gold_answer=answer,
        )

    def sample_tasks(
        self, n: int, split: str, seed: int, horizons: Iterable[int] = range(1, 9), domains: Sequence[str] | None = None
    ) -> list[Task]:
        """``n`` instances of ``split`` ("train" / "eval"), deterministic in ``seed``.

        Domain, family, variant and horizon are uniform; an instance belongs to the split
        that :func:`split_of` gives its id, so the splits never share an instance (both
        may repeat instances internally).
        """
        if split not in ("train", "eval"):
            raise EpisodeError(f"split must be 'train' or 'eval', got {split!r}")
        horizons = tuple(horizons)
        if not horizons or min(horizons) < 1 or max(horizons) > MAX_HORIZON:
            raise EpisodeError(f"horizons must lie in 1..{MAX_HORIZON}, got {horizons!r}")
        domains = self._check_domains(domains if domains is not None else self.domains)
        rng = np.random.default_rng(seed)
        out: list[Task] = []
        while len(out) < n:
            dom = DOMAINS[domains[rng.integers(len(domains))]]
            keys = sorted(k for k in self.index if k[0] == dom.name)
            _, family, variant = keys[rng.integers(len(keys))]
            h = int(horizons[rng.integers(len(horizons))])
            inputs = dom.sample(rng, h)
            task_id = f"{dom.name}-{family}-{variant}-h{h}-{'.'.join(inputs)}"
            if split_of(task_id) == split:
                out.append(self.make_task(dom.name, family, variant, inputs, h))
        return out

    def execute(self, skill: str | None, domain: str, inputs: tuple[str, ...], horizon: int, family: str = "") -> tuple[tuple[str, ...], str]:
        """Step lines and answer from following ``skill``'s body on these inputs.

        A skill of another domain (or ``None``) cannot be followed; the policy then guesses
        ``family``'s op with a parameter no variant of it uses.
        """
        dom = DOMAINS[domain]
        if skill is not None and self.library[skill].domain == domain:
            op, p = self.procedures[skill]
        else:
            fam = next(f for f in dom.families if f.word == family)
            used = {self.procedures[n][1] for (d, f, _), n in self.index.items() if d == domain and f == family}
            op, p = fam.op, next(v for v in range(1, 100) if v not in used)
        return dom.run(dom.ops[op], op, p, tuple(inputs), horizon)

    # ------------------------------------------------------------------ slates and prompts

    def slate(self, task: Task, seed: int) -> Slate:
        """The task's slate, deterministic in (task, seed)."""
        return make_slate(self.library, task, _rng_for(task.task_id, seed), self.slate_sizes)

    def _check(self, task: Task, slate: Slate) -> None:
        if slate.category(task.oracle) != "oracle":
            raise EpisodeError(
                f"task {task.task_id}: field 'oracle' ({task.oracle!r}) is not the oracle of the slate "
                f"(category {slate.category(task.oracle)!r}; slate oracle {slate.oracle!r})"
            )

    def prompt(self, task: Task, slate: Slate) -> str:
        """Task text, the slate lines and ``respond :``, where the policy starts writing."""
        self._check(task, slate)
        return "\n".join([task.text, "skills :", *(c.line() for c in slate.candidates), PROMPT_END])

    # ------------------------------------------------------------------ tool calls

    def _insertion(self, slate: Slate, inner: Sequence[str], k: int) -> str:
        """The environment's text after the k-th (1-based) read naming ``inner``."""
        if k > self.max_reads:
            return f"{ERROR_OPEN} {ERR_LIMIT} {ERROR_CLOSE}"
        if len(inner) != 1:
            return f"{ERROR_OPEN} {ERR_BAD} {ERROR_CLOSE}"
        if slate.category(inner[0]) is None:
            return f"{ERROR_OPEN} {ERR_UNKNOWN} {ERROR_CLOSE}"
        return f"{BODY_OPEN} {' '.join(self.library[inner[0]].body.split())} {BODY_CLOSE}"

    def tool_response(self, task: Task, slate: Slate, response_so_far: str) -> str | None:
        """Text to append after a read action that ``response_so_far`` ends with (leading space included).

        The body for a name on the slate; an error text for an off-slate name, a read whose
        content is not exactly one word, or a read past ``max_reads``. ``None`` when the
        response does not end with ``<read> ... </read>``.
        """
        self._check(task, slate)
        words = response_so_far.split()
        if not words or words[-1] != READ_CLOSE or READ_OPEN not in words:
            return None
        start = len(words) - 1 - words[::-1].index(READ_OPEN)
        inner = words[start + 1 : -1]
        if READ_CLOSE in inner:
            return None
        return " " + self._insertion(slate, inner, k=words.count(READ_CLOSE))

    # ------------------------------------------------------------------ verifier

    def score(self, task: Task, slate: Slate, response: str, rng: np.random.Generator | None = None) -> Outcome:
        """Parse and verify ``response`` (never raises on policy text).

        Grammar: ``(<read> NAME </read> INSERTION)* STEP_LINES <answer> WORDS </answer>``,
        where each INSERTION must be exactly what :meth:`tool_response` returns. Success
        needs a well-formed response, no invalid read, the gold step lines and answer, and
        that none of the H injected per-step failures fire (``rng``; when ``None``, a
        generator seeded by the task and response, so scoring stays deterministic).
        """
        self._check(task, slate)
        words = _words(response)
        toks = [w for w, _, _ in words]
        malformed = len(response) > self.max_response_chars
        reads: list[Read] = []
        spans: list[tuple[int, int]] = []
        i, closed = 0, False
        while i < len(toks) and toks[i] == READ_OPEN and not malformed:
            if closed:
                malformed = True  # a read after the read phase ended
                break
            try:
                j = toks.index(READ_CLOSE, i + 1)
            except ValueError:
                malformed = True
                break
            inner = toks[i + 1 : j]
            if not inner or READ_OPEN in inner:
                malformed = True
                break
            name = " ".join(inner)
            category = slate.category(name) if len(inner) == 1 else None
            k = len(reads) + 1
            reads.append(Read(name, category or "invalid", words[i + 1][1], words[j - 1][2],
                              served=category is not None and k <= self.max_reads))
            malformed |= len(inner) != 1
            expected = self._insertion(slate, inner, k).split()
            got = toks[j + 1 : j + 1 + len(expected)]
            if got != expected:
                malformed = True
                break
            spans.append((words[j + 1][1], words[j + len(expected)][2]))
            i = j + 1 + len(expected)
            closed = k > self.max_reads
        answer = None
        exec_toks: list[str] = []
        if not malformed:
            try:
                a = toks.index(ANSWER_OPEN, i)
                b = toks.index(ANSWER_CLOSE, a + 1)
            except ValueError:
                malformed = True
            else:
                exec_toks = toks[i:a]
                answer = " ".join(toks[a + 1 : b])
                malformed = not set(toks[b + 1 :]) <= _TRAILING_OK or READ_OPEN in exec_toks
        lines = _split_steps(exec_toks)
        steps_correct = 0
        for got_line, gold in zip(lines, task.gold_steps):
            if got_line != gold:
                break
            steps_correct += 1
        correct = (not malformed and lines == list(task.gold_steps) and answer == task.gold_answer
                   and all(r.category != "invalid" for r in reads))
        if rng is None:
            rng = _rng_for(task.task_id, response)
        survived = bool(np.all(rng.random(task.horizon) >= self.step_failure)) if self.step_failure > 0 else True
        success = correct and survived
        return Outcome(float(success), success, tuple(reads), answer, malformed, tuple(spans), steps_correct)

    # ------------------------------------------------------------------ demonstrations

    def demonstration(self, task: Task, slate: Slate, reads: Sequence[str]) -> str:
        """A correct-format response: ``reads`` (each followed by the inserted text), then H step lines, then the answer.

        The steps follow the oracle's body when the oracle was read and served, else the
        last served read's body (a wrong answer), else (no usable read) the family's op
        with a parameter no variant uses.
        """
        self._check(task, slate)
        parts, served = [], []
        for k, name in enumerate(reads, start=1):
            parts.append(f"{READ_OPEN} {name} {READ_CLOSE}" + " " + self._insertion(slate, name.split(), k))
            if k <= self.max_reads and slate.category(name) is not None:
                served.append(name)
            if k > self.max_reads:
                break
        follow = task.oracle if task.oracle in served else (served[-1] if served else None)
        steps, answer = self.execute(follow, task.domain, task.inputs, task.horizon, family=task.family)
        return "\n".join([*parts, *steps, f"{ANSWER_OPEN} {answer} {ANSWER_CLOSE}"])

    # ------------------------------------------------------------------ vocabulary

    def vocabulary(self) -> list[str]:
        """Every word prompts, insertions and responses of this environment can contain (sorted)."""
        words: set[str] = set()
        for s in self.library.values():
            words |= {s.name, *s.description.split(), *s.body.split()}
        for d in DOMAINS.values():
            words |= {d.name, d.obj, *d.symbols, *d.ops}
            words |= {f.word for f in d.families}
        words |= {str(i) for i in range(MAX_HORIZON + 1)} | set(VARIANTS)
        words |= {READ_OPEN, READ_CLOSE, BODY_OPEN, BODY_CLOSE, ERROR_OPEN, ERROR_CLOSE, ANSWER_OPEN, ANSWER_CLOSE}
        words |= set(f"{ERR_UNKNOWN} {ERR_LIMIT} {ERR_BAD} {PROMPT_END}".split())
        words |= set("task : , mark start word moves items steps skills step = the".split())
        return sorted(words)


def _split_steps(toks: Sequence[str]) -> list[str]:
    lines: list[list[str]] = []
    for t in toks:
        if t == "step" or not lines:
            lines.append([])
        lines[-1].append(t)
    return [" ".join(line) for line in lines]


# ---------------------------------------------------------------------------- scripted policies
# Every policy is (env, task, slate, rng) -> response text; rng may be None where unused.


def cue_selector(task: Task, slate: Slate) -> str:
    """Rule-based selector that uses the cue: the candidate whose description carries the task's ``mark <variant>``,
    ties broken by keyword overlap with the task text."""
    w = task.text.split()
    cue = w[w.index("mark") + 1] if "mark" in w else None
    task_words = set(w)

    def key(c):
        d = c.description.split()
        has_cue = any(d[i] == "mark" and d[i + 1] == cue for i in range(len(d) - 1))
        return (has_cue, len(task_words & set(d)))

    return max(slate.candidates, key=key).name


_STOP = {":", ",", "the", "task", "mark", "steps", "start", "word", "moves", "items"}


def _without_cue(words: Sequence[str]) -> set[str]:
    out, skip = set(), False
    for t in words:
        if skip:
            skip = False
            continue
        if t == "mark":
            skip = True
            continue
        out.add(t)
    return out - _STOP


def name_match_selector(task: Task, slate: Slate) -> str:
    """Best keyword match of the task text against name parts + description, the cue removed on both sides.

    Oracle and misleading candidates tie; the first in slate order wins (the order is
    shuffled by seed), so this selector picks a misleading one about 5 times in 6.
    """
    task_words = _without_cue(task.text.split())
    variants = set(VARIANTS)

    def score(c):
        mine = _without_cue(c.description.split()) | (set(c.name.split("-")) - variants)
        return len(task_words & mine)

    return max(slate.candidates, key=score).name


def oracle_policy(env: SkillSlateEnv, task: Task, slate: Slate, rng=None) -> str:
    return env.demonstration(task, slate, [slate.oracle])


def no_read_policy(env: SkillSlateEnv, task: Task, slate: Slate, rng=None) -> str:
    return env.demonstration(task, slate, [])


def random_read_policy(env: SkillSlateEnv, task: Task, slate: Slate, rng: np.random.Generator) -> str:
    return env.demonstration(task, slate, [slate.names[rng.integers(len(slate.names))]])


def misleading_read_policy(env: SkillSlateEnv, task: Task, slate: Slate, rng: np.random.Generator | None = None) -> str:
    """Reads one misleading candidate (the first in slate order, or a random one given ``rng``)."""
    pool = slate.of("misleading")
    if not pool:
        raise SlateError(f"task {task.task_id}: the slate has no misleading candidate")
    return env.demonstration(task, slate, [pool[0] if rng is None else pool[rng.integers(len(pool))]])


def selector_policy(selector: Callable[[Task, Slate], str]):
    """A policy that reads what ``selector(task, slate)`` picks, then executes perfectly."""

    def policy(env: SkillSlateEnv, task: Task, slate: Slate, rng=None) -> str:
        return env.demonstration(task, slate, [selector(task, slate)])

    policy.__name__ = f"{selector.__name__}_policy"
    return policy


POLICIES: dict[str, Callable[..., str]] = {
    "oracle": oracle_policy,
    "random-read": random_read_policy,
    "no-read": no_read_policy,
    "misleading-read": misleading_read_policy,
    "cue": selector_policy(cue_selector),
    "name-match": selector_policy(name_match_selector),
}
