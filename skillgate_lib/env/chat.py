"""The episode as a pretrained chat model sees it: its chat template, a JSON tool call, the body as a tool turn.

:class:`ChatEnv` wraps a :class:`~skillgate_lib.env.episode.SkillSlateEnv` and renders the same
episode for a model with a chat template (SmolLM2-135M-Instruct's ChatML, or any other)::

    <|im_start|>system
    You solve a lookup task ... Skills:
    ledger rebate teal : rebate total
    ...                                                   (the slate, 16 lines)
    <|im_end|>
    <|im_start|>user
    task : ledger credit , mark ruby , start 3 , steps 4<|im_end|>
    <|im_start|>assistant
    I should read the matching skill first. <tool_call>{"name": "read", "arguments": {"skill": "ledger credit ruby"}}</tool_call><|im_end|>
    <|im_start|>tool
    <body> 0>6 1>4 ... </body><|im_end|>
    <|im_start|>assistant
    step 1 : 3 4 (checked: 3 gives 4)
    ...
    <answer> 8 </answer><|im_end|>

* The slate and the instructions are the system turn, the task the user turn (:meth:`ChatEnv.prompt`).
* A read is a JSON tool call (:class:`~skillgate_lib.env.read_formats.JsonReadFormat`, the
  format the TRL and verl integrations parse); after ``</tool_call>`` the environment inserts the
  end of the turn, a tool turn holding the body (or the error text) and the start of the next
  assistant turn, as the tokenizer's own chat template writes them (:meth:`ChatEnv.tool_response`).
* Step lines and the answer are the word format's; free text is allowed before each read and in
  parentheses on any line after the last tool turn (a *rationale*: demonstrations draw it from
  many templated variants, :func:`read_rationale` and :func:`step_rationale`), and the verifier
  ignores it. The verdict is the word format's own: :meth:`ChatEnv.to_words` rewrites a chat
  response into the word format (reads as ``<read> words </read>`` with the insertion the word
  format expects, rationales dropped) and :meth:`SkillSlateEnv.score` judges that; the reads'
  character spans are mapped back to the chat text, so the name tokens are found by character
  offsets in any tokenizer.

A response is judged as the rollout decodes it (``skip_special_tokens=True``): the inserted turn
markers are special tokens, so the verifier compares the *visible* text of the insertion.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Sequence

import numpy as np

from skillgate_lib.env.episode import ANSWER_OPEN, READ_CLOSE, READ_OPEN, Outcome, SkillSlateEnv, Task, rng_for
from skillgate_lib.env.names import display_name
from skillgate_lib.env.read_formats import JsonReadFormat
from skillgate_lib.env.skills import Slate

#: The tool a read calls, and its argument.
READ_TOOL, READ_ARGUMENT = "read", "skill"
_SENTINEL_CALL, _SENTINEL_BODY = "\x00CALL\x00", "\x00BODY\x00"
#: A parenthesised remark: free text the verifier drops from the lines after the last tool turn.
REMARK = re.compile(r"\([^()]*\)")

INSTRUCTIONS = (
    "Read one skill below with a tool call, "
    '<tool_call>{"name": "' + READ_TOOL + '", "arguments": {"' + READ_ARGUMENT + '": "<skill name>"}}</tool_call>, '
    "then follow its table: lines step k : <input> <output>, then <answer> <last output> </answer>.\n"
    "Skills:"
)
"""The system turn's instructions; the slate's lines follow them."""

_READ_RATIONALE = (
    ("I need", "Let me find", "First I will look up", "I should read", "The task needs", "To solve this I need",
     "I'll check", "Time to find", "Before the steps I want", "I must open"),
    ("the skill", "the table", "the procedure", "the matching skill", "the right skill", "the lookup table",
     "the skill file", "the right table"),
    ("for this task.", "that fits the task.", "named by the task.", "before I start.", "to follow.",
     "the task points to.", "for these steps.", "that matches the mark."),
)
_STEP_RATIONALE = (
    ("", "ok,", "so", "checked:", "right,", "next,", "here", "now"),
    ("{a} gives {b}", "the table maps {a} to {b}", "looked up {a}, got {b}", "{b} from {a}", "{a} becomes {b}",
     "row {a} says {b}", "{a} goes to {b}", "key {a} has value {b}"),
    ("", "as the skill says", "per the table", "moving on", "easy", "from the body", "which is next", "done"),
)


def _draw(slots: Sequence[Sequence[str]], rng: np.random.Generator) -> str:
    return " ".join(w for w in (s[int(rng.integers(len(s)))] for s in slots) if w)


def read_rationale(rng: np.random.Generator) -> str:
    """A sentence before a read, drawn from 640 templated variants; it says nothing about which skill."""
    return _draw(_READ_RATIONALE, rng)


def step_rationale(a: str, b: str, rng: np.random.Generator) -> str:
    """A step line's parenthesised remark on its lookup ``a -> b``, drawn from 512 templated variants."""
    return _draw(_STEP_RATIONALE, rng).format(a=a, b=b)


class ChatEnv:
    """``env``'s episode rendered with ``tokenizer``'s chat template (module docstring).

    Everything but the rendering (tasks, slates, the library, the knobs) is ``env``'s; ``rationale``:
    whether demonstrations write free text before the read and on each step line.
    """

    def __init__(self, env: SkillSlateEnv, tokenizer, rationale: bool = True):
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(f"{type(tokenizer).__name__}: the tokenizer has no chat template; the chat rendering "
                             "needs one (the embedded tiny model uses the word format, SkillSlateEnv)")
        if env.step_note or env.step_echo:
            raise ValueError("ChatEnv: step_note and step_echo belong to the word format; the chat rendering's free "
                             "text is its rationale (rationale=True)")
        self.env, self.tokenizer, self.rationale = env, tokenizer, rationale
        self.read_format = JsonReadFormat()
        self._visible: dict[str, str] = {}
        self._before_body, self._after_body = self._tool_turn()

    def __getattr__(self, name: str):
        if name == "env":  # not yet set (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.env, name)

    # ------------------------------------------------------------------ rendering

    def _tool_turn(self) -> tuple[str, str]:
        """The template's text between an assistant turn's end and a tool result, and after it up to the next
        assistant turn's content."""
        messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                    {"role": "assistant", "content": _SENTINEL_CALL}, {"role": "tool", "content": _SENTINEL_BODY}]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        a, b = text.index(_SENTINEL_CALL) + len(_SENTINEL_CALL), text.index(_SENTINEL_BODY)
        return text[a:b], text[b + len(_SENTINEL_BODY):]

    def system(self, slate: Slate) -> str:
        """The system turn: the instructions, then one line per slate candidate (``name words : description``)."""
        return "\n".join([INSTRUCTIONS, *(f"{display_name(c.name)} : {c.description}" for c in slate.candidates)])

    def messages(self, task: Task, slate: Slate) -> list[dict[str, str]]:
        """The prompt as chat messages (the system turn, then the task as the user turn): what an engine's
        conversational dataset holds, so that its chat template renders :meth:`prompt`."""
        self.env._check(task, slate)
        return [{"role": "system", "content": self.system(slate)}, {"role": "user", "content": task.text}]

    def prompt(self, task: Task, slate: Slate) -> str:
        """The chat up to the first assistant turn's content (the tokenizer's template, generation prompt added)."""
        return self.tokenizer.apply_chat_template(self.messages(task, slate), tokenize=False, add_generation_prompt=True)

    def body(self, task: Task, slate: Slate, words: Sequence[str], k: int) -> str:
        """The tool turn's content after the k-th (1-based) read of ``words``: the body or error text, no turn
        markers (an engine's tool returns it and the engine's chat template adds the markers)."""
        self.env._check(task, slate)
        return self.env._insertion(slate, list(words), k)

    @staticmethod
    def read_call(name: str) -> tuple[str, tuple[int, int]]:
        """The JSON tool call that reads ``name``, and the character span of the name's words in it."""
        words = display_name(name)
        head = '<tool_call>{"name": "' + READ_TOOL + '", "arguments": {"' + READ_ARGUMENT + '": "'
        return head + words + '"}}</tool_call>', (len(head), len(head) + len(words))

    def insertion(self, slate: Slate, words: Sequence[str], k: int) -> str:
        """What the environment inserts after the k-th (1-based) read, turn markers included: the body or error
        text of the word format as a tool turn."""
        return self._before_body + self.env._insertion(slate, list(words), k) + self._after_body

    def visible(self, text: str) -> str:
        """``text`` as a rollout decodes it: tokenised, then decoded without the special tokens (turn markers)."""
        if text not in self._visible:
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            self._visible[text] = self.tokenizer.decode(ids, skip_special_tokens=True)
        return self._visible[text]

    def tool_response(self, task: Task, slate: Slate, response_so_far: str) -> str | None:
        """The text to insert when ``response_so_far`` ends with a tool call, else None."""
        self.env._check(task, slate)
        text = response_so_far.rstrip()
        calls = self.read_format.calls(text)
        if not calls or calls[-1].call_end != len(text):
            return None
        call = calls[-1]
        return self.insertion(slate, call.name.split() if call.is_read else [], len(calls))

    def response_cap(self, samples: int = 64) -> int:
        """A cap on response tokens (policy and inserted) that fits this rendering: 1.25 x the longest of ``samples``
        one-read demonstrations at the largest horizon, rounded up to 16 (the word format's caps are counted in
        the word tokenizer's tokens and are too short here)."""
        if getattr(self, "_cap", None) is None:
            h = max(self.env.horizons)
            tasks = self.env.sample_tasks(samples, split="train", seed=0, horizons=(h,))
            longest = max(len(self.tokenizer(self.demonstration(t, self.env.slate(t, seed=k), [self.env.slate(t, seed=k).oracle]),
                                             add_special_tokens=False)["input_ids"]) for k, t in enumerate(tasks))
            self._cap = int(-(-(1.25 * (longest + 1)) // 16) * 16)
        return self._cap

    # ------------------------------------------------------------------ verifier

    def to_words(self, task: Task, slate: Slate, response: str) -> tuple[str, list[tuple[int, int]], list[tuple[int, int]]]:
        """``(the word-format response, each call's name span in response, each insertion's span in response)``.

        Free text before a call and parenthesised text after the last insertion are dropped; an
        insertion that is not the one the environment would make becomes a token the word format
        rejects, so the response is malformed there as it would be in the word format.
        """
        parts: list[str] = []
        names, tools = [], []
        pos = 0
        for k, call in enumerate(self.read_format.calls(response), start=1):
            if call.call_start < pos:
                break
            words = call.name.split() if call.is_read else []
            parts.append(f"{READ_OPEN} {' '.join(words)} {READ_CLOSE}")
            expected = self.visible(self.insertion(slate, words, k))
            end = call.call_end + len(expected)
            names.append((call.name_start, call.name_end))
            if response[call.call_end:end] != expected:
                parts.append("<bad-insertion>")
                pos = len(response)
                break
            parts.append(self.env._insertion(slate, words, k))
            tools.append((call.call_end, end))
            pos = end
        rest = REMARK.sub(" ", response[pos:])
        return " ".join([*parts, *rest.split()]), names, tools

    def score(self, task: Task, slate: Slate, response: str, rng: np.random.Generator | None = None) -> Outcome:
        """The word format's verdict on :meth:`to_words` of ``response``, with the reads' and insertions' character
        spans in ``response`` (``rng``: the injected failures; None seeds one from the task and response)."""
        words, names, tools = self.to_words(task, slate, response)
        out = self.env.score(task, slate, words, rng if rng is not None else rng_for(task.task_id, response))
        reads = tuple(dataclasses.replace(r, char_start=s, char_end=e) for r, (s, e) in zip(out.reads, names))
        return dataclasses.replace(out, reads=reads, tool_spans=tuple(tools[: len(out.tool_spans)]))

    # ------------------------------------------------------------------ demonstrations

    def demonstration(self, task: Task, slate: Slate, reads: Sequence[str], rng: np.random.Generator | None = None) -> str:
        """A correct-format chat response (turn markers included, no end-of-turn token): each read (after a
        rationale) with its insertion, then the word format's step lines (each with a rationale) and answer."""
        rng = rng if rng is not None else rng_for(task.task_id, "chat", *reads)
        words_demo = self.env.demonstration(task, slate, reads, rng)
        tail = words_demo.split("\n")[-(task.horizon + 1):]  # the H step lines and the answer line
        if not tail[-1].startswith(ANSWER_OPEN):
            raise AssertionError(f"task {task.task_id}: the word-format demonstration does not end with its answer")
        out = []
        for k, name in enumerate(reads, start=1):
            call, _ = self.read_call(name)
            lead = read_rationale(rng) + " " if self.rationale else ""
            out.append(lead + call + self.insertion(slate, display_name(name).split(), k))
            if k > self.env.max_reads:
                break
        lines = []
        for line in tail[:-1]:
            if self.rationale:
                a, b = line.split()[3:5]
                line = f"{line} ({step_rationale(a, b, rng)})"
            lines.append(line)
        return "".join(out) + "\n".join([*lines, tail[-1]])


#: How an episode is written for a model: ``auto`` (the chat rendering when the tokenizer has a chat template,
#: else the word format), ``words`` or ``chat``.
RENDERINGS = ("auto", "words", "chat")


def rendered(env: SkillSlateEnv, tokenizer, render: str = "auto", rationale: bool = True):
    """``env`` as ``tokenizer``'s model sees it under ``render`` (:data:`RENDERINGS`): a :class:`ChatEnv` or ``env``."""
    if render not in RENDERINGS:
        raise ValueError(f"render must be one of {', '.join(RENDERINGS)}, got {render!r}")
    if render == "words" or (render == "auto" and not getattr(tokenizer, "chat_template", None)):
        return env
    return ChatEnv(env, tokenizer, rationale=rationale)
