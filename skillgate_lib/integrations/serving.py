"""What a read tool answers, in any engine: the text the kit's environment inserts after a read.

TRL's ``read`` tool (:class:`skillgate_lib.integrations.trl.SkillReads`) and verl's
(:class:`skillgate_lib.integrations.verl_tool.SkillReadTool`) both answer with
:func:`serve_read`, so an engine's tool inserts exactly what the kit's own rollout inserts
(the body, or an error for an off-slate name, an empty read or a read past ``max_reads``).
"""

from __future__ import annotations

from typing import Any, Sequence

from skillgate_lib.env.chat import ChatEnv
from skillgate_lib.env.episode import READ_CLOSE, READ_OPEN


def serve_read(env: Any, task: Any, slate: Any, calls: Sequence[str]) -> str:
    """The environment's reply to the last of ``calls`` (an episode's read words so far, in order), stripped.

    ``env`` is a :class:`skillgate_lib.env.SkillSlateEnv`, or its chat rendering
    (:class:`~skillgate_lib.env.chat.ChatEnv`: the tool turn's content, whose markers the engine's chat template
    writes, as the kit's own insertion has them); the words should already be resolved
    to the environment's spelling (:meth:`SkillIndex.canonical_words
    <skillgate_lib.integrations.skill_keys.SkillIndex.canonical_words>`). ``""`` when the words
    hold a read tag themselves (no reply; the verifier refuses such an episode).
    """
    if isinstance(env, ChatEnv):  # the tool turn's content
        words = calls[-1].split() if calls else []
        if READ_OPEN in words or READ_CLOSE in words:
            return ""
        return env.body(task, slate, words, len(calls))
    so_far = " ".join(f"{READ_OPEN} {c} {READ_CLOSE}" for c in calls)
    reply = env.tool_response(task, slate, so_far)
    return "" if reply is None else reply.strip()
