"""Scripted reference policies and selectors (checks of the environment, not learners).

Every policy is ``(env, task, slate, rng) -> response text``; ``rng`` may be ``None``
where unused. Each reads what it reads, then executes the last served body perfectly.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from skillgate_lib.env.domains import VARIANTS
from skillgate_lib.env.episode import SkillSlateEnv, Task
from skillgate_lib.env.skills import Slate, SlateError


def cue_selector(task: Task, slate: Slate) -> str:
    """Rule-based selector that uses the cue: the candidate whose name ends in the task's
    ``mark <variant>`` word, ties broken by keyword overlap with the task text."""
    words = task.text.split()
    cue = words[words.index("mark") + 1] if "mark" in words else None
    task_words = set(words)

    def key(c):
        parts = c.name.split("-")
        return (parts[-1] == cue, len(task_words & (set(parts) | set(c.description.split()))))

    return max(slate.candidates, key=key).name


def _without_cue(words: Sequence[str]) -> set[str]:
    return {w for w in words if w not in VARIANTS} - {":", ",", "task", "mark", "start", "steps"}


def name_match_selector(task: Task, slate: Slate) -> str:
    """Best keyword match of the task text against name words + description, variant words removed.

    Oracle and misleading candidates tie; the first in slate order wins (the order is
    shuffled by seed), so this selector picks a misleading one about 5 times in 6.
    """
    task_words = _without_cue(task.text.split())
    return max(slate.candidates, key=lambda c: len(task_words & _without_cue([*c.name.split("-"), *c.description.split()]))).name


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


def mixed_reads(slate: Slate, rng: np.random.Generator, p_oracle: float = 0.3,
                count_mix: Sequence[float] = (0.35, 0.35, 0.30)) -> list[str]:
    """The reads of an RL warm-start demonstration: a fixed mix that does not favour the oracle.

    ``n`` reads with probability ``count_mix[n-1]``; each is the oracle with probability
    ``p_oracle`` if it has not been read yet, else an unread misleading look-alike.
    """
    probs = np.asarray(count_mix, dtype=float)
    n = int(rng.choice(len(probs), p=probs / probs.sum())) + 1
    unread = list(slate.of("misleading"))
    reads: list[str] = []
    for _ in range(n):
        if slate.oracle not in reads and rng.random() < p_oracle:
            reads.append(slate.oracle)
        elif unread:
            reads.append(unread.pop(int(rng.integers(len(unread)))))
    return reads


POLICIES: dict[str, Callable[..., str]] = {
    "oracle": oracle_policy,
    "random-read": random_read_policy,
    "no-read": no_read_policy,
    "misleading-read": misleading_read_policy,
    "cue": selector_policy(cue_selector),
    "name-match": selector_policy(name_match_selector),
}
