"""Tool calls in TRL's tool loop: string-encoded arguments decoded, and which read calls the environment answered.

TRL 1.16 parses each sampled turn into messages (``tool_calls`` with ``function.arguments``) and
runs a call as ``tool(**arguments)``; an exception becomes the tool message ``{'error': ...}``.
Two things the trainer (:class:`~skillgate_lib.integrations.trl.SkillGateGRPOTrainer`) needs from that:

* :func:`decoded_tool_arguments`: OpenAI's string-encoded arguments (``'{"skill": "pdf-tools"}'``)
  decoded into a mapping before TRL calls the tool, so they no longer fail in ``**``;
* :func:`read_call_outcomes` and :func:`failed_reads`: for each read located in the token ids
  (:func:`~skillgate_lib.integrations.find_reads`), whether TRL's call of it failed (answered with an
  error, not by the environment), and how many read calls TRL executed that the read format did not locate.

Imports no engine.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping, Sequence

from skillgate_lib.integrations.kit_chat import READ_TOOL
from skillgate_lib.env.read_formats import call_arguments
from skillgate_lib.integrations.skill_keys import skill_key

TRL_FAILURE_PREFIX = "{'error': "
"""How TRL's tool loop writes a failed call's reply: ``str({"error": str(exception)})``."""


def decode_message_arguments(message: Mapping[str, Any] | None) -> None:
    """In place: each tool call of ``message`` whose arguments are a JSON-encoded object gets them as a dict.

    Arguments that are no JSON object stay as they are (TRL's call of them fails, and is counted as failed).
    """
    for call in (message or {}).get("tool_calls") or []:
        fn = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
            decoded = call_arguments(fn["arguments"])
            if decoded is not None:
                fn["arguments"] = dict(decoded)


@contextlib.contextmanager
def decoded_tool_arguments(tokenizer: Any) -> Iterator[None]:
    """Within the block, every ``tokenizer.parse_response`` result has its tool-call arguments decoded (in place).

    TRL parses the turns after a tool reply inside its tool loop with ``tokenizer.parse_response``; this
    wraps that method on the instance and restores it on exit.
    """
    own = "parse_response" in vars(tokenizer)
    original = tokenizer.parse_response

    def parse_response(*args: Any, **kwargs: Any):
        parsed = original(*args, **kwargs)
        if isinstance(parsed, dict):
            decode_message_arguments(parsed)
        return parsed

    tokenizer.parse_response = parse_response
    try:
        yield
    finally:
        if own:
            tokenizer.parse_response = original
        else:
            del tokenizer.parse_response


def read_tools(fmt: Any) -> dict[str, str]:
    """Tool name -> the argument naming the skill, for every read tool of read format ``fmt``.

    A JSON format names its tool and argument; the kit's syntax is the ``read(skill=...)`` call
    of :data:`~skillgate_lib.integrations.kit_chat.RESPONSE_TEMPLATE`.
    """
    return {getattr(f, "tool", READ_TOOL): getattr(f, "argument", "skill") for f in getattr(fmt, "formats", (fmt,))}


def is_failure(content: Any) -> bool:
    """Whether a tool message's content is TRL's reply to a call that raised (or could not be made)."""
    return isinstance(content, str) and content.startswith(TRL_FAILURE_PREFIX)


def read_call_outcomes(messages: Sequence[Mapping[str, Any]], tools: Mapping[str, str]) -> list[tuple[str, bool | None]]:
    """Each read call TRL parsed from a completion (a message list), in order: ``(skill as written, answered)``.

    ``answered`` is True when the environment replied, False when TRL's call failed (its reply is
    ``{'error': ...}``), ``None`` when no reply followed (TRL drops a reply that would pass
    ``max_completion_length``, and the last turn's calls when ``max_tool_calling_iterations`` is reached).
    A call's replies are the tool messages after it, matched by tool name in order.
    """
    out: list[tuple[str, bool | None]] = []
    for k, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        replies = []
        for reply in messages[k + 1:]:
            if reply.get("role") != "tool":
                break
            replies.append(reply)
        used = [False] * len(replies)
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            name = fn.get("name")
            at = next((i for i, r in enumerate(replies) if not used[i] and r.get("name") == name), None)
            if at is not None:
                used[at] = True
            if name not in tools:
                continue
            args = call_arguments(fn.get("arguments"))
            written = str(args.get(tools[name], "")) if args is not None else ""
            out.append((written, None if at is None else not is_failure(replies[at].get("content"))))
    return out


def failed_reads(found: Sequence[Any], outcomes: Sequence[tuple[str, bool | None]]) -> tuple[set[int], int]:
    """``(indices into found of reads whose call failed, read calls TRL executed that found does not hold)``.

    ``found``: reads located in the tokens (anything with a ``name``), in order; ``outcomes``:
    :func:`read_call_outcomes`. Each found read is matched to the next outcome of the same
    :func:`~skillgate_lib.integrations.skill_keys.skill_key`; a read matched to a failed call is failed.
    A call TRL executed (answered or failed) with a skill name that no found read matches is unlocated:
    a read the read format does not parse.
    """
    failed, matched, at = set(), set(), 0
    for i, read in enumerate(found):
        key = skill_key(read.name)
        m = next((t for t in range(at, len(outcomes)) if skill_key(outcomes[t][0]) == key), None)
        if m is None:
            continue
        matched.add(m)
        at = m + 1
        if outcomes[m][1] is False:
            failed.add(i)
    unlocated = sum(1 for t, (written, answered) in enumerate(outcomes)
                    if t not in matched and answered is not None and skill_key(written))
    return failed, unlocated
