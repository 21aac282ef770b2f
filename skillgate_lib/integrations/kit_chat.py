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


def json_call_response_template(end_of_turn: str) -> dict:
    """transformers ``response_template`` for a chat model that writes reads as the chat rendering does
    (:meth:`skillgate_lib.env.chat.ChatEnv.read_call`: ``<tool_call>{"name": "read", "arguments": {...}}</tool_call>``,
    Qwen's and Hermes' syntax) and ends its turn with ``end_of_turn`` (ChatML's ``<|im_end|>``): each call is a
    tool call, the text around them the content. For a template that TRL does not know (SmolLM2's renders no tools)."""
    import re

    return {
        "defaults": {"role": "assistant"},
        "start_anchor_pattern": r"\Z",  # a turn is parsed from where generation began
        "fields": {
            "tool_calls": {"open": "<tool_call>", "close_pattern": r"</tool_call>\s*", "repeats": True, "content": "json",
                           "transform": {"type": "function", "function": "{content}"}},
            "content": {"close_pattern": re.escape(end_of_turn) + r"\s*", "content": "text"},
        },
    }


#: Jinja put before a chat template that renders no tool calls (SmolLM2's): each assistant message's calls are
#: written into its content as the chat rendering writes a read (:meth:`skillgate_lib.env.chat.ChatEnv.read_call`),
#: then the template renders the messages as before. Other turns, and so every prompt, render unchanged.
TOOL_CALLS_AS_CONTENT = (
    "{%- set _kit = namespace(messages=[]) -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' and m.tool_calls -%}"
    "{%- set _call = namespace(text=m.content or '') -%}"
    "{%- for c in m.tool_calls -%}"
    "{%- set _f = c.function if c.function is defined else c -%}"
    "{%- set _call.text = _call.text + '<tool_call>' + ({'name': _f.name, 'arguments': _f.arguments} | tojson) + '</tool_call>' -%}"
    "{%- endfor -%}"
    "{%- set _kit.messages = _kit.messages + [{'role': m.role, 'content': _call.text}] -%}"
    "{%- else -%}{%- set _kit.messages = _kit.messages + [m] -%}{%- endif -%}"
    "{%- endfor -%}"
    "{%- set messages = _kit.messages -%}"
)


def renders_tool_calls(tokenizer) -> bool:
    """Whether ``tokenizer``'s chat template shows an assistant message's tool calls."""
    probe = [{"role": "user", "content": "u"},
             {"role": "assistant", "content": "", "tool_calls": [
                 {"type": "function", "function": {"name": "kit_probe_tool", "arguments": {"x": 1}}}]}]
    return "kit_probe_tool" in tokenizer.apply_chat_template(probe, tokenize=False)

