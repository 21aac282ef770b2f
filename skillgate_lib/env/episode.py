"""Tasks, prompts, the read protocol and the verifier of the skill-slate environment.

Example episode (ledger, H = 3; the policy reads the oracle; slate shortened)::

    skills :
    cipher shift coral : shift letters
    ledger credit amber : credit total
    ledger credit teal : credit total
    ledger debit ruby : debit total
    ...                                          (16 lines)
    task : ledger credit , mark amber , start 4 , steps 3
    respond :
    <read> ledger credit amber </read> <body> 0>3 1>9 2>0 3>5 4>8 5>1 6>2 7>6 8>4 9>7 </body>
    step 1 : 4 8
    step 2 : 8 4
    step 3 : 4 8
    <answer> 8 </answer>

The prompt ends at ``respond :``. After ``</read>`` the environment inserts
`` <body> ... </body>`` (no loss on it); everything else is the policy's. A skill
is named by its name's words (``ledger credit amber`` for ``ledger-credit-amber``),
so the cue ``mark amber`` can be *copied* into the read call.

Protocol
--------
* The policy may write ``<read> WORDS </read>`` several times; the environment
  appends the body of the skill ``skill_name(WORDS)`` (:mod:`.names`: the words
  joined by ``-``) when it is on the slate, or
  `` <error> ... </error>`` for an off-slate name, an empty read, or a read past
  ``max_reads`` (which also ends the read phase).
* Then H step lines and ``<answer> SYMBOL </answer>``. Execution follows the *last*
  body read (demonstrations do so, and the verifier only accepts the oracle's chain).
* Success = a well-formed response, no off-slate read, every step line and the
  answer right, and no injected per-step failure (probability ``step_failure``
  each, drawn from ``rng``).

Character and token bookkeeping: :class:`Read` records the character span of each
skill name; :func:`skillgate_lib.env.tokenizer.token_spans` maps it to token ranges.
Every structural piece is separated by whitespace, so tokenizing pieces one by
one (as a rollout inserting tool text does) gives the same tokens as tokenizing
the whole response with the word-level tokenizer.

One module on purpose: the prompt, the read protocol, the inserted
text and the verifier are one contract, which the rollout, the TRL tool and the
verifier must apply identically.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from skillgate_lib.env.domains import (
    DOMAINS,
    VARIANTS,
    Table,
    family_tables,
    lookalike_tables,
    parse_table,
    render_table,
    run_chain,
)
from skillgate_lib.env.library import SPLITS, in_split
from skillgate_lib.env.names import display_name, skill_name
from skillgate_lib.env.skills import Skill, Slate, load_library, make_slate

READ_OPEN, READ_CLOSE = "<read>", "</read>"
BODY_OPEN, BODY_CLOSE = "<body>", "</body>"
ERROR_OPEN, ERROR_CLOSE = "<error>", "</error>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
ERR_UNKNOWN, ERR_LIMIT, ERR_BAD = "unknown skill", "read limit", "bad read"
PROMPT_END = "respond :"
SLATE_HEADER = "skills :"
#: Largest horizon a task may have (the tokenizer knows step numbers up to here).
MAX_HORIZON = 16
NOTE_OPEN = ";"
#: The words of a step line's free note (``step_note``): 32 words that appear nowhere else in
#: the environment, so a note says nothing about the task, and a demonstration draws each
#: uniformly (log 32 nats of entropy a word). The embedded tokenizer learns them with the
#: models trained for notes (:func:`skillgate_lib.env.tokenizer.extend_tokenizer`).
NOTE_WORDS = tuple(
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
    "quebec romeo sierra tango uniform victor whiskey xray yankee zulu oak pine elm ash fir yew".split())
_NOTE_SET = frozenset(NOTE_WORDS)
_TRAILING_OK = {"</s>", "<pad>"}


class EpisodeError(ValueError):
    """An episode is inconsistent (its oracle is not on the slate, an unknown domain or split)."""


@dataclass(frozen=True)
class Task:
    """One task instance. ``task_id`` is its content, so equal ids mean equal instances."""

    task_id: str
    domain: str
    horizon: int
    oracle: str  # the oracle skill's name
    family: str
    variant: str
    start: str  # the start symbol of the chain
    text: str  # the task statement shown in the prompt
    gold_steps: tuple[str, ...]  # the H correct step lines
    gold_answer: str  # the correct answer symbol


@dataclass(frozen=True)
class Read:
    """One read action: the name written (hyphen-joined words), its slate category and char span."""

    name: str
    category: str  # oracle | misleading | relevant | irrelevant | invalid
    char_start: int
    char_end: int
    served: bool = True  # False when the environment answered with an error instead of the body


@dataclass(frozen=True)
class Outcome:
    """The verifier's verdict on one response.

    ``steps_correct``: leading step lines equal to the gold lines. ``steps_ok``: step lines
    (of the first H) that are a right lookup in the oracle's table *given the line's own
    input*, whose input continues the chain (the start, then the previous line's output):
    per-step accuracy that does not punish every later step for one early slip.
    """

    reward: float
    success: bool
    reads: tuple[Read, ...]
    answer: str | None
    malformed: bool
    tool_spans: tuple[tuple[int, int], ...]  # char spans of environment-inserted text in the response
    steps_correct: int = 0
    steps_ok: int = 0

    @property
    def last_served(self) -> Read | None:
        """The last read whose body was inserted (what execution follows), if any."""
        served = [r for r in self.reads if r.served]
        return served[-1] if served else None


def _words(text: str) -> list[tuple[str, int, int]]:
    return [(m.group(), m.start(), m.end()) for m in re.finditer(r"\S+", text)]


def rng_for(*parts: object) -> np.random.Generator:
    """A generator seeded by the content of ``parts`` (stable across runs and platforms)."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def _split_steps(toks: Sequence[str]) -> list[list[str]]:
    lines: list[list[str]] = []
    for t in toks:
        if t == "step" or not lines:
            lines.append([])
        lines[-1].append(t)
    return lines


def _check_horizons(horizons: Iterable[int]) -> tuple[int, ...]:
    horizons = tuple(int(h) for h in horizons)
    if not horizons or min(horizons) < 1 or max(horizons) > MAX_HORIZON:
        raise EpisodeError(f"horizons must lie in 1..{MAX_HORIZON}, got {horizons!r}")
    return horizons


def _with_lookalike_tables(library: Mapping[str, Skill], agreement: float, table_seed: int = 0) -> dict[str, Skill]:
    """``library`` with every embedded-domain skill's body rebuilt from :func:`lookalike_tables`."""
    tables: dict[tuple[str, str], dict[str, Table]] = {}
    out = {}
    for name, s in library.items():
        if s.domain in DOMAINS and s.family in DOMAINS[s.domain].families and s.variant in VARIANTS:
            key = (s.domain, s.family)
            if key not in tables:
                tables[key] = lookalike_tables(s.domain, s.family, agreement, table_seed)
            s = dataclasses.replace(s, body=render_table(tables[key][s.variant]))
        out[name] = s
    return out


class SkillSlateEnv:
    """Tasks, slates, prompts, tool responses and the verifier over a skill library.

    ``library``: name -> Skill (default: the committed ``data/skills``).
    ``slate_sizes``: (oracle, misleading, relevant, irrelevant) counts per slate.
    ``max_reads``: reads served; the next read gets an error text and ends the read phase.
    ``max_response_chars``: longer responses score 0 (malformed); default 2,000 characters x (1 + ``step_echo``).
    ``step_failure``: injected probability that each step fails regardless of the text.
    ``domains``: default task domains (a subset of :data:`DOMAINS`; e.g. four for a held-out-domain run).
    ``show_slate``: False gives the skill-free variant: no slate in the prompt, every read an error.
    ``lookalike_agreement``: expected fraction of keys on which two variants of a family agree
    (:func:`~skillgate_lib.env.domains.lookalike_tables`); 0 = look-alikes disagree on every key.
    Above 0 the bodies of the embedded domains' skills are rebuilt from their family's tables,
    so a misleading read succeeds while its chain stays on shared keys.
    ``horizons``: the horizons tasks are drawn from by default (uniformly).
    ``table_seed``: above 0, every embedded-domain body is rebuilt from another seeded set of
    tables of the same kind (same skills, names and task chains; other values), for training a
    base that looks values up in the body instead of recalling the library's tables.
    ``step_echo``: each step line restates the task this many times after its lookup
    (``step 1 : 4 8 , ledger credit , start 4 , steps 3``; 9 policy tokens per echo, checked by
    the verifier like the rest of the line). It lengthens execution per step the way an agent's
    restated context and tool-call syntax do, so the read's name becomes a smaller share of the
    trajectory's loss weight (Share) without changing what must be chosen. The echo leaves out
    the cue (``mark amber``): copying it is the selector's skill, and a warm start that reads
    look-alikes unlearns it.
    ``step_note``: each step line ends with a free note, ``; w1 .. wF`` (F = ``step_note`` words of
    :data:`NOTE_WORDS`), which the verifier requires in form but ignores in content: any words of
    the note vocabulary give the same verdict. Demonstrations draw the words uniformly, so a warm
    start stays uncertain about them (mean ``1 - p`` near 31/32): policy tokens that carry
    gradient under outcome-only GRPO without deciding anything, as an agent's free text does,
    where the echo adds tokens the policy is sure of.
    """

    def __init__(
        self,
        library: Mapping[str, Skill] | None = None,
        slate_sizes: tuple[int, int, int, int] = (1, 5, 5, 5),
        max_reads: int = 4,
        max_response_chars: int | None = None,
        step_failure: float = 0.0,
        domains: Sequence[str] | None = None,
        show_slate: bool = True,
        lookalike_agreement: float = 0.0,
        horizons: Iterable[int] = range(1, 9),
        table_seed: int = 0,
        step_echo: int = 0,
        step_note: int = 0,
    ):
        if not 0.0 <= step_failure <= 1.0:
            raise ValueError(f"step_failure must lie in [0, 1], got {step_failure}")
        if max_reads < 1:
            raise ValueError(f"max_reads must be >= 1, got {max_reads}")
        self.library = dict(load_library() if library is None else library)
        self.lookalike_agreement = lookalike_agreement
        if table_seed < 0:
            raise ValueError(f"table_seed must be >= 0, got {table_seed}")
        self.table_seed = table_seed
        if step_echo < 0:
            raise ValueError(f"step_echo must be >= 0, got {step_echo}")
        self.step_echo = int(step_echo)
        if step_note < 0:
            raise ValueError(f"step_note must be >= 0, got {step_note}")
        self.step_note = int(step_note)
        if lookalike_agreement != 0.0 or table_seed:
            self.library = _with_lookalike_tables(self.library, lookalike_agreement, table_seed)
        self.horizons = _check_horizons(horizons)
        self.slate_sizes = tuple(slate_sizes)
        self.max_reads = max_reads
        self.max_response_chars = 2000 * (1 + self.step_echo + self.step_note) if max_response_chars is None else max_response_chars
        self.step_failure = step_failure
        self.show_slate = show_slate
        # The table of every embedded-domain skill, parsed from its body, and the task index.
        self.tables: dict[str, Table] = {}
        self.index: dict[tuple[str, str, str], str] = {}
        for s in self.library.values():
            if s.domain not in DOMAINS:
                continue  # foreign skills can still appear as irrelevant candidates
            try:
                self.tables[s.name] = parse_table(s.body, s.domain)
            except ValueError as err:
                raise ValueError(f"{s.path}: body: {err}") from None
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

    def make_task(self, domain: str, family: str, variant: str, start: str, horizon: int) -> Task:
        """The task instance for explicit content (gold lines computed from the oracle's table)."""
        oracle = self.index.get((domain, family, variant))
        if oracle is None:
            raise EpisodeError(f"no skill for domain {domain!r}, family {family!r}, variant {variant!r} in the library")
        if start not in DOMAINS[domain].symbols:
            raise EpisodeError(f"start {start!r} is not a {domain} symbol ({' '.join(DOMAINS[domain].symbols)})")
        if not 1 <= horizon <= MAX_HORIZON:
            raise EpisodeError(f"horizon must lie in 1..{MAX_HORIZON}, got {horizon}")
        steps, answer = run_chain(self.tables[oracle], start, horizon)
        task = Task(
            task_id=f"{oracle}-s{start}-h{horizon}", domain=domain, horizon=horizon, oracle=oracle, family=family,
            variant=variant, start=start,
            text=f"task : {domain} {family} , mark {variant} , start {start} , steps {horizon}",
            gold_steps=steps, gold_answer=answer,
        )
        return dataclasses.replace(task, gold_steps=self._with_echo(steps, task)) if self.step_echo else task

    def _echo(self, task: Task) -> str:
        """What a step line appends after its lookup: the task, less its cue, restated ``step_echo`` times."""
        return f" , {task.domain} {task.family} , start {task.start} , steps {task.horizon}" * self.step_echo

    def _with_echo(self, lines: Sequence[str], task: Task) -> tuple[str, ...]:
        echo = self._echo(task)
        return tuple(line + echo for line in lines)

    def sample_tasks(
        self, n: int, split: str, seed: int, horizons: Iterable[int] | None = None, domains: Sequence[str] | None = None
    ) -> list[Task]:
        """``n`` instances of ``split`` (one of ``train``, ``eval``, ``val``, ``test``), deterministic in ``seed``.

        Domain, family, variant, start and horizon (from ``horizons``, default the
        environment's) are uniform. The split is decided by the (skill, start) pair
        (:func:`~skillgate_lib.env.library.in_split`), so a held-out chain is never a prefix
        of a training chain, and ``val`` and ``test`` (the two parts of ``eval``) share no
        chain either. Instances may repeat; :meth:`distinct_tasks` draws without replacement.
        """
        self._check_split(split)
        horizons = self.horizons if horizons is None else _check_horizons(horizons)
        domains = self._check_domains(domains if domains is not None else self.domains)
        keys = {d: sorted(k for k in self.index if k[0] == d) for d in domains}
        rng = np.random.default_rng(seed)
        out: list[Task] = []
        while len(out) < n:
            domain = domains[rng.integers(len(domains))]
            _, family, variant = keys[domain][rng.integers(len(keys[domain]))]
            symbols = DOMAINS[domain].symbols
            start = symbols[rng.integers(len(symbols))]
            h = int(horizons[rng.integers(len(horizons))])
            if in_split(f"{self.index[(domain, family, variant)]}-s{start}", split):
                out.append(self.make_task(domain, family, variant, start, h))
        return out

    def distinct_tasks(
        self, n: int, split: str, seed: int, horizons: Iterable[int] | None = None, domains: Sequence[str] | None = None
    ) -> list[Task]:
        """``n`` *distinct* instances of ``split``, a random subset (deterministic in ``seed``) of all of them.

        Every (skill, start, horizon) of the split is enumerated once, then ``n`` are drawn
        without replacement; asking for more than the split holds is an error naming its size.
        """
        self._check_split(split)
        horizons = self.horizons if horizons is None else _check_horizons(horizons)
        domains = self._check_domains(domains if domains is not None else self.domains)
        pool = [(d, f, v, s, h) for (d, f, v), name in sorted(self.index.items()) if d in domains
                for s in DOMAINS[d].symbols if in_split(f"{name}-s{s}", split) for h in horizons]
        if n > len(pool):
            raise EpisodeError(f"the {split!r} split holds {len(pool)} distinct instances at horizons "
                               f"{list(horizons)}; cannot draw {n} without replacement")
        pick = np.random.default_rng(seed).permutation(len(pool))[:n]
        return [self.make_task(*pool[i]) for i in pick]

    @staticmethod
    def _check_split(split: str) -> None:
        if split not in SPLITS:
            raise EpisodeError(f"split must be one of {', '.join(SPLITS)}; got {split!r}")

    def follow_table(self, task: Task, skill: str | None) -> Table:
        """The table a policy executes after last reading ``skill``: its own, if it is of the
        task's domain; else (nothing to follow) one that no variant of the task's family uses."""
        if skill is not None and skill in self.tables and self.library[skill].domain == task.domain:
            return self.tables[skill]
        return family_tables(task.domain, task.family, self.table_seed)[1]

    # ------------------------------------------------------------------ slates and prompts

    def slate(self, task: Task, seed: int) -> Slate:
        """The task's slate, deterministic in (task, seed)."""
        return make_slate(self.library, task, rng_for(task.task_id, seed), self.slate_sizes)

    def _check(self, task: Task, slate: Slate) -> None:
        if slate.category(task.oracle) != "oracle":
            raise EpisodeError(
                f"task {task.task_id}: field 'oracle' ({task.oracle!r}) is not the oracle of the slate "
                f"(category {slate.category(task.oracle)!r}; slate oracle {slate.oracle!r})"
            )

    def prompt(self, task: Task, slate: Slate) -> str:
        """The slate lines (``name words : description``), the task line, then ``respond :``."""
        self._check(task, slate)
        lines = [f"{display_name(c.name)} : {c.description}" for c in slate.candidates] if self.show_slate else []
        return "\n".join([SLATE_HEADER, *lines, task.text, PROMPT_END] if self.show_slate else [task.text, PROMPT_END])

    # ------------------------------------------------------------------ tool calls

    @staticmethod
    def read_call(name: str) -> tuple[str, tuple[int, int]]:
        """The read call of skill ``name`` as the policy writes it, and the character span of the name's words in it."""
        words = display_name(name)
        start = len(READ_OPEN) + 1
        return f"{READ_OPEN} {words} {READ_CLOSE}", (start, start + len(words))

    def _insertion(self, slate: Slate, inner: Sequence[str], k: int) -> str:
        """The environment's text after the k-th (1-based) read whose words are ``inner``."""
        if k > self.max_reads:
            return f"{ERROR_OPEN} {ERR_LIMIT} {ERROR_CLOSE}"
        if not inner:
            return f"{ERROR_OPEN} {ERR_BAD} {ERROR_CLOSE}"
        name = skill_name(inner)
        if not self.show_slate or slate.category(name) is None:
            return f"{ERROR_OPEN} {ERR_UNKNOWN} {ERROR_CLOSE}"
        return f"{BODY_OPEN} {' '.join(self.library[name].body.split())} {BODY_CLOSE}"

    def tool_response(self, task: Task, slate: Slate, response_so_far: str) -> str | None:
        """Text to append after a read action that ``response_so_far`` ends with (leading space included).

        The body for a name on the slate; an error text for an off-slate name, an empty read,
        or a read past ``max_reads``. ``None`` when the response does not end with
        ``<read> ... </read>``.
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

        Grammar: ``(<read> WORDS </read> INSERTION)* STEP_LINES <answer> SYMBOL </answer>``,
        where each INSERTION must be exactly what :meth:`tool_response` returns. Success
        needs a well-formed response, no off-slate read, the gold step lines and answer,
        and that none of the H injected per-step failures fire (``rng``; when ``None``, a
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
            name = skill_name(inner)
            category = slate.category(name) if self.show_slate else None
            k = len(reads) + 1
            reads.append(Read(name, category or "invalid", words[i + 1][1], words[j - 1][2],
                              served=category is not None and k <= self.max_reads))
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
                exec_toks = toks[i:]
            else:
                exec_toks = toks[i:a]
                answer = " ".join(toks[a + 1 : b])
                malformed = not set(toks[b + 1 :]) <= _TRAILING_OK or READ_OPEN in exec_toks
        split_lines = [self._without_note(line) for line in _split_steps(exec_toks)]
        lines = [" ".join(line) for line in split_lines]
        steps_correct = 0
        for got_line, gold in zip(lines, task.gold_steps):
            if got_line != gold:
                break
            steps_correct += 1
        steps_ok = self._steps_ok(task, split_lines)
        correct = (not malformed and lines == list(task.gold_steps) and answer == task.gold_answer
                   and all(r.category != "invalid" for r in reads))
        if rng is None:
            rng = rng_for(task.task_id, response)
        survived = bool(np.all(rng.random(task.horizon) >= self.step_failure)) if self.step_failure > 0 else True
        success = correct and survived
        return Outcome(float(success), success, tuple(reads), answer, malformed, tuple(spans), steps_correct, steps_ok)

    def _without_note(self, line: list[str]) -> list[str]:
        """A step line's tokens less its note; a line whose note is missing or malformed gets a
        ``<bad-note>`` token instead, so it matches no gold line (the note's words are never compared)."""
        if not self.step_note:
            return line
        f = self.step_note
        if len(line) > f + 1 and line[-f - 1] == NOTE_OPEN and all(w in _NOTE_SET for w in line[-f:]):
            return line[: -f - 1]
        return [*line, "<bad-note>"]

    def _note(self, rng: np.random.Generator) -> str:
        """A demonstration's note: ``step_note`` words drawn uniformly from :data:`NOTE_WORDS`."""
        return f" {NOTE_OPEN} " + " ".join(NOTE_WORDS[i] for i in rng.integers(len(NOTE_WORDS), size=self.step_note))

    def _steps_ok(self, task: Task, lines: list[list[str]]) -> int:
        table = self.tables[task.oracle]
        echo = self._echo(task).split()
        state, ok = task.start, 0
        for k, line in enumerate(lines[: task.horizon], start=1):
            if (len(line) == 5 + len(echo) and line[:3] == ["step", str(k), ":"] and line[3] == state
                    and table.get(state) == line[4] and line[5:] == echo):
                ok += 1
            state = line[4] if self.step_echo and len(line) >= 5 else line[-1]
        return ok

    # ------------------------------------------------------------------ demonstrations

    def demonstration(self, task: Task, slate: Slate, reads: Sequence[str],
                      rng: np.random.Generator | None = None) -> str:
        """A correct-format response: ``reads`` (each followed by the inserted text), then the
        H step lines that follow the last served read's table, then the answer.

        Only a last read of the oracle gives the gold lines; a misleading one fails at step 1.
        ``rng`` draws the notes' words (``step_note``); ``None`` seeds one from the task and reads.
        """
        self._check(task, slate)
        parts, served = [], []
        for k, name in enumerate(reads, start=1):
            parts.append(f"{READ_OPEN} {display_name(name)} {READ_CLOSE} " + self._insertion(slate, display_name(name).split(), k))
            if k <= self.max_reads and self.show_slate and slate.category(name) is not None:
                served.append(name)
            if k > self.max_reads:
                break
        steps, answer = run_chain(self.follow_table(task, served[-1] if served else None), task.start, task.horizon)
        lines = list(self._with_echo(steps, task))
        if self.step_note:
            rng = rng if rng is not None else rng_for(task.task_id, "note", *reads)
            lines = [line + self._note(rng) for line in lines]
        return "\n".join([*parts, *lines, f"{ANSWER_OPEN} {answer} {ANSWER_CLOSE}"])

    # ------------------------------------------------------------------ vocabulary

    def vocabulary(self) -> list[str]:
        """Every word prompts, insertions and responses of this environment can contain (sorted)."""
        words: set[str] = set()
        for s in self.library.values():
            words |= {*s.name.split("-"), *s.description.split(), *s.body.split()}
        for d in DOMAINS.values():
            words |= {d.name, d.obj, *d.families, *d.symbols, *d.entries}
        words |= {str(i) for i in range(MAX_HORIZON + 1)} | set(VARIANTS)
        words |= {READ_OPEN, READ_CLOSE, BODY_OPEN, BODY_CLOSE, ERROR_OPEN, ERROR_CLOSE, ANSWER_OPEN, ANSWER_CLOSE}
        words |= set(f"{ERR_UNKNOWN} {ERR_LIMIT} {ERR_BAD} {PROMPT_END} {SLATE_HEADER}".split())
        words |= set("task : , mark start steps step".split())
        if self.step_note:
            words |= {NOTE_OPEN, *NOTE_WORDS}
        return sorted(words)
