r"""SkillGate's two-channel credit as a TRL ``GRPOTrainer`` (TRL >= 1.16), on the kit's multi-turn environment.

:class:`SkillGateGRPOTrainer` lets TRL generate, score and batch as usual, then replaces
TRL's per-completion advantage (shape ``(B,)``) with a per-token one (shape ``(B, T)``,
aligned with ``completion_ids``) built by :func:`skillgate_lib.credit.assign` from

* rewards: TRL's gathered reward-function outputs, weighted and summed as TRL does;
* groups: TRL's layout, ``num_generations`` consecutive completions per prompt;
* reads: recovered from the token ids by :func:`skillgate_lib.integrations.find_reads`, in the kit's
  ``<read>`` syntax and as JSON tool calls unless ``read_format`` says otherwise (names matched
  case- and separator-insensitively, as the environment matches them), categories from each
  row's ``skill_names`` / ``skill_categories`` columns (a row without them has an empty slate);
  a read whose tool call TRL failed to execute is left out (see "What is counted" below);
* response mask: ``completion_mask`` times ``tool_mask`` (the inserted skill bodies carry no loss);
* for methods with running skill values (``utility``): the names read and the trainer's
  :class:`~skillgate_lib.credit.SkillValues`, updated after each training batch's credit.

The environment as TRL tools (the multi-turn route)
---------------------------------------------------
:func:`env_dataset` with ``tools=True`` gives conversational prompts, and its reward's
:meth:`EnvReward.environment` is TRL's ``environment_factory``: one :class:`SkillReads`
per rollout, whose one tool ``read(skill)`` returns exactly the text the kit's
environment inserts after a read (the skill body, or an error), via
:meth:`SkillSlateEnv.tool_response <skillgate_lib.env.SkillSlateEnv.tool_response>`.
TRL's tool loop inserts that text after the call, masks it with ``tool_mask`` and lets
the policy continue; :class:`EnvReward` runs the verifier on the finished episode.

The read is written in the kit's own syntax, ``<read> ledger negate ruby </read>``, by
any model: :func:`use_kit_chat_format` gives the tokenizer a chat template that renders
the user turn (the environment's prompt) verbatim, a ``read`` call as that syntax and a
tool result as the inserted text, with no turn markers, plus the ``response_template``
TRL parses calls with. The token stream TRL trains on is then exactly the kit's episode
(``prompt``, ``<read> ... </read>``, `` <body> ... </body>``, step lines, answer), which
the embedded model was warm-started on. The trainer stops each sampled turn at its first
closed read call (:func:`skillgate_lib.integrations.first_call_end`), so the policy never
conditions on a body it wrote itself, whatever the tokenizer splits ``</read>`` into.

Reads as a chat model's own JSON tool calls
-------------------------------------------
A chat model whose template renders tool calls (``<tool_call>{"name": "read", "arguments":
{"skill": ...}}</tool_call>``, with a ``response_template`` that parses them) keeps its own
template; the default ``read_format`` (:data:`~skillgate_lib.integrations.DEFAULT_READ_FORMAT`)
finds such calls as well as the kit's syntax (``JsonReadFormat()`` alone also works;
:mod:`skillgate_lib.env.read_formats`). TRL's tool loop calls :meth:`SkillReads.read` with
the parsed arguments and inserts the reply as the tool turn; the trainer finds each read's
skill-name tokens inside the JSON (the selector channel) and leaves the turn as generated (the
model's end-of-turn token ends it). Names are matched case- and separator-insensitively
(:class:`~skillgate_lib.integrations.SkillIndex`); a slate with two names of one key is refused.
OpenAI's string-encoded arguments (``"arguments": "{\"skill\": ...}"``) are decoded before TRL
calls the tool (:mod:`~skillgate_lib.integrations.trl_calls`), so they are served like an object.
``tests/test_trl_tool_calls.py`` trains a random-weight chat model this way.

What is counted and refused
---------------------------
Each generation batch logs ``reads/parsed`` (reads located in the completions' tokens),
``reads/failed`` (read calls TRL's tool loop failed to execute: its reply is ``{'error': ...}``;
such a read was not served, gets no selector credit and is listed in the ``failed_reads`` column;
its tokens stay in the execution channel), ``reads/unlocated`` (read calls TRL executed that
``read_format`` did not locate in the tokens), ``rows/no_slate`` (rows without slate columns:
an empty slate, so their reads are off-slate and carry no selector signal, and the row trains on
the outcome; its ``credit`` column says ``outcome``) and ``rows/unscorable`` (completions every
reward function returned ``None`` for: as in TRL's ``GRPOTrainer``, TRL warns, and the row gets
no advantage and no part in its group's baseline; a batch of only such rows takes no optimizer
step). If TRL executes read calls in the first generation batch and ``read_format`` locates none
of them, the trainer stops with an error naming ``read_format``: every read would otherwise be
trained as plain text.

Dynamic sampling and filter parity
----------------------------------
As in the kit's trainer, every method trains on the prompt groups dynamic sampling keeps
(:func:`skillgate_lib.integrations.assign_kept`: groups whose rewards all agree are dropped
before the credit; ``CreditConfig(filter_groups=False)`` keeps them); TRL logs the count as
``credit/groups_filtered``. The kit refills a step's dropped groups with fresh draws;
TRL's generation batch is fixed, so a TRL step trains on fewer groups instead, as the
kit does when its draws run out. A generation batch whose weights are all zero (every
group filtered) takes no optimizer step, as in the kit's trainer: its micro-batches return a
zero loss without a forward pass, no gradient is written, and ``torch.optim`` skips
parameters without a gradient, so weights, Adam moments and weight decay stay as they
were (``credit/update_skipped`` logs it). TRL's learning-rate schedule still advances
one step (the kit's learning rate is constant). Under DeepSpeed this path is untested.

Normalisation (why the advantages are scaled)
---------------------------------------------
The kit's loss is ``sum_{i,t} weights[i,t] * surrogate(A[i,t])`` with each channel's
token-mean and ``lambda`` inside ``weights``. TRL 1.16's default ``loss_type="dapo"``
computes ``sum_{i,t} mask * (-min(r A', clip(r) A')) / N`` where ``N = num_items_in_batch``
is the number of loss tokens in the whole generation batch, across processes (the
``/num_processes`` in TRL's normaliser cancels DDP's gradient averaging, and TRL scales
for gradient accumulation itself). Because ``weights >= 0``,
``-min(r w A, clip(r) w A) = w * (-min(r A, clip(r) A))``, so feeding TRL

    ``A'[i,t] = A[i,t] * weights[i,t] * N``

makes TRL's loss equal the kit's exactly (``weights`` is zero off the response mask).
The kit's weights are computed over the gathered generation batch, so the identity holds
on any number of processes. With ``steps_per_generation == gradient_accumulation_steps``
(TRL's default) one optimizer step consumes the whole generation batch and the identity
is per step; with ``steps_per_generation = k * gradient_accumulation_steps`` each of the
``k`` steps optimises its share, scaled by ``k`` (TRL's own dapo convention). Other
``loss_type`` values normalise per micro-batch or per sequence and are refused, as are
``importance_sampling_level="sequence"`` (it mixes the channels inside one ratio) and
``scale_rewards="batch"`` / ``multi_objective_aggregation="normalize_then_sum"`` (the kit's
outcome advantage is group-normalised); :data:`GRPO_CONFIG_LIMITS` holds each with its reason. The KL term (``beta``), the entropy bonus and
entropy / off-policy masks keep TRL's behaviour.

Logging
-------
TRL's ``completions_<step>.parquet`` (``log_completions=True``; use ``logging_steps=1``,
since TRL keeps only the latest generation batch) keeps TRL's scalar ``advantage`` column
(the broadcast outcome advantage). Its ``completion`` column holds the episode as the
verifier scored it (the decoded completion, inserted bodies included: TRL's message list
would drop the read calls, which live in ``tool_calls``), and it gains the dataset's
``task_id`` / ``domain`` / ``horizon`` and the kit's trajectory columns
(:mod:`skillgate_lib.logs`): ``response_tokens``, ``read_skills``, ``read_categories``,
``read_tok_start``, ``read_tok_end``, ``adv_exec``, ``read_adv``, ``sel_weight``,
``credit`` and ``failed_reads``. The audit uses those reads as logged; :func:`write_task_table` writes the
slates too, so one command audits any TRL run: ``python -m skillgate_lib audit RUN --format trl
--tasks RUN/tasks.jsonl``. TRL prints ``GRPOConfig.num_completions_to_print`` completions per logged step
(all of them when it is ``None``, TRL's default).
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any, Mapping

import torch

from skillgate_lib import methods
from skillgate_lib.credit import Credit, CreditConfig, CreditInputs, ReadSpan, SkillValues, executed_read_names
from skillgate_lib.integrations import (
    DEFAULT_READ_FORMAT,
    AnyReadFormat,
    assign_kept,
    find_reads,
    first_call_end,
    slate_categories,
    slate_reads,
    turn_cut_format,
)
from skillgate_lib.integrations.deps import import_engine
from skillgate_lib.integrations.kit_chat import (
    CHAT_TEMPLATE,
    RESPONSE_TEMPLATE,
    TOOL_CALLS_AS_CONTENT,
    json_call_response_template,
    renders_tool_calls,
)
from skillgate_lib.integrations.trl_calls import decode_message_arguments, decoded_tool_arguments, failed_reads, read_call_outcomes, read_tools
from skillgate_lib.integrations.trl_env import (
    CATEGORIES_COLUMN,
    NAMES_COLUMN,
    EnvReward,
    SkillReads,
    env_dataset,
    skill_argument,
    transcript,
    write_task_table,
)
from skillgate_lib.integrations.trl_hooks import check_trl_hooks

_WHAT = "skillgate_lib.integrations.trl"
gather_object = import_engine("accelerate.utils", _WHAT, "gather_object")
TrainerCallback = import_engine("transformers", _WHAT, "TrainerCallback")
GRPOTrainer = import_engine("trl", _WHAT, "GRPOTrainer")

logger = logging.getLogger(__name__)

TASK_COLUMNS = ("task_id", "domain", "horizon")
"""Dataset columns copied into the completions parquet (the audit joins slates on ``task_id``)."""
UPDATE_KEY = "skillgate_update"
"""Generation-batch entry: False when every weight is zero (no optimizer step)."""
AUDIT_READ_PATTERN = r"<read>\s*(?P<name>[^<>]+?)\s*</read>"
"""``audit --read-pattern`` for the kit's several-word skill names in a plain TRL log (a SkillGate run's reads are logged)."""


GRPO_CONFIG_LIMITS: dict[str, tuple[tuple[str, ...], str]] = {
    "loss_type": (("dapo",), "only dapo divides the summed token losses by the generation batch's loss-token count, so "
                  "advantages times the kit's weights make TRL's loss the kit's sum(weights * surrogate); the others "
                  "normalise per sequence (grpo), per micro-batch (bnpo) or by a constant (dr_grpo), or replace the "
                  "clipped surrogate (cispo, sapo, luspo, vespo)"),
    "importance_sampling_level": (("token",), "a sequence-level ratio mixes the selector and execution channels' "
                                  "tokens inside one ratio, so neither channel's clipping is the kit's"),
    "scale_rewards": (("group", "none"), "the kit's outcome advantage is centred (and scaled) per prompt group; a batch "
                      "standard deviation gives the outcome channel other values than the kit's"),
    "multi_objective_aggregation": (("sum_then_normalize",), "the kit's credit takes one reward per completion (the "
                                    "weighted sum); normalising each reward function first is not that sum"),
}
"""``GRPOConfig`` fields the trainer restricts -> (the values it accepts, why): refused at construction, listed in
docs/integrations.md."""


def use_kit_chat_format(tokenizer):
    """Give ``tokenizer`` :data:`CHAT_TEMPLATE` and :data:`RESPONSE_TEMPLATE` (in place; returns it).

    What TRL's tool loop needs to run the kit's environment with any model: the embedded
    word-level tokenizer has no chat template, and a chat model's own template would wrap
    the episode in turn markers it was never shown in the kit.
    """
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.response_template = RESPONSE_TEMPLATE
    return tokenizer


def use_chat_tool_calls(tokenizer):
    """Give a chat model's ``tokenizer`` the ``response_template`` that parses the chat rendering's JSON read calls
    (:func:`~skillgate_lib.integrations.kit_chat.json_call_response_template`, its end-of-turn token the EOS),
    keeping its own chat template (in place; returns it).

    What TRL's tool loop needs to run :class:`~skillgate_lib.env.chat.ChatEnv` (``env_dataset(chat, n,
    tools=True)``) with a model whose template TRL cannot parse calls for, such as SmolLM2's. A tokenizer that
    already has a response template keeps it. A template that renders no tool calls (SmolLM2's drops them, and
    TRL refuses such a template) gets :data:`~skillgate_lib.integrations.kit_chat.TOOL_CALLS_AS_CONTENT` put
    before it: calls are written into the assistant's content as the chat rendering writes them, and every
    other turn, so every prompt, renders as before (``tests/test_chat_trl.py``).
    """
    if not renders_tool_calls(tokenizer):
        tokenizer.chat_template = TOOL_CALLS_AS_CONTENT + tokenizer.chat_template
    if getattr(tokenizer, "response_template", None) is None:
        tokenizer.response_template = json_call_response_template(tokenizer.eos_token)
    return tokenizer


def fold_weights(credit: Credit, num_items: int) -> torch.Tensor:
    """(B, T) advantages to hand TRL's ``dapo`` loss so that it equals ``sum(weights * surrogate)``."""
    return credit.advantages * credit.weights * float(num_items)


def trl_methods() -> tuple[str, ...]:
    """The methods :class:`SkillGateGRPOTrainer` trains: trainable, without a supervised term or a separate fine-tune."""
    return tuple(m.name for m in methods.METHODS.values()
                 if m.trainable and not m.supervised_term and not m.separate_finetune)


def trl_method(credit: str) -> methods.Method:
    """The method ``credit`` names, if :class:`SkillGateGRPOTrainer` trains it; else an error listing those it does."""
    accepted = ", ".join(trl_methods())
    method = methods.METHODS.get(credit)
    if method is None:
        raise ValueError(f"unknown credit {credit!r}; SkillGateGRPOTrainer trains one of: {accepted}")
    if not method.trainable:
        raise ValueError(f"credit {credit!r} is a results-only row; SkillGateGRPOTrainer trains one of: {accepted}")
    if method.supervised_term or method.separate_finetune:
        raise ValueError(f"credit {credit!r} needs the kit's supervised selector loss, which TRL's GRPO loss lacks "
                         f"(use skillgate_lib.runs.train for it); SkillGateGRPOTrainer trains one of: {accepted}")
    return method


class SkillGateGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` with per-token credit from :func:`skillgate_lib.credit.assign`.

    Extra arguments (all keyword-only, the rest go to ``GRPOTrainer``):

    credit:        a method of :func:`trl_methods` (trainable, without a supervised term), trained with its assigner
    credit_config: the kit's hyperparameters (``selector_coef`` is lambda); its
                   ``scale_rewards`` must agree with ``args.scale_rewards``
    read_format:   how read calls are written in completions; default
                   :data:`~skillgate_lib.integrations.DEFAULT_READ_FORMAT`: the kit's ``<read> ... </read>`` and
                   JSON tool calls as chat templates render them; or one of them alone
                   (:class:`~skillgate_lib.integrations.ReadFormat`, :class:`~skillgate_lib.integrations.JsonReadFormat`)
    names_column, categories_column: dataset columns holding each row's slate as
                   parallel lists of skill names and categories (a row without both has an empty slate)
    skill_values:  the per-skill utilities ``credit="utility"`` starts from (default: a fresh
                   :class:`~skillgate_lib.credit.SkillValues`); updated after each training batch
    """

    def __init__(self, *args: Any, credit: str = "skillgate", credit_config: CreditConfig | None = None,
                 read_format: AnyReadFormat = DEFAULT_READ_FORMAT, names_column: str = NAMES_COLUMN,
                 categories_column: str = CATEGORIES_COLUMN, skill_values: SkillValues | None = None, **kwargs: Any):
        method = trl_method(credit)  # before TRL builds anything: a typo fails at once
        check_trl_hooks(GRPOTrainer)
        super().__init__(*args, **kwargs)
        check_trl_hooks(GRPOTrainer, self)
        a = self.args
        for field, (allowed, why) in GRPO_CONFIG_LIMITS.items():
            value = getattr(a, field)
            if value not in allowed:
                raise ValueError(f"GRPOConfig.{field}={value!r}: SkillGateGRPOTrainer needs one of {allowed}: {why}")
        cfg = credit_config or CreditConfig(scale_rewards=a.scale_rewards == "group")
        if cfg.scale_rewards != (a.scale_rewards == "group"):
            raise ValueError(f"CreditConfig.scale_rewards={cfg.scale_rewards} disagrees with "
                             f"GRPOConfig.scale_rewards={a.scale_rewards!r}; TRL's scalar advantage and the kit's must match")
        self.credit_name, self.credit_config, self.read_format = method.credit, cfg, read_format
        self.names_column, self.categories_column = names_column, categories_column
        if skill_values is None and method.needs_skill_values:
            skill_values = SkillValues()
        self.skill_values = skill_values
        self._gathered_rewards: torch.Tensor | None = None
        self._call_outcomes: list | None = None
        self._reads_checked = False

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._gathered_rewards = rewards_per_func
        tools = read_tools(self.read_format)
        self._call_outcomes = ([read_call_outcomes(c, tools) if isinstance(c, list) else [] for c in completions]
                               if self.tools else None)
        return rewards_per_func

    def _tool_call_loop(self, prompts, prompt_ids, completion_ids, completions, logprobs, images, multimodal_fields):
        # OpenAI's string-encoded arguments would fail in TRL's tool(**arguments): decode them, in this turn and the next.
        for turns in completions:
            decode_message_arguments(turns[-1] if turns else None)
        with decoded_tool_arguments(self._tokenizer):
            return super()._tool_call_loop(prompts, prompt_ids, completion_ids, completions, logprobs, images,
                                           multimodal_fields)

    def _row_categories(self, row: Mapping[str, Any]) -> dict[str, str] | None:
        """The row's slate (name -> category), or ``None`` when the row has neither slate column."""
        has_names, has_cats = self.names_column in row, self.categories_column in row
        if not has_names and not has_cats:
            return None
        if has_names != has_cats:
            missing = self.categories_column if has_names else self.names_column
            raise KeyError(f"dataset row has {self.names_column if has_names else self.categories_column!r} but no "
                           f"{missing!r}; a slate needs both (or neither: a row without a slate)")
        return slate_categories(row[self.names_column] or [], row[self.categories_column] or [], where="dataset row's slate")

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        completion_ids, logprobs = super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                                 has_tool_images)
        cut_format = turn_cut_format(self.read_format)
        if not self.tools or cut_format is None:
            return completion_ids, logprobs  # a chat model's end-of-turn token ends the turn, as in TRL
        # The kit's syntax has no turn markers: a turn ends at its first closed call, which the environment answers.
        for i, ids in enumerate(completion_ids):
            cut = first_call_end(ids, self.processing_class, cut_format)
            if cut is not None and cut < len(ids):
                completion_ids[i] = ids[:cut]
                if logprobs is not None:
                    logprobs[i] = logprobs[i][:cut]
        return completion_ids, logprobs

    def _find_reads(self, inputs, ids, lengths) -> tuple[list, list, list, list, list, dict[str, int]]:
        """Each local row's reads (credit spans, names, failed names), slate flag and text; and the batch's counts."""
        reads, names, failed, slated, texts = [], [], [], [], []
        counts = {"parsed": 0, "failed": 0, "unlocated": 0, "executed": 0}
        outcomes = self._call_outcomes or [None] * len(inputs)
        for row, seq, n, calls in zip(inputs, ids.tolist(), lengths, outcomes):
            tokens = seq[: int(n)]
            categories = self._row_categories(row)
            found = find_reads(tokens, self.processing_class, self.read_format)
            lost, unlocated = failed_reads(found, calls) if calls is not None else (set(), 0)
            row_reads = slate_reads(found, categories or {}, failed=lost)
            reads.append(row_reads.spans), names.append(row_reads.names), failed.append(row_reads.failed)
            slated.append(categories is not None)
            texts.append(self.processing_class.decode(tokens, skip_special_tokens=True))
            counts["parsed"] += len(found)
            counts["unlocated"] += unlocated
            counts["failed"] += sum(answered is False for _, answered in calls or [])
            counts["executed"] += sum(answered is not None and bool(w.strip()) for w, answered in calls or [])
        return reads, names, failed, slated, texts, counts

    def _check_reads_located(self, counts: dict[str, int]) -> None:
        if counts["unlocated"]:
            logger.warning("SkillGateGRPOTrainer: %d read calls TRL executed in this batch were not located by "
                           "read_format=%r; they are trained as plain text", counts["unlocated"], self.read_format)
        if self._reads_checked:
            return
        self._reads_checked = True
        if counts["executed"] and not counts["parsed"]:
            raise ValueError(
                f"SkillGateGRPOTrainer: TRL's tool loop executed {counts['executed']} read calls in the first generation "
                f"batch, but read_format={self.read_format!r} located none of them in the completions' tokens, so every "
                "read would be trained as plain text (no selector credit). Pass read_format= a format that parses how "
                "the chat template writes a read call: skillgate_lib.integrations.ReadFormat(open_tag, close_tag) or "
                "JsonReadFormat(tool, argument, open_tag, close_tag)")

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        ids, mask = output["completion_ids"], output["completion_mask"]
        if "tool_mask" in output:
            mask = mask * output["tool_mask"]
        lengths = output["completion_mask"].sum(dim=1).tolist()
        local_reads, local_names, local_failed, local_slated, local_texts, local_counts = self._find_reads(inputs, ids, lengths)
        counts = {k: sum(c[k] for c in gather_object([local_counts])) for k in local_counts}
        self._check_reads_located(counts)

        acc = self.accelerator
        reads: list[list[ReadSpan]] = gather_object(local_reads)
        names: list[list[str]] = gather_object(local_names)
        slated: list[bool] = gather_object(local_slated)
        response_mask = acc.gather(acc.pad_across_processes(mask, dim=1, pad_index=0)).bool().cpu()
        rewards, scorable = self._outcome_rewards()
        group = torch.arange(len(rewards)) // num_generations
        credit_inputs = CreditInputs(rewards, group, response_mask, reads, names, self.skill_values)
        credit, kept = assign_kept(self.credit_name, credit_inputs, self.credit_config, scorable)
        if self.skill_values is not None and kept is not None and mode == "train":
            # after assign: a batch's credit sees earlier batches only; values learn from the executed reads
            self.skill_values.update(executed_read_names(kept), kept.rewards)
        update = bool(credit.weights.abs().sum() > 0)
        metrics = self._metrics[mode]
        metrics["credit/groups_filtered"].append(float(credit.groups_filtered))
        metrics["credit/update_skipped"].append(float(not update))
        for key in ("parsed", "failed", "unlocated"):
            metrics[f"reads/{key}"].append(float(counts[key]))
        metrics["rows/no_slate"].append(float(len(slated) - sum(slated)))
        metrics["rows/unscorable"].append(float((~scorable).sum()))

        rows = slice(acc.process_index * len(inputs), (acc.process_index + 1) * len(inputs))
        folded = fold_weights(credit, int(output["num_items_in_batch"]))
        output["advantages"] = folded[rows, : ids.shape[1]].to(device=ids.device, dtype=torch.float32)
        output[UPDATE_KEY] = torch.tensor(update, device=ids.device)
        self._log_channels(credit, credit_inputs, names, gather_object(local_texts), inputs,
                           gather_object(local_failed), slated)
        return output

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if UPDATE_KEY in inputs and not bool(inputs[UPDATE_KEY]):
            # Every weight is zero: no forward pass and no gradient, so the optimizer step that follows changes nothing.
            return torch.zeros((), device=self.accelerator.device, requires_grad=self.model.training)
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    def _outcome_rewards(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(B,) float64 rewards (TRL's gathered reward-function outputs, weighted and summed) and (B,) bool: scorable.

        A completion every reward function returned ``None`` for is unscorable (TRL has warned): reward 0 here,
        and :func:`~skillgate_lib.integrations.assign_kept` leaves it out, as TRL zeroes its advantage.
        """
        r = self._gathered_rewards
        scorable = ~torch.isnan(r).all(dim=1)
        total = (r * self.reward_weights.to(r.device).unsqueeze(0)).nansum(dim=1).to(torch.float64)
        return torch.where(scorable, total, torch.zeros_like(total)).cpu(), scorable.cpu()

    def _log_channels(self, credit: Credit, inputs: CreditInputs, names: list[list[str]], texts: list[str],
                      rows: list[dict[str, Any]], failed: list[list[str]], slated: list[bool]) -> None:
        # TRL has just logged this batch's completions; log each as the episode the verifier scored.
        logged = self._logs["completion"]
        for k, text in enumerate(texts):
            logged[len(logged) - len(texts) + k] = text
        share = credit.selector_share(inputs)
        columns = {
            "response_tokens": inputs.response_mask.sum(dim=1).tolist(),
            "read_skills": names,
            "read_categories": [[r.category for r in spans] for spans in inputs.reads],
            "read_tok_start": [[r.name_start for r in spans] for spans in inputs.reads],
            "read_tok_end": [[r.name_end for r in spans] for spans in inputs.reads],
            "adv_exec": credit.adv_exec.tolist(),
            "read_adv": credit.read_adv,
            "sel_weight": share.tolist(),
            "credit": [self.credit_name if s else "outcome" for s in slated],
            "failed_reads": failed,
        }
        for column in TASK_COLUMNS:
            if all(column in row for row in rows):
                columns[column] = gather_object([row[column] for row in rows])
        for column, values in columns.items():
            self._logs["extra"][column].extend(values)


class MetricsJsonl(TrainerCallback):
    """Append each of the trainer's log rows to ``<run_dir>/metrics.jsonl`` (the kit's log contract), main process only.

    A row is ``{"step": global_step, "split": ..., **logs}`` with non-finite numbers as
    ``null``; ``split`` is ``train``, ``eval`` or ``summary`` (the run totals TRL logs at the
    end). ``report_to`` trackers (TensorBoard, W&B, trackio) get the same numbers through TRL.
    """

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / "metrics.jsonl"

    def on_log(self, args, state, control, logs=None, **_: Any) -> None:
        if not state.is_world_process_zero or not logs:
            return
        split = "eval" if any(k.startswith("eval_") for k in logs) else "summary" if "train_runtime" in logs else "train"
        row = {"step": state.global_step, "split": split,
               **{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in logs.items()}}
        with self.path.open("a") as fh:
            fh.write(json.dumps(row, sort_keys=True, default=float) + "\n")


__all__ = ["SkillGateGRPOTrainer", "GRPO_CONFIG_LIMITS", "EnvReward", "MetricsJsonl", "SkillReads", "env_dataset", "fold_weights", "skill_argument",
           "transcript", "trl_method", "trl_methods", "use_chat_tool_calls", "use_kit_chat_format", "write_task_table", "CHAT_TEMPLATE",
           "RESPONSE_TEMPLATE", "AUDIT_READ_PATTERN", "NAMES_COLUMN", "CATEGORIES_COLUMN"]
