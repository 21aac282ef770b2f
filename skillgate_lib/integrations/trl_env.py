"""The kit's environment for TRL: a dataset, its reward function, the ``read`` tool, and the audit's task table.

:func:`env_dataset` gives kit tasks as a TRL dataset (the slate in ``skill_names`` /
``skill_categories``) and an :class:`EnvReward`; ``EnvReward.environment`` is TRL's
``environment_factory``: one :class:`SkillReads` per rollout, whose one tool ``read(skill)``
returns exactly the text the kit's environment inserts after a read. Re-exported by
:mod:`skillgate_lib.integrations.trl`; needs ``datasets`` only for :func:`env_dataset`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from skillgate_lib.env.chat import ChatEnv
from skillgate_lib.env.episode import READ_CLOSE, READ_OPEN
from skillgate_lib.env.names import display_name
from skillgate_lib.integrations.deps import import_engine
from skillgate_lib.integrations.kit_chat import READ_TOOL
from skillgate_lib.env.read_formats import call_arguments
from skillgate_lib.integrations.serving import serve_read
from skillgate_lib.integrations.skill_keys import SkillIndex

NAMES_COLUMN = "skill_names"
CATEGORIES_COLUMN = "skill_categories"


def transcript(completion: str | Sequence[Mapping[str, Any]], index: SkillIndex | None = None) -> str:
    """A completion as the kit's response text: a string as it is, or a TRL message list joined turn by turn.

    Assistant turns give their content then their ``read`` calls as ``<read> skill </read>``
    (with ``index``, the skill as the environment writes it: ``Ledger_Negate ruby`` becomes
    ``ledger negate ruby``, the name :class:`SkillReads` served); tool turns give the text the
    environment inserted (or TRL's error, for a call that failed). A call's arguments may be an
    object or OpenAI's JSON-encoded string; a read call whose arguments are neither, or a call of
    another tool, is written as its JSON. With :data:`~skillgate_lib.integrations.kit_chat.CHAT_TEMPLATE`
    and the kit's lower-case names this is the decoded completion, word for word, whatever template rendered the calls.
    """
    if isinstance(completion, str):
        return completion
    parts = []
    for m in completion:
        if m["role"] == "tool":
            parts.append(str(m["content"]))
            continue
        if m.get("content"):
            parts.append(str(m["content"]))
        for call in m.get("tool_calls") or []:
            fn = call["function"]
            args = call_arguments(fn.get("arguments"))
            if fn.get("name") != READ_TOOL or args is None:
                parts.append(json.dumps(fn, default=str))
                continue
            written = str(args.get("skill", ""))
            parts.append(f"{READ_OPEN} {written if index is None else index.canonical_words(written)} {READ_CLOSE}")
    return " ".join(parts)


class SkillReads:
    """One rollout's view of the kit's environment, as TRL's ``environment_factory`` wants it.

    TRL calls :meth:`reset` with the dataset row before the rollout and exposes every public
    method but ``reset`` as a tool: here only :meth:`read`. A call's skill is resolved through
    ``index`` (case and separators ignored), so ``read("Ledger-Negate_Ruby")`` is served the body
    of ``ledger-negate-ruby``.
    """

    def __init__(self, env: Any, episodes: Mapping[str, tuple[Any, Any]], index: SkillIndex):
        self.env, self.episodes, self.index = env, episodes, index
        self.task = self.slate = None
        self.calls: list[str] = []

    def reset(self, task_id: str, **_: Any) -> None:
        self.task, self.slate = self.episodes[task_id]
        self.calls = []

    def read(self, skill: str) -> str:
        """Read a skill's instructions (its SKILL.md body).

        Args:
            skill: The skill's name as listed under "skills :", e.g. "ledger negate ruby".

        Returns:
            The skill body between <body> and </body>, or an error between <error> and </error>.
        """
        self.calls.append(self.index.canonical_words(skill_argument(skill)))
        return serve_read(self.env, self.task, self.slate, self.calls)


def skill_argument(value: Any, argument: str = "skill") -> str:
    """The skill a read call names, from the argument's value or from the call's whole arguments.

    ``value`` is the skill's name, or the call's arguments as a mapping or as OpenAI's JSON-encoded
    string (``'{"skill": "pdf-tools"}'``, ``{"skill": "pdf-tools"}``), as a tool loop that hands over
    the arguments undecoded passes them.
    """
    if isinstance(value, str) and not value.lstrip().startswith("{"):
        return value
    args = call_arguments(value)
    if args is not None and argument in args:
        return str(args[argument])
    return str(value)


class EnvReward:
    """TRL reward function: the kit environment's verifier on each finished episode.

    TRL calls it as ``reward(prompts=..., completions=..., completion_ids=..., **columns)``;
    the ``task_id`` column finds the task and slate the prompt was made from, and
    :func:`transcript` gives the episode's text (reads and inserted bodies included).
    :meth:`environment` is the matching ``environment_factory``.
    """

    __name__ = "env_reward"  # TRL names the reward column after the function

    def __init__(self, env: Any, episodes: Mapping[str, tuple[Any, Any]]):
        self.env, self.episodes = env, dict(episodes)
        self.index = SkillIndex.of_library(env.library)

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], task_id: Sequence[str],
                 completion_ids: Sequence[Sequence[int]] | None = None, **_: Any) -> list[float]:
        chat = isinstance(self.env, ChatEnv)  # the chat rendering judges the text as the kit's rollout decodes it
        if chat and completion_ids is None:
            raise ValueError("EnvReward on the chat rendering needs the completions' token ids (TRL passes "
                             "completion_ids); it judges them decoded as the kit's rollout decodes its own")
        out = []
        for k, (completion, tid) in enumerate(zip(completions, task_id)):
            task, slate = self.episodes[tid]
            text = (self.env.tokenizer.decode(list(completion_ids[k]), skip_special_tokens=True) if chat
                    else transcript(completion, self.index))
            out.append(float(self.env.score(task, slate, text).reward))
        return out

    def environment(self) -> SkillReads:
        """A fresh per-rollout environment over the same tasks (pass ``environment_factory=reward.environment``)."""
        return SkillReads(self.env, self.episodes, self.index)


def env_dataset(env: Any, n_tasks: int, seed: int = 0, tools: bool = False):
    """Kit tasks as a TRL dataset (``datasets.Dataset``) plus the reward function that scores them.

    ``env`` is a :class:`skillgate_lib.env.SkillSlateEnv`, or its chat rendering
    (:class:`~skillgate_lib.env.chat.ChatEnv`: with ``tools=True`` the prompt is its system and user
    messages, for the model's own chat template and :func:`~skillgate_lib.integrations.trl.use_chat_tool_calls`;
    the reward judges the decoded completion ids, so a TRL episode and a kit episode of the same tokens get
    the same verdict). Columns: ``prompt``, ``task_id``,
    ``domain``, ``horizon``, ``oracle`` and the slate as ``skill_names`` / ``skill_categories``
    (stored names; empty for a skill-free environment, which serves no read). ``tools=False``: the prompt is text and the completion single-turn (the
    policy never sees a body); ``tools=True``: the prompt is one user message, for TRL's tool
    loop with ``environment_factory=reward.environment`` and :func:`~skillgate_lib.integrations.trl.use_kit_chat_format`.
    Each task's slate is drawn from ``(task, seed)``, so a task drawn twice is the same row.
    """
    datasets = import_engine("datasets", "skillgate_lib.integrations.trl.env_dataset")
    rows, episodes = [], {}
    for task in env.sample_tasks(n_tasks, split="train", seed=seed):
        slate = env.slate(task, seed=seed)
        tid = str(task.task_id)
        episodes[tid] = (task, slate)
        if tools and isinstance(env, ChatEnv):  # its system and user turns, for the model's chat template
            prompt = env.messages(task, slate)
        else:
            prompt = [{"role": "user", "content": env.prompt(task, slate)}] if tools else env.prompt(task, slate)
        shown = slate.candidates if env.show_slate else ()  # skill-free: no read is served, none is on a slate
        rows.append({
            "prompt": prompt,
            "task_id": tid,
            "domain": str(getattr(task, "domain", "")),
            "horizon": int(getattr(task, "horizon", -1)),
            "oracle": slate.oracle,
            NAMES_COLUMN: [c.name for c in shown],
            CATEGORIES_COLUMN: [c.category for c in shown],
        })
    return datasets.Dataset.from_list(rows), EnvReward(env, episodes)


def write_task_table(dataset: Iterable[Mapping[str, Any]], path: str | Path) -> Path:
    """The dataset's slates as the audit's ``--tasks`` JSONL: one object per task.

    Skills are keyed by the words a read writes (``ledger negate ruby``), which is what the
    audit's text readers find in a completion. A row without slate columns has an empty slate.
    """
    path = Path(path)
    seen: dict[str, dict] = {}
    for row in dataset:
        if row["task_id"] not in seen:
            seen[row["task_id"]] = {
                "task_id": row["task_id"], "domain": row.get("domain", ""), "horizon": row.get("horizon", -1),
                "skills": {display_name(n): c for n, c in zip(row.get(NAMES_COLUMN) or [], row.get(CATEGORIES_COLUMN) or [])},
            }
    path.write_text("".join(json.dumps(r) + "\n" for r in seen.values()))
    return path
