r"""SkillGate's two-channel credit as a TRL ``GRPOTrainer`` (TRL >= 1.16).

:class:`SkillGateGRPOTrainer` overrides one hook, ``_generate_and_score_completions``:
it lets TRL generate, score and batch as usual, then replaces TRL's per-completion
advantage (shape ``(B,)``) with a per-token one (shape ``(B, T)``, aligned with
``completion_ids``) built by :func:`skillgate_lib.credit.assign` from

* rewards: TRL's gathered reward-function outputs, weighted and summed as TRL does;
* groups: TRL's layout, ``num_generations`` consecutive completions per prompt;
* reads: recovered from the sampled token ids by :func:`skillgate_lib.integrations.find_reads`,
  their categories from each row's ``skill_names`` / ``skill_categories`` columns;
* response mask: ``completion_mask`` (times ``tool_mask`` when tools inject text);
* for ``credit="utility"``: the names read and the trainer's :class:`~skillgate_lib.credit.SkillValues`,
  updated after each training batch's credit.

The assigner's dynamic-sampling filter (``skillgate``, ``utility``: prompt groups whose
rewards all agree get zero weight) applies as is; TRL logs the count as
``credit/groups_filtered``. A generation batch with every group filtered has all-zero
advantages, hence a zero policy loss; unlike the kit's trainer, TRL still takes the
optimizer step (Adam's momentum, weight decay and a ``beta > 0`` KL term still act).

Normalisation (why the advantages are scaled). The kit's loss is
``sum_{i,t} weights[i,t] * surrogate(A[i,t])`` with each channel's token-mean and
``lambda`` inside ``weights``. TRL 1.16's default ``loss_type="dapo"`` computes
``sum_{i,t} mask * (-min(r A', clip(r) A')) / N`` where ``N = num_items_in_batch`` is the
number of loss tokens in the whole generation batch, across processes (the
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

Logging. TRL's ``completions_<step>.parquet`` (``log_completions=True``; use
``logging_steps=1``, since TRL keeps only the latest generation batch) keeps TRL's
scalar ``advantage`` column (the broadcast outcome advantage) and gains the kit's
trajectory columns (:mod:`skillgate_lib.logs`): ``response_tokens``, ``read_skills``,
``read_categories``, ``read_tok_start``, ``read_tok_end``, ``adv_exec``, ``read_adv``,
``sel_weight`` and ``credit``.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
from accelerate.utils import gather_object
from datasets import Dataset
from trl import GRPOTrainer

from skillgate_lib import methods
from skillgate_lib.credit import Credit, CreditConfig, CreditInputs, ReadSpan, SkillValues, assign
from skillgate_lib.integrations import ReadFormat, read_spans

NAMES_COLUMN = "skill_names"
CATEGORIES_COLUMN = "skill_categories"


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
    read_format:   how read calls are written in completions
    names_column, categories_column: dataset columns holding each row's slate as
                   parallel lists of skill names and categories
    skill_values:  the per-skill utilities ``credit="utility"`` starts from (default: a fresh
                   :class:`~skillgate_lib.credit.SkillValues`); updated after each training batch
    """

    def __init__(self, *args: Any, credit: str = "skillgate", credit_config: CreditConfig | None = None,
                 read_format: ReadFormat = ReadFormat(), names_column: str = NAMES_COLUMN,
                 categories_column: str = CATEGORIES_COLUMN, skill_values: SkillValues | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        a = self.args
        method = methods.get(credit)
        if not method.trainable:
            raise ValueError(f"credit {credit!r} is a results-only row; choose one of: {', '.join(methods.trainable())}")
        if method.supervised_term or method.separate_finetune:
            raise ValueError(f"credit {credit!r} needs the kit's supervised selector loss, which TRL's GRPO loss lacks; "
                             "use skillgate_lib.train for it")
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

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        ids, mask = output["completion_ids"], output["completion_mask"]
        if "tool_mask" in output:
            mask = mask * output["tool_mask"]
        lengths = output["completion_mask"].sum(dim=1).tolist()
        local_reads, local_names = [], []
        for row, seq, n in zip(inputs, ids.tolist(), lengths):
            spans, names = read_spans(seq[: int(n)], self.processing_class, self._row_categories(row), self.read_format)
            local_reads.append(spans)
            local_names.append(names)

        acc = self.accelerator
        reads: list[list[ReadSpan]] = gather_object(local_reads)
        names: list[list[str]] = gather_object(local_names)
        response_mask = acc.gather(acc.pad_across_processes(mask, dim=1, pad_index=0)).bool().cpu()
        rewards = self._outcome_rewards()
        group = torch.arange(len(rewards)) // num_generations
        credit_inputs = CreditInputs(rewards, group, response_mask, reads, names, self.skill_values)
        credit = assign(self.credit_name, credit_inputs, self.credit_config)
        if self.skill_values is not None and mode == "train":
            self.skill_values.update(names, rewards)  # after assign: a batch's credit sees earlier batches only
        self._metrics[mode]["credit/groups_filtered"].append(float(credit.groups_filtered))

        rows = slice(acc.process_index * len(inputs), (acc.process_index + 1) * len(inputs))
        folded = fold_weights(credit, int(output["num_items_in_batch"]))
        output["advantages"] = folded[rows, : ids.shape[1]].to(device=ids.device, dtype=torch.float32)
        self._log_channels(credit, credit_inputs, names)
        return output

    def _outcome_rewards(self) -> torch.Tensor:
        """(B,) float64: TRL's gathered rewards, weighted and summed over reward functions."""
        r = self._gathered_rewards
        unscorable = torch.isnan(r).all(dim=1)
        if unscorable.any():
            raise ValueError(f"completion {int(unscorable.nonzero()[0])}: every reward function returned None; "
                             "SkillGate credit needs a reward for every completion")
        return (r * self.reward_weights.to(r.device).unsqueeze(0)).nansum(dim=1).to(torch.float64).cpu()

    def _log_channels(self, credit: Credit, inputs: CreditInputs, names: list[list[str]]) -> None:
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
        for column, values in columns.items():
            self._logs["extra"][column].extend(values)


# ------------------------------------------------------------------ environment adapter


class EnvReward:
    """TRL reward function: the kit environment's verifier on each completion.

    TRL calls it as ``reward(prompts=..., completions=..., completion_ids=..., **columns)``;
    the ``task_id`` column finds the task and slate the prompt was made from.
    """

    __name__ = "env_reward"  # TRL names the reward column after the function

    def __init__(self, env: Any, episodes: Mapping[str, tuple[Any, Any]]):
        self.env, self.episodes = env, dict(episodes)

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], task_id: Sequence[str], **_: Any) -> list[float]:
        out = []
        for completion, tid in zip(completions, task_id):
            task, slate = self.episodes[tid]
            text = completion if isinstance(completion, str) else completion[-1]["content"]
            out.append(float(self.env.score(task, slate, text).reward))
        return out


def env_dataset(env: Any, n_tasks: int, seed: int = 0) -> tuple[Dataset, EnvReward]:
    """Kit tasks as a TRL dataset plus the reward function that scores them.

    ``env`` is a :class:`skillgate_lib.env.SkillSlateEnv` (``sample_tasks``, ``slate``,
    ``prompt``, ``score``). Columns: ``prompt`` (text), ``task_id``, ``domain``,
    ``horizon``, ``oracle`` and the slate as ``skill_names`` / ``skill_categories``.
    """
    rows, episodes = [], {}
    for k, task in enumerate(env.sample_tasks(n_tasks, split="train", seed=seed)):
        slate = env.slate(task, seed=seed * 1_000_003 + k)
        tid = str(task.task_id)
        episodes[tid] = (task, slate)
        rows.append({
            "prompt": env.prompt(task, slate),
            "task_id": tid,
            "domain": str(getattr(task, "domain", "")),
            "horizon": int(getattr(task, "horizon", -1)),
            "oracle": slate.oracle,
            NAMES_COLUMN: [c.name for c in slate.candidates],
            CATEGORIES_COLUMN: [c.category for c in slate.candidates],
        })
    return Dataset.from_list(rows), EnvReward(env, episodes)


__all__ = ["SkillGateGRPOTrainer", "EnvReward", "env_dataset", "fold_weights"]
