"""The kit's episode as a chat: a template and response template that render reads in the kit's own syntax.

Used by TRL (:func:`skillgate_lib.integrations.trl.use_kit_chat_format`) and verl
(``actor_rollout_ref.model.custom_chat_template``, :func:`skillgate_lib.integrations.verl_runner.chat_template_override`);
imports neither engine.
"""

from __future__ import annotations

from skillgate_lib.env.episode import READ_CLOSE, READ_OPEN

READ_TOOL = "read"
"""The tool's name (:meth:`SkillReads.read`); the chat template writes its calls as ``<read> skill </read>``."""
CHAT_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' -%}"
    "{%- if m.content %} {{ m.content }}{% endif -%}"
    "{%- for call in m.tool_calls or [] -%}"
    "{%- if call.function.name == '" + READ_TOOL + "' %} " + READ_OPEN + " {{ call.function.arguments.skill }} " + READ_CLOSE +
    "{%- else %} <call> {{ call.function | tojson }} </call>{% endif -%}"
    "{%- endfor -%}"
    "{%- elif m.role == 'tool' %} {{ m.content }}"
    "{%- else %}{% if not loop.first %} {% endif %}{{ m.content }}"
    "{%- endif -%}"
    "{%- endfor -%}"
)
"""The kit's episode as a chat: the prompt verbatim, reads in the kit's syntax, tool results as inserted.

No turn markers and an empty generation prompt, so a rendered conversation is the kit's
token stream. Calls of other tools render as JSON (TRL checks that a template shows any call).
"""

RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor_pattern": r"\Z",  # a turn is parsed from where generation began
    "fields": {
        "tool_calls": {"open": READ_OPEN, "close": READ_CLOSE, "repeats": True, "content": "text",
                       "transform": {"type": "function", "function": {"name": READ_TOOL, "arguments": {"skill": "{content}"}}}},
        "content": {"content": "text"},
    },
}
"""transformers ``response_template``: ``<read> WORDS </read>`` is a ``read(skill=WORDS)`` call, the rest is content."""


