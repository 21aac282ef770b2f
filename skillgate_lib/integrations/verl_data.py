"""The kit's environment as verl RL data: the rows of a train / val parquet and the ``compute_score`` to run on them.

verl's RL datasets are parquet rows ``{data_source, prompt (messages), ability,
reward_model {style, ground_truth}, extra_info}``; its reward managers call
``compute_score(data_source, solution_str, ground_truth, extra_info)`` on each decoded
response. :func:`verl_rows` writes a task's content and its slate into ``extra_info``
(``skill_names`` / ``skill_categories``: what the SkillGate reward manager categorises
reads by) and the environment's regime (:mod:`skillgate_lib.env.regimes`), and
:func:`compute_score` rebuilds the task and slate from it and returns the verdict of that
regime's environment, so no state crosses verl's Ray workers. The same episode fields ride
in ``extra_info.tools_kwargs.read.create_kwargs``, which verl's tool agent loop hands the
``read`` tool (:class:`skillgate_lib.integrations.verl_tool.SkillReadTool`). This module does
not import verl; pass its path as ``reward.custom_reward_function.path``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping

from skillgate_lib.env import SkillSlateEnv, Task, regimes
from skillgate_lib.env.skills import Candidate, Slate
from skillgate_lib.integrations.kit_chat import READ_TOOL
from skillgate_lib.integrations.skill_keys import SkillIndex

DATA_SOURCE = "skillgate"
TASK_FIELDS = ("domain", "family", "variant", "start", "horizon")
"""``extra_info`` fields that rebuild a task (:meth:`SkillSlateEnv.make_task`)."""


def verl_rows(regime: str, n_tasks: int, seed: int = 0, split: str = "train") -> list[dict[str, Any]]:
    """``n_tasks`` tasks of ``split`` in the environment of ``regime`` as verl RL rows; each slate drawn from ``(task, seed)``."""
    env = _env(regime)
    SkillIndex.of_library(env.library)  # refuses a library whose names a read could not tell apart
    rows = []
    for k, task in enumerate(env.sample_tasks(n_tasks, split=split, seed=seed)):
        slate = env.slate(task, seed=seed)
        episode = {"regime": regime, **{f: getattr(task, f) for f in TASK_FIELDS},
                   "skill_names": [c.name for c in slate.candidates],
                   "skill_categories": [c.category for c in slate.candidates]}
        rows.append({
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": env.prompt(task, slate)}],
            "ability": "skill-reading",
            "reward_model": {"style": "rule", "ground_truth": task.gold_answer},
            "extra_info": {"index": k, "split": split, "task_id": task.task_id, **episode,
                           "tools_kwargs": {READ_TOOL: {"create_kwargs": episode}}},
        })
    return rows


def episode_of(env: SkillSlateEnv, extra_info: Mapping[str, Any]) -> tuple[Task, Slate]:
    """The task and slate a row's ``extra_info`` describes (errors name the missing field)."""
    missing = [f for f in (*TASK_FIELDS, "skill_names", "skill_categories") if f not in extra_info]
    if missing:
        raise KeyError(f"extra_info: field {missing[0]!r} missing; rows from skillgate_lib.integrations.verl_data.verl_rows "
                       f"carry {', '.join(TASK_FIELDS)}, skill_names and skill_categories")
    task = env.make_task(*(extra_info[f] for f in TASK_FIELDS[:-1]), int(extra_info["horizon"]))
    slate = Slate(tuple(Candidate(name, env.library[name].description, cat)
                        for name, cat in zip(extra_info["skill_names"], extra_info["skill_categories"])))
    return task, slate


@lru_cache(maxsize=None)
def _env(regime: str) -> SkillSlateEnv:
    return regimes.get(regime).env()


def regime_env(extra_info: Mapping[str, Any]) -> SkillSlateEnv:
    """The environment of the row's ``regime`` (``easy`` for rows written before rows carried one), once per process."""
    return _env(str(extra_info.get("regime", "easy")))


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Mapping[str, Any] | None = None,
                  **_: Any) -> float:
    """verl's reward function: the verdict (0 or 1) of the row's regime's environment on the episode ``solution_str``.

    ``solution_str`` is the decoded response, bodies the read tool inserted included (in the
    kit's syntax: see ``examples/verl/skillgate_grpo.sh``).
    """
    env = regime_env(extra_info or {})
    task, slate = episode_of(env, extra_info or {})
    if ground_truth != task.gold_answer:
        raise ValueError(f"extra_info describes task {task.task_id} (answer {task.gold_answer!r}) but ground_truth "
                         f"is {ground_truth!r}; the row's fields disagree")
    return float(env.score(task, slate, solution_str).reward)
