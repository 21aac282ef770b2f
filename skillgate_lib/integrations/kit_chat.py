"""The kit's episode as a chat: a template and response template that render reads in the kit's own syntax.

Used by TRL (:func:`skillgate_lib.integrations.trl.use_kit_chat_format`) and verl
(``actor_rollout_ref.model.custom_chat_template``, :func:`skillgate_lib.integrations.verl_runner.chat_template_override`);
imports neither engine.
"""

from __future__ import annotations

from typing import Any

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




def add_read_tokens(tokenizer: Any, model: Any = None) -> list[int]:
    """``<read>`` and ``</read>`` as one token each of ``tokenizer`` (in place), and ``model``'s embeddings resized to match.

    What a pretrained tokenizer needs for the kit's syntax to stop generation after a read
    (:func:`skillgate_lib.integrations.verl_tool.close_tag_stop_ids`); the tags are added as ordinary
    (not special) tokens, so decoded text keeps them and the read formats find them. The new rows are
    the model's own initialisation (transformers' ``resize_token_embeddings``: the mean of the old
    rows): train before relying on them. Returns the two token ids; tags already one token are kept.
    """
    tokenizer.add_tokens([t for t in (READ_OPEN, READ_CLOSE)
                          if len(tokenizer.encode(t, add_special_tokens=False)) != 1])
    if model is not None and model.get_input_embeddings().num_embeddings < len(tokenizer):
        model.resize_token_embeddings(len(tokenizer))
    return [tokenizer.convert_tokens_to_ids(t) for t in (READ_OPEN, READ_CLOSE)]
