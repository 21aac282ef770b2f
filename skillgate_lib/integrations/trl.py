r"""SkillGate's two-channel credit as a TRL ``GRPOTrainer`` (TRL >= 1.16), on the kit's multi-turn environment.

:class:`SkillGateGRPOTrainer` lets TRL generate, score and batch as usual, then replaces
TRL's per-completion advantage (shape ``(B,)``) with a per-token one (shape ``(B, T)``,
aligned with ``completion_ids``) built by :func:`skillgate_lib.credit.assign` from

* rewards: TRL's gathered reward-function outputs, weighted and summed as TRL does;
* groups: TRL's layout, ``num_generations`` consecutive completions per prompt;
* reads: recovered from the token ids by :func:`skillgate_lib.integrations.read_spans`
  (names matched by :func:`skillgate_lib.env.names.skill_name`, as the environment
  matches them), categories from each row's ``skill_names`` / ``skill_categories`` columns;
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
template: pass ``read_format=JsonReadFormat()`` (:mod:`skillgate_lib.integrations.read_formats`).
TRL's tool loop calls :meth:`SkillReads.read` with the parsed arguments and inserts the reply as
the tool turn; the trainer finds each read's skill-name tokens inside the JSON (the selector
channel) and leaves the turn as generated (the model's end-of-turn token ends it). Names are
matched case- and separator-insensitively (:class:`~skillgate_lib.integrations.SkillIndex`); a
library with two names of one key is refused. TRL 1.16 calls a tool with its arguments as an
object, so OpenAI's string-encoded arguments, which the read format locates, fail in TRL's loop.
``tests/test_trl_tool_calls.py`` trains a random-weight chat model this way.

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
outcome advantage is group-normalised). The KL term (``beta``), the entropy bonus and
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
``read_tok_start``, ``read_tok_end``, ``adv_exec``, ``read_adv``, ``sel_weight`` and
``credit``. :func:`write_task_table` writes the slates for ``python -m skillgate_lib audit``
(``--read-pattern`` :data:`AUDIT_READ_PATTERN`: names are several words).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from accelerate.utils import gather_object
from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOTrainer

from skillgate_lib import methods
from skillgate_lib.credit import Credit, CreditConfig, CreditInputs, ReadSpan, SkillValues, executed_read_names
from skillgate_lib.env.episode import READ_CLOSE, READ_OPEN
from skillgate_lib.env.names import display_name
from skillgate_lib.integrations import AnyReadFormat, ReadFormat, SkillIndex, assign_kept, first_call_end, read_spans
from skillgate_lib.integrations.kit_chat import CHAT_TEMPLATE, READ_TOOL, RESPONSE_TEMPLATE
from skillgate_lib.integrations.serving import serve_read
from skillgate_lib.integrations.trl_hooks import check_trl_hooks

NAMES_COLUMN = "skill_names"
CATEGORIES_COLUMN = "skill_categories"
TASK_COLUMNS = ("task_id", "domain", "horizon")
"""Dataset columns copied into the completions parquet (the audit joins slates on ``task_id``)."""
UPDATE_KEY = "skillgate_update"
"""Generation-batch entry: False when every weight is zero (no optimizer step)."""
AUDIT_READ_PATTERN = r"<read>\s*(?P<name>[^<>]+?)\s*</read>"
"""``audit --read-pattern`` for the kit's several-word skill names."""

def use_kit_chat_format(tokenizer):
    """Give ``tokenizer`` :data:`CHAT_TEMPLATE` and :data:`RESPONSE_TEMPLATE` (in place; returns it).

    What TRL's tool loop needs to run the kit's environment with any model: the embedded
    word-level tokenizer has no chat template, and a chat model's own template would wrap
    the episode in turn markers it was never shown in the kit.
    """
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.response_template = RESPONSE_TEMPLATE
    return tokenizer


def fold_weights(credit: Credit, num_items: int) -> torch.Tensor:
    """(B, T) advantages to hand TRL's ``dapo`` loss so that it equals ``sum(weights * surrogate)``."""
    return credit.advantages * credit.weights * float(num_items)


class SkillGateGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` with per-token credit from :func:`skillgate_lib.credit.assign`.

    Extra arguments (all keyword-only, the rest go to ``GRPOTrainer``):

    credit:        a method of :data:`skillgate_lib.methods.METHODS`, trained with its assigner (a
                   method with a supervised term, such as ``selection_bc``, is refused: TRL has none)
    credit_config: the kit's hyperparameters (``selector_coef`` is lambda); its
                   ``scale_rewards`` must agree with ``args.scale_rewards``
    read_format:   how read calls are written in completions: the kit's ``<read> ... </read>``
                   (:class:`~skillgate_lib.integrations.ReadFormat`, the default) or a JSON tool call as the
                   model's chat template renders it (:class:`~skillgate_lib.integrations.JsonReadFormat`)
    names_column, categories_column: dataset columns holding each row's slate as
                   parallel lists of skill names and categories
    skill_values:  the per-skill utilities ``credit="utility"`` starts from (default: a fresh
                   :class:`~skillgate_lib.credit.SkillValues`); updated after each training batch
    """

    def __init__(self, *args: Any, credit: str = "skillgate", credit_config: CreditConfig | None = None,
                 read_format: AnyReadFormat = ReadFormat(), names_column: str = NAMES_COLUMN,
                 categories_column: str = CATEGORIES_COLUMN, skill_values: SkillValues | None = None, **kwargs: Any):
        check_trl_hooks(GRPOTrainer)
        super().__init__(*args, **kwargs)
        check_trl_hooks(GRPOTrainer, self)
        a = self.args
        method = methods.get(credit)
        if not method.trainable:
            raise ValueError(f"credit {credit!r} is a results-only row; choose one of: {', '.join(methods.trainable())}")
        if method.supervised_term or method.separate_finetune:
            raise ValueError(f"credit {credit!r} needs the kit's supervised selector loss, which TRL's GRPO loss lacks; "
                             "use skillgate_lib.runs.train for it")
        refusals = {
            "loss_type": (a.loss_type, ("dapo",)),
            "importance_sampling_level": (a.importance_sampling_level, ("token",)),
            "scale_rewards": (a.scale_rewards, ("group", "none")),
            "multi_objective_aggregation": (a.multi_objective_aggregation, ("sum_then_normalize",)),
        }
        for field, (value, allowed) in refusals.items():
            if value not in allowed:
                raise ValueError(f"GRPOConfig.{field}={value!r}: SkillGateGRPOTrainer needs one of {allowed} "
                                 "(see skillgate_lib.integrations.trl for why)")
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

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._gathered_rewards = rewards_per_func
        return rewards_per_func

    def _row_categories(self, row: Mapping[str, Any]) -> dict[str, str]:
        try:
            names, cats = row[self.names_column], row[self.categories_column]
        except KeyError as err:
            raise KeyError(f"dataset row has no column {err.args[0]!r}; SkillGateGRPOTrainer needs each row's slate as "
                           f"{self.names_column!r} and {self.categories_column!r} (see skillgate_lib.integrations.trl.env_dataset)") from None
        if len(names) != len(cats):
            raise ValueError(f"dataset row: {self.names_column!r} has {len(names)} entries, {self.categories_column!r} {len(cats)}")
        return dict(zip(names, cats))

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        completion_ids, logprobs = super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                                 has_tool_images)
        if not self.tools or self.read_format.ends_turn:
            return completion_ids, logprobs  # a chat model's end-of-turn token ends the turn, as in TRL
        # The kit's syntax has no turn markers: a turn ends at its first closed call, which the environment answers.
        for i, ids in enumerate(completion_ids):
            cut = first_call_end(ids, self.processing_class, self.read_format)
            if cut is not None and cut < len(ids):
                completion_ids[i] = ids[:cut]
                if logprobs is not None:
                    logprobs[i] = logprobs[i][:cut]
        return completion_ids, logprobs

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        ids, mask = output["completion_ids"], output["completion_mask"]
        if "tool_mask" in output:
            mask = mask * output["tool_mask"]
        lengths = output["completion_mask"].sum(dim=1).tolist()
        local_reads, local_names, local_texts = [], [], []
        for row, seq, n in zip(inputs, ids.tolist(), lengths):
            spans, names = read_spans(seq[: int(n)], self.processing_class, self._row_categories(row), self.read_format)
            local_reads.append(spans)
            local_names.append(names)
            local_texts.append(self.processing_class.decode(seq[: int(n)], skip_special_tokens=True))

        acc = self.accelerator
        reads: list[list[ReadSpan]] = gather_object(local_reads)
        names: list[list[str]] = gather_object(local_names)
        response_mask = acc.gather(acc.pad_across_processes(mask, dim=1, pad_index=0)).bool().cpu()
        rewards = self._outcome_rewards()
        group = torch.arange(len(rewards)) // num_generations
        credit_inputs = CreditInputs(rewards, group, response_mask, reads, names, self.skill_values)
        credit, kept = assign_kept(self.credit_name, credit_inputs, self.credit_config)
        if self.skill_values is not None and kept is not None and mode == "train":
            # after assign: a batch's credit sees earlier batches only; values learn from the executed reads
            self.skill_values.update(executed_read_names(kept), kept.rewards)
        update = bool(credit.weights.abs().sum() > 0)
        self._metrics[mode]["credit/groups_filtered"].append(float(credit.groups_filtered))
        self._metrics[mode]["credit/update_skipped"].append(float(not update))

        rows = slice(acc.process_index * len(inputs), (acc.process_index + 1) * len(inputs))
        folded = fold_weights(credit, int(output["num_items_in_batch"]))
        output["advantages"] = folded[rows, : ids.shape[1]].to(device=ids.device, dtype=torch.float32)
        output[UPDATE_KEY] = torch.tensor(update, device=ids.device)
        self._log_channels(credit, credit_inputs, names, gather_object(local_texts), inputs)
        return output

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if UPDATE_KEY in inputs and not bool(inputs[UPDATE_KEY]):
            # Every weight is zero: no forward pass and no gradient, so the optimizer step that follows changes nothing.
            return torch.zeros((), device=self.accelerator.device, requires_grad=self.model.training)
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    def _outcome_rewards(self) -> torch.Tensor:
        """(B,) float64: TRL's gathered rewards, weighted and summed over reward functions."""
        r = self._gathered_rewards
        unscorable = torch.isnan(r).all(dim=1)
        if unscorable.any():
            raise ValueError(f"completion {int(unscorable.nonzero()[0])}: every reward function returned None; "
                             "SkillGate credit needs a reward for every completion")
        return (r * self.reward_weights.to(r.device).unsqueeze(0)).nansum(dim=1).to(torch.float64).cpu()

    def _log_channels(self, credit: Credit, inputs: CreditInputs, names: list[list[str]], texts: list[str],
                      rows: list[dict[str, Any]]) -> None:
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
            "credit": [self.credit_name] * len(names),
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


# ------------------------------------------------------------------ environment adapter


def transcript(completion: str | Sequence[Mapping[str, Any]], index: SkillIndex | None = None) -> str:
    """A completion as the kit's response text: a string as it is, or a TRL message list joined turn by turn.

    Assistant turns give their content then their ``read`` calls as ``<read> skill </read>``
    (with ``index``, the skill as the environment writes it: ``Ledger_Negate ruby`` becomes
    ``ledger negate ruby``, the name :class:`SkillReads` served); tool turns give the text the
    environment inserted. With :data:`CHAT_TEMPLATE` and the kit's lower-case names this is the
    decoded completion, word for word, whatever template rendered the calls.
    """
    if isinstance(completion, str):
        return completion
    parts = []
    for m in completion:
        if m["role"] == "tool":
            parts.append(str(m["content"]))
            continue
        if m.get("content"):
            parts.append(str(m["content"]))
        for call in m.get("tool_calls") or []:
            fn = call["function"]
            if fn["name"] != READ_TOOL:
                parts.append(json.dumps(fn))
                continue
            written = str(fn["arguments"].get("skill", ""))
            parts.append(f"{READ_OPEN} {written if index is None else index.canonical_words(written)} {READ_CLOSE}")
    return " ".join(parts)


class SkillReads:
    """One rollout's view of the kit's environment, as TRL's ``environment_factory`` wants it.

    TRL calls :meth:`reset` with the dataset row before the rollout and exposes every public
    method but ``reset`` as a tool: here only :meth:`read`. A call's skill is resolved through
    ``index`` (case and separators ignored), so ``read("Ledger-Negate_Ruby")`` is served the body
    of ``ledger-negate-ruby``.
    """

    def __init__(self, env: Any, episodes: Mapping[str, tuple[Any, Any]], index: SkillIndex):
        self.env, self.episodes, self.index = env, episodes, index
        self.task = self.slate = None
        self.calls: list[str] = []

    def reset(self, task_id: str, **_: Any) -> None:
        self.task, self.slate = self.episodes[task_id]
        self.calls = []

    def read(self, skill: str) -> str:
        """Read a skill's instructions (its SKILL.md body).

        Args:
            skill: The skill's name as listed under "skills :", e.g. "ledger negate ruby".

        Returns:
            The skill body between <body> and </body>, or an error between <error> and </error>.
        """
        self.calls.append(self.index.canonical_words(skill))
        return serve_read(self.env, self.task, self.slate, self.calls)


class EnvReward:
    """TRL reward function: the kit environment's verifier on each finished episode.

    TRL calls it as ``reward(prompts=..., completions=..., completion_ids=..., **columns)``;
    the ``task_id`` column finds the task and slate the prompt was made from, and
    :func:`transcript` gives the episode's text (reads and inserted bodies included).
    :meth:`environment` is the matching ``environment_factory``.
    """

    __name__ = "env_reward"  # TRL names the reward column after the function

    def __init__(self, env: Any, episodes: Mapping[str, tuple[Any, Any]]):
        self.env, self.episodes = env, dict(episodes)
        self.index = SkillIndex.of_library(env.library)

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], task_id: Sequence[str], **_: Any) -> list[float]:
        out = []
        for completion, tid in zip(completions, task_id):
            task, slate = self.episodes[tid]
            out.append(float(self.env.score(task, slate, transcript(completion, self.index)).reward))
        return out

    def environment(self) -> SkillReads:
        """A fresh per-rollout environment over the same tasks (pass ``environment_factory=reward.environment``)."""
        return SkillReads(self.env, self.episodes, self.index)


def env_dataset(env: Any, n_tasks: int, seed: int = 0, tools: bool = False) -> tuple[Dataset, EnvReward]:
    """Kit tasks as a TRL dataset plus the reward function that scores them.

    ``env`` is a :class:`skillgate_lib.env.SkillSlateEnv`. Columns: ``prompt``, ``task_id``,
    ``domain``, ``horizon``, ``oracle`` and the slate as ``skill_names`` / ``skill_categories``
    (stored names; empty for a skill-free environment, which serves no read). ``tools=False``: the prompt is text and the completion single-turn (the
    policy never sees a body); ``tools=True``: the prompt is one user message, for TRL's tool
    loop with ``environment_factory=reward.environment`` and :func:`use_kit_chat_format`.
    Each task's slate is drawn from ``(task, seed)``, so a task drawn twice is the same row.
    """
    rows, episodes = [], {}
    for task in env.sample_tasks(n_tasks, split="train", seed=seed):
        slate = env.slate(task, seed=seed)
        tid = str(task.task_id)
        episodes[tid] = (task, slate)
        prompt = env.prompt(task, slate)
        shown = slate.candidates if env.show_slate else ()  # skill-free: no read is served, none is on a slate
        rows.append({
            "prompt": [{"role": "user", "content": prompt}] if tools else prompt,
            "task_id": tid,
            "domain": str(getattr(task, "domain", "")),
            "horizon": int(getattr(task, "horizon", -1)),
            "oracle": slate.oracle,
            NAMES_COLUMN: [c.name for c in shown],
            CATEGORIES_COLUMN: [c.category for c in shown],
        })
    return Dataset.from_list(rows), EnvReward(env, episodes)


def write_task_table(dataset: Dataset, path: str | Path) -> Path:
    """The dataset's slates as the audit's ``--tasks`` JSONL: one object per task.

    Skills are keyed by the words a read writes (``ledger negate ruby``), which is what the
    audit's text readers find in a completion.
    """
    path = Path(path)
    seen: dict[str, dict] = {}
    for row in dataset:
        if row["task_id"] not in seen:
            seen[row["task_id"]] = {
                "task_id": row["task_id"], "domain": row["domain"], "horizon": row["horizon"],
                "skills": {display_name(n): c for n, c in zip(row[NAMES_COLUMN], row[CATEGORIES_COLUMN])},
            }
    path.write_text("".join(json.dumps(r) + "\n" for r in seen.values()))
    return path


__all__ = ["SkillGateGRPOTrainer", "EnvReward", "MetricsJsonl", "SkillReads", "env_dataset", "fold_weights", "transcript",
           "use_kit_chat_format", "write_task_table", "CHAT_TEMPLATE", "RESPONSE_TEMPLATE", "AUDIT_READ_PATTERN"]
