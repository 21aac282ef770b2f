r"""The kit's environment as a tool of verl's multi-turn tool agent loop: the launch path inserts bodies.

verl's ``tool_agent`` loop (``actor_rollout_ref.rollout.multi_turn``) parses each sampled turn
with a tool parser (``multi_turn.format``), calls the named tool, renders the tool's reply with
the chat template, masks it out of the loss (``response_mask`` 0) and lets the policy go on.
This module gives it the two kit-specific pieces:

* :class:`SkillReadTool`, the ``read`` tool (``multi_turn.tool_config_path=examples/verl/read_tool.yaml``):
  verl creates one instance per call with the row's ``extra_info.tools_kwargs.read.create_kwargs``
  (the episode: regime, task fields, slate; :func:`skillgate_lib.integrations.verl_data.verl_rows`
  writes them) and the reply is :func:`~skillgate_lib.integrations.serving.serve_read`, exactly the
  text the kit's own rollout inserts (the body; an error past ``max_reads``, counted over the
  episode's calls, which live in ``agent_data.extra_fields["skillgate_read_calls"]``). Names are
  resolved case- and separator-insensitively (:class:`~skillgate_lib.integrations.SkillIndex`).
* :class:`KitReadParser`, registered as ``multi_turn.format=skillgate_read`` by :func:`register_parser`:
  reads written in the kit's syntax ``<read> words </read>``, for the embedded model and any
  tokenizer given :data:`skillgate_lib.integrations.kit_chat.CHAT_TEMPLATE` (``actor_rollout_ref.model.custom_chat_template``),
  so the episode verl trains on is the kit's token stream and ``compute_score`` can verify it.
  A chat model writing JSON tool calls uses verl's own ``hermes`` parser with the same tool (whose
  arguments may be an object or OpenAI's JSON-encoded string); the reward manager finds those reads
  too (:data:`~skillgate_lib.integrations.DEFAULT_READ_FORMAT`). The parser stops generation at
  ``</read>`` only where the tokenizer has it as one token (:func:`close_tag_stop_ids`).

Imports verl's ``tools`` package (for the parser, :func:`register_parser` imports verl's agent
loop, which needs verl's serving stack: not on the kit's light install, where the parser's logic,
:func:`kit_read_calls`, is tested alone); verl loads this module itself, from the tool config and
from :func:`skillgate_lib.integrations.verl_runner.setup_worker`.
"""

from __future__ import annotations

import json
import logging
from functools import lru_cache
from typing import Any

from skillgate_lib.integrations import ReadFormat, SkillIndex
from skillgate_lib.integrations.deps import missing
from skillgate_lib.integrations.kit_chat import READ_TOOL
from skillgate_lib.env.read_formats import call_arguments
from skillgate_lib.integrations.serving import serve_read
from skillgate_lib.integrations.verl_data import episode_of, regime_env

try:
    from verl.tools.base_tool import BaseTool
    from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
except ModuleNotFoundError as _err:
    raise missing(_err, "skillgate_lib.integrations.verl_tool") from _err

PARSER = "skillgate_read"
"""``multi_turn.format`` of :class:`KitReadParser`."""
CALLS_KEY = "skillgate_read_calls"
"""``agent_data.extra_fields`` entry holding an episode's read words so far."""
SCHEMA = OpenAIFunctionToolSchema.model_validate({
    "type": "function",
    "function": {
        "name": READ_TOOL,
        "description": "Read a skill's instructions (its SKILL.md body).",
        "parameters": {"type": "object", "required": ["skill"], "properties": {
            "skill": {"type": "string", "description": 'The skill\'s name as listed under "skills :", e.g. "ledger negate ruby".'}}},
    },
})


_PARSERS: list[type] = []


@lru_cache(maxsize=None)
def _index(regime: str) -> SkillIndex:
    return SkillIndex.of_library(regime_env({"regime": regime}).library)


class SkillReadTool(BaseTool):
    """verl's ``read`` tool over the kit's environment (see the module docstring)."""

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None):
        super().__init__(config, tool_schema or SCHEMA)
        self.episodes: dict[str, dict[str, Any]] = {}

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        instance_id, response = await super().create(instance_id)
        episode = kwargs.get("create_kwargs") or {}
        if "skill_names" not in episode:
            raise KeyError(f"read tool: create_kwargs {sorted(episode)} carry no episode; rows need "
                           f"extra_info.tools_kwargs.{READ_TOOL}.create_kwargs (examples/verl/make_data.py writes them)")
        self.episodes[instance_id] = dict(episode)
        return instance_id, response

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> tuple[ToolResponse, float, dict]:
        episode = self.episodes[instance_id]
        env = regime_env(episode)
        task, slate = episode_of(env, episode)
        agent_data = kwargs.get("agent_data")
        calls = agent_data.extra_fields.setdefault(CALLS_KEY, []) if agent_data is not None else []
        args = call_arguments(parameters) or {}  # a mapping, or OpenAI's JSON-encoded string
        calls.append(_index(str(episode.get("regime", "easy"))).canonical_words(str(args.get("skill", ""))))
        return ToolResponse(text=serve_read(env, task, slate, calls)), 0.0, {}

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self.episodes.pop(instance_id, None)


def kit_read_calls(text: str, fmt: ReadFormat = ReadFormat()) -> tuple[str, list[tuple[str, str]]]:
    """A sampled turn in the kit's syntax as verl's parser returns it: the content before the first read, and each
    read as ``(tool name, JSON arguments)`` (``("read", '{"skill": "ledger negate ruby"}')``)."""
    calls = [c for c in fmt.calls(text) if c.is_read]
    if not calls:
        return text, []
    return text[: calls[0].call_start].strip(), [(READ_TOOL, json.dumps({"skill": c.name})) for c in calls]


_WARNED: set[int] = set()


def close_tag_stop_ids(tokenizer: Any, fmt: ReadFormat = ReadFormat()) -> list[int]:
    """``[id]`` when ``fmt.close_tag`` (``</read>``) is one token of ``tokenizer``: generation stops there. Else ``[]``
    and a warning (once per tokenizer): generation then runs on past ``</read>`` to the end of the turn.

    Only the stop needs one token: the reward manager and the estimators find reads by their text, whatever the
    tokenizer splits ``</read>`` into. What a several-token ``</read>`` costs is the turn after the read: the policy
    goes on writing (its guess at the body) before the tool's reply is inserted, and the verifier scores that
    episode. Add ``<read>`` and ``</read>`` as tokens (:func:`~skillgate_lib.integrations.kit_chat.add_read_tokens`,
    ``examples/verl/add_read_tokens.py``), as the kit's embedded tokenizer has them, or let a chat model write JSON tool calls (verl's ``hermes`` parser) and
    end its turn after a call.
    """
    ids = tokenizer.encode(fmt.close_tag, add_special_tokens=False)
    if len(ids) == 1:
        return ids
    if id(tokenizer) not in _WARNED:
        _WARNED.add(id(tokenizer))
        logging.getLogger(__name__).warning(
            "%r is %d tokens of this tokenizer, so generation does not stop after a read: the policy writes on to the end "
            "of its turn before the read tool's reply; `python examples/verl/add_read_tokens.py MODEL OUT` saves the model "
            "with <read> and </read> as one token each",
            fmt.close_tag, len(ids))
    return []


def register_parser() -> type:
    """Register :class:`KitReadParser` as verl's ``multi_turn.format=skillgate_read`` (idempotent); returns the class."""
    if _PARSERS:
        return _PARSERS[0]
    try:
        from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser
    except ModuleNotFoundError as err:
        raise missing(err, "the skillgate_read tool parser") from err

    @ToolParser.register(PARSER)
    class KitReadParser(ToolParser):
        """Reads in the kit's syntax: ``<read> words </read>`` is ``read(skill="words")``; the text before it is content."""

        fmt = ReadFormat()

        @property
        def stop_token_ids(self) -> list[int]:
            # The kit's syntax has no end-of-turn token: stop at the close tag, when the tokenizer has it as one token.
            return close_tag_stop_ids(self.tokenizer, self.fmt)

        async def extract_tool_calls(self, responses_ids: list[int], tools: Any = None) -> tuple[str, list]:
            content, calls = kit_read_calls(self.tokenizer.decode(responses_ids, skip_special_tokens=True), self.fmt)
            return content, [FunctionCall(name=name, arguments=arguments) for name, arguments in calls]

    _PARSERS.append(KitReadParser)
    return KitReadParser
