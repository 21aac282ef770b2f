r"""How a read action is written in a response, and where its skill-name characters are.

A format's :meth:`calls` finds every tool call in a decoded response and gives, in
characters, the call's extent and the extent of the skill name inside it (the selector
channel's tokens). Two formats:

* :class:`ReadFormat`, the kit's own syntax: ``<read> ledger negate ruby </read>``;
* :class:`JsonReadFormat`, a JSON tool call as chat templates render one, inside tags
  (``<tool_call>{"name": "read", "arguments": {"skill": "ledger negate ruby"}}</tool_call>``,
  Qwen / Hermes) or bare (``open_tag=""``), in either JSON shape: ``{"name", "arguments"}``
  (``"parameters"`` also accepted, as Llama 3 writes it) or OpenAI's
  ``{"type": "function", "function": {"name", "arguments"}}``, with ``arguments`` an object or
  a JSON-encoded string (OpenAI's function-call JSON). The name span is the characters of
  the argument's string value, wherever the JSON put it and however it was escaped.

:class:`EitherReadFormat` finds both (the kit's tags, tagged JSON and bare JSON calls, in text
order); it is the default of every engine (:data:`DEFAULT_READ_FORMAT`), so a read is found
whichever syntax the policy writes. :func:`call_arguments` gives a parsed call's arguments as
a mapping whether they came as an object or as OpenAI's JSON-encoded string.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from json.decoder import scanstring
from typing import Any, Iterator, Mapping

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class CallSpan:
    """One tool call found in a text: character ranges ``[start, end)``.

    ``name`` is the skill name as written (whitespace runs collapsed; ``""`` when the call
    names none), ``is_read`` whether the call is a read (a call of another tool still ends
    a turn, but names no skill).
    """

    name: str
    name_start: int
    name_end: int
    call_start: int
    call_end: int
    is_read: bool = True


@dataclass(frozen=True)
class ReadFormat:
    """The kit's read syntax: ``<open_tag> skill name words <close_tag>``."""

    open_tag: str = "<read>"
    """Text that opens a read call."""
    close_tag: str = "</read>"
    """Text that closes it; an unclosed call (a truncated completion) is not a read."""
    ends_turn: bool = False
    """Whether the model ends its turn itself after a call; the kit's syntax has no turn markers, so an engine
    cuts the turn at the call's end (:func:`skillgate_lib.integrations.first_call_end`)."""

    @property
    def pattern(self) -> re.Pattern[str]:
        return re.compile(re.escape(self.open_tag) + r"\s*(.*?)\s*" + re.escape(self.close_tag), re.S)

    def calls(self, text: str) -> list[CallSpan]:
        """Every closed call in ``text``, in order (empty ones included)."""
        return [CallSpan(" ".join(m.group(1).split()), m.start(1), m.end(1), m.start(), m.end())
                for m in self.pattern.finditer(text)]


@dataclass(frozen=True)
class JsonReadFormat:
    """A read as a JSON tool call: ``tool(argument=skill name)``, between ``open_tag`` and ``close_tag``."""

    tool: str = "read"
    """The read tool's name (TRL names it after :meth:`skillgate_lib.integrations.trl.SkillReads.read`)."""
    argument: str = "skill"
    """The argument holding the skill name."""
    open_tag: str = "<tool_call>"
    """Text before each call's JSON; ``""`` finds bare JSON objects anywhere in the text."""
    close_tag: str = "</tool_call>"
    """Text after it (ignored when ``open_tag`` is empty)."""
    ends_turn: bool = True
    """Whether the model ends its turn itself after a call (a chat model's end-of-turn token, which the template
    needs before the tool's reply); when it does, an engine leaves the turn as generated."""

    def calls(self, text: str) -> list[CallSpan]:
        """Every closed call in ``text``, in order; a call whose JSON does not parse names no skill."""
        if not self.open_tag:
            return list(self._bare_calls(text))
        found = []
        for m in re.finditer(re.escape(self.open_tag) + r"(.*?)" + re.escape(self.close_tag), text, re.S):
            start = _WS.match(text, m.start(1)).end()
            try:
                obj, _ = _DECODER.raw_decode(text, start)
            except ValueError:
                obj = None
            found.append(self._call(text, obj, start, m.start(), m.end()))
        return found

    def _bare_calls(self, text: str) -> Iterator[CallSpan]:
        i = text.find("{")
        while i >= 0:
            try:
                obj, end = _DECODER.raw_decode(text, i)
            except ValueError:
                obj, end = None, i + 1
            if _function(obj) is not None:
                yield self._call(text, obj, i, i, end)
            else:
                end = i + 1
            i = text.find("{", end)

    def _call(self, text: str, obj: Any, at: int, call_start: int, call_end: int) -> CallSpan:
        fn = _function(obj)
        if fn is None or fn.get("name") != self.tool:
            return CallSpan("", call_start, call_start, call_start, call_end, is_read=fn is None)
        span = _argument_span(text, at, obj, self.argument)
        if span is None:
            return CallSpan("", call_start, call_start, call_start, call_end)
        start, end = span
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        name = " ".join(_value(obj, self.argument).split())
        return CallSpan(name, start, end, call_start, call_end)


def _function(obj: Any) -> dict | None:
    """The ``{"name", "arguments"}`` part of a call object (either shape), or ``None`` when ``obj`` is no call."""
    if not isinstance(obj, dict):
        return None
    fn = obj.get("function") if isinstance(obj.get("function"), dict) else obj
    return fn if isinstance(fn.get("name"), str) else None


def _arguments_key(fn: dict) -> str:
    return "arguments" if "arguments" in fn else "parameters"


def _value(obj: dict, argument: str) -> str:
    fn = _function(obj)
    args = fn.get(_arguments_key(fn))
    if isinstance(args, str):
        args = json.loads(args)
    return args[argument]


def _members(text: str, i: int) -> Iterator[tuple[str, int, int]]:
    """``(key, value_start, value_end)`` of each member of the JSON object at ``text[i] == "{"`` (already valid JSON)."""
    i = _WS.match(text, i + 1).end()
    while text[i] == '"':
        key, i = scanstring(text, i + 1)
        i = _WS.match(text, _WS.match(text, i).end() + 1).end()  # past the colon
        _, end = _DECODER.raw_decode(text, i)
        yield key, i, end
        i = _WS.match(text, end).end()
        if text[i] != ",":
            return
        i = _WS.match(text, i + 1).end()


def _member(text: str, i: int, key: str) -> tuple[int, int] | None:
    spans = [(s, e) for k, s, e in _members(text, i) if k == key]
    return spans[-1] if spans else None  # json keeps the last of duplicate keys


def _decoded_offsets(text: str, start: int, end: int) -> list[int]:
    """For the JSON string literal ``text[start:end]`` (quotes included): the text index of each decoded character, plus its end."""
    offsets, j = [], start + 1
    while j < end - 1:
        offsets.append(j)
        if text[j] != "\\":
            j += 1
        elif text[j + 1] != "u":
            j += 2
        else:  # a \\uXXXX escape, or a surrogate pair of two that decodes to one character
            high = 0xD800 <= int(text[j + 2: j + 6], 16) <= 0xDBFF
            j += 12 if high and text[j + 6: j + 8] == "\\u" else 6
    offsets.append(end - 1)
    return offsets


def _argument_span(text: str, at: int, obj: dict, argument: str) -> tuple[int, int] | None:
    """Characters of the string value of ``argument`` in the call object at ``text[at]``, or ``None`` if it has none."""
    outer = _member(text, at, "function") if isinstance(obj.get("function"), dict) else None
    fn_at = at if outer is None else outer[0]
    fn = _function(obj)
    args = _member(text, fn_at, _arguments_key(fn))
    if args is None:
        return None
    raw = fn[_arguments_key(fn)]
    if isinstance(raw, dict):
        value = _member(text, args[0], argument)
        if value is None or not isinstance(raw.get(argument), str):
            return None
        return value[0] + 1, value[1] - 1
    if not isinstance(raw, str):
        return None
    # OpenAI: the arguments are a JSON object encoded as a string; find the value in the decoded string, map back.
    inner = _WS.match(raw).end()
    try:
        parsed, _ = _DECODER.raw_decode(raw, inner)
    except ValueError:
        return None
    if not isinstance(parsed, dict) or not isinstance(parsed.get(argument), str) or raw[inner] != "{":
        return None
    value = _member(raw, inner, argument)
    offsets = _decoded_offsets(text, *args)
    return offsets[value[0] + 1], offsets[value[1] - 1]


@dataclass(frozen=True)
class EitherReadFormat:
    """Reads in any of ``formats``, in text order: by default the kit's ``<read> ... </read>`` and JSON tool calls.

    A call found by several formats (a tagged JSON call is also a bare JSON object) is kept once, as
    the first format in ``formats`` finds it. The default finds what :class:`ReadFormat`,
    :class:`JsonReadFormat` and ``JsonReadFormat(open_tag="")`` find.
    """

    formats: tuple = (ReadFormat(), JsonReadFormat(), JsonReadFormat(open_tag=""))

    @property
    def ends_turn(self) -> bool:
        """True when every format's calls end the turn (then no engine cuts a turn after a call)."""
        return all(f.ends_turn for f in self.formats)

    def calls(self, text: str) -> list[CallSpan]:
        """Every closed call any format finds, in order of position; a call overlapping an earlier-listed format's is dropped."""
        kept: list[CallSpan] = []
        for fmt in self.formats:
            for c in fmt.calls(text):
                if not any(c.call_start < k.call_end and k.call_start < c.call_end for k in kept):
                    kept.append(c)
        return sorted(kept, key=lambda c: c.call_start)


DEFAULT_READ_FORMAT = EitherReadFormat()
"""What the engines find reads with unless told otherwise: the kit's tags and JSON tool calls."""


def turn_cut_format(fmt: Any) -> Any | None:
    """The part of ``fmt`` whose calls do not end the model's turn (an engine cuts a turn after such a call), or ``None``.

    The kit's syntax has no turn markers, so a turn is cut after its first ``</read>``; a JSON tool call
    is followed by the model's own end-of-turn token, which the chat template needs, so it is never cut.
    """
    parts = tuple(f for f in getattr(fmt, "formats", (fmt,)) if not f.ends_turn)
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else EitherReadFormat(parts)


def call_arguments(arguments: Any) -> Mapping[str, Any] | None:
    """A tool call's arguments as a mapping: an object as it is, OpenAI's JSON-encoded string decoded; ``None`` otherwise.

    ``call_arguments('{"skill": "pdf-tools"}') == call_arguments({"skill": "pdf-tools"}) == {"skill": "pdf-tools"}``;
    a string that is not a JSON object (or anything else) gives ``None``: a call that cannot be executed.
    """
    if isinstance(arguments, Mapping):
        return arguments
    if isinstance(arguments, (str, bytes)):
        try:
            decoded = json.loads(arguments)
        except ValueError:
            return None
        return decoded if isinstance(decoded, dict) else None
    return None
