r"""SkillGate's two-channel credit as verl (0.9.x) advantage estimators: ``algorithm.adv_estimator=skillgate``.

:func:`register` puts, in verl's registry (``verl.trainer.ppo.core_algos.register_adv_est``),
one estimator per entry of :data:`ESTIMATORS`: ``skillgate`` (:func:`compute_skillgate_advantage`)
and ``skillgate_utility`` (:func:`compute_utility_advantage`, the ``utility`` method: per-skill
running values, :data:`SKILL_VALUES`, carried across steps in the process that computes
advantages, verl's driver). Each calls :func:`skillgate_lib.credit.assign` and returns verl's
``(advantages, returns)``, both ``(bs, L)``. Importing this module imports neither verl nor
Ray (verl's package imports Ray); :func:`register` imports verl's registry where it is used,
and :func:`skillgate_lib.integrations.verl_runner.setup_worker` calls it in every Ray worker.

How the read annotation reaches the estimator (the design choice)
-----------------------------------------------------------------
verl's ``compute_advantage`` (``verl/trainer/ppo/ray_trainer.py``) calls a registered
estimator with a fixed set of keywords: ``token_level_rewards``, ``response_mask``,
``config`` (``algorithm``), ``index`` (the prompt uid array) and, when present,
``reward_baselines``; only ``gdpo`` also gets the batch. The v1 trainer's
``_compute_advantage`` moreover fetches only ``uid``, ``response_mask``, ``rm_scores``,
log-probs and values from the TransferQueue. So nothing selector-specific can reach an
estimator through verl's own path. The kit therefore carries it in two hops:

1. reward side: the reward manager (``SkillGateRewardManager`` in
   :mod:`~skillgate_lib.integrations.verl_runner`, which calls :func:`reward_extra_info`)
   finds the reads in each response's token ids (:func:`skillgate_lib.integrations.read_spans`:
   names matched case- and separator-insensitively, as the read tool
   (:mod:`~skillgate_lib.integrations.verl_tool`) serves them; categories from the row's ``extra_info.skill_names`` /
   ``extra_info.skill_categories``) and emits them as ``reward_extra_info["skillgate_reads"]``:
   a JSON string (:func:`encode_reads`), so it rides verl's existing per-sample
   ``extra_fields`` untouched. Environment text inside a response (a skill body a tool
   inserted) is verl's business: its ``response_mask`` is 0 there, and the estimator
   takes that mask as the response mask, so inserted tokens carry no loss;
2. advantage side: the SkillGate trainer (``trainer.v1.trainer_mode=skillgate_sync``)
   overrides only ``_compute_advantage``: it fetches those strings for the batch's keys,
   decodes them and runs verl's unchanged ``_compute_advantage`` inside
   :func:`read_annotation`, a context that the estimator reads. The estimator also
   takes ``reads=`` directly, and raises if called with neither.

Normalisation. The kit's loss is ``sum(weights * surrogate(A))``; verl's default
``actor.loss_agg_mode=token-mean`` divides the masked sum by the mini-batch's token count
``N`` (globally across data-parallel ranks). Since ``weights >= 0`` passes through the
PPO clip, the estimator returns ``A * weights * N`` (``N`` = response tokens of the
batch it is given), so verl's vanilla PPO loss equals the kit's exactly when one
mini-batch is the whole batch (``actor.ppo_mini_batch_size == data.train_batch_size``,
one update per batch, as in the reference recipe); with ``k`` mini-batches each update
optimises its share of the kit's loss, times ``k``. No custom policy loss is needed.
``returns`` equals ``advantages`` (as for verl's GRPO; GRPO trains no critic).

Dynamic sampling. As in the kit's trainer, the estimators credit the prompt groups whose
rewards differ (:func:`skillgate_lib.integrations.assign_kept`): a group whose rewards all
agree gets zero weight and both channels' means run over the kept groups; ``N`` still
counts the whole batch, so the identity above holds unchanged. verl's own DAPO filter
(``algorithm.filter_groups.enable=true``, ``metric=reward``, as in
``examples/verl/skillgate_grpo.sh``) removes such groups and refills the batch before
advantages are computed, which is what the kit's and the reference's over-sampling do;
with it on, the estimator finds nothing to drop.

What the selector channel receives: ``index`` groups rollouts into prompt groups,
outcome rewards are ``token_level_rewards.sum(-1)`` (verl puts the score on the last
token), ``algorithm.norm_adv_by_std_in_grpo`` selects GRPO vs Dr. GRPO scaling, and
lambda / eps come from :func:`configure` (default :class:`~skillgate_lib.credit.CreditConfig`).
Lambda is set on the command line: ``skillgate.selector_coef=0.3`` among the overrides of
:func:`skillgate_lib.integrations.verl_runner.main` (``LAMBDA=0.3 bash examples/verl/skillgate_grpo.sh``),
which exports it as :data:`SELECTOR_COEF_ENV` to every Ray worker, where
:func:`configure_from_env` (run by the worker hook) applies it.

Reads are found in the kit's syntax and as JSON tool calls
(:data:`~skillgate_lib.integrations.DEFAULT_READ_FORMAT`), by their text: ``</read>`` need not be one
token of the tokenizer for the reward manager and the estimators (only the tool parser's stop at
``</read>`` needs that; see :mod:`~skillgate_lib.integrations.verl_tool`).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
from dataclasses import replace
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import torch

from skillgate_lib import methods
from skillgate_lib.credit import CreditConfig, CreditInputs, ReadSpan, SkillValues, executed_read_names
from skillgate_lib.integrations import DEFAULT_READ_FORMAT, AnyReadFormat, assign_kept, read_spans, slate_categories
from skillgate_lib.integrations.deps import missing

ESTIMATOR = "skillgate"
"""verl's name for SkillGate's estimator (the ``skillgate`` method of :data:`skillgate_lib.methods.METHODS`)."""
ESTIMATORS = {ESTIMATOR: "skillgate", "skillgate_utility": "utility"}
"""verl estimator name -> the kit method (:data:`skillgate_lib.methods.METHODS`) whose credit it computes."""
READS_KEY = "skillgate_reads"
"""``reward_extra_info`` key carrying each response's reads (JSON, see :func:`encode_reads`)."""
SELECTOR_COEF_ENV = "SKILLGATE_SELECTOR_COEF"
"""Environment variable carrying lambda (``CreditConfig.selector_coef``) to the process that computes advantages."""
SKILL_VALUES = SkillValues()
"""The ``utility`` estimator's per-skill values, updated after each batch's credit (per process; not checkpointed)."""

_READS: contextvars.ContextVar[tuple[Sequence[Sequence[ReadSpan]], Sequence[Sequence[str]] | None] | None] = (
    contextvars.ContextVar("skillgate_reads", default=None))
_CONFIG = [CreditConfig()]


def configure(cfg: CreditConfig) -> None:
    """Set lambda / eps for the estimators (``scale_rewards`` always follows ``norm_adv_by_std_in_grpo``)."""
    _CONFIG[0] = cfg


def env_selector_coef(environ: Mapping[str, str] | None = None) -> float | None:
    """Lambda from :data:`SELECTOR_COEF_ENV` (default ``os.environ``), ``None`` when unset; a bad value is an error naming it."""
    value = (os.environ if environ is None else environ).get(SELECTOR_COEF_ENV)
    if value is None or not value.strip():
        return None
    try:
        coef = float(value)
    except ValueError:
        raise ValueError(f"{SELECTOR_COEF_ENV}={value!r}: lambda must be a number") from None
    if not coef >= 0:
        raise ValueError(f"{SELECTOR_COEF_ENV}={value!r}: lambda must be >= 0")
    return coef


def configure_from_env(environ: Mapping[str, str] | None = None) -> CreditConfig:
    """Apply lambda from :data:`SELECTOR_COEF_ENV` when it is set (:func:`env_selector_coef`); returns the config in force."""
    coef = env_selector_coef(environ)
    if coef is not None:
        configure(replace(_CONFIG[0], selector_coef=coef))
    return _CONFIG[0]


def encode_reads(spans: Sequence[ReadSpan], names: Sequence[str] | None = None) -> str:
    """One response's reads as JSON: ``[[category, name_start, name_end, call_start, call_end, name, served], ...]``."""
    names = [""] * len(spans) if names is None else list(names)
    return json.dumps([[r.category, r.name_start, r.name_end, r.call_start, r.call_end, n, r.served]
                       for r, n in zip(spans, names)])


def _entries(payload: str, where: str) -> list[list]:
    try:
        entries = json.loads(payload)
        if not isinstance(entries, list) or not all(isinstance(e, list) and len(e) in (5, 6, 7) for e in entries):
            raise ValueError("expected a list of 5- to 7-element lists")
        return entries
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: {READS_KEY!r} is not a JSON list of [category, name_start, name_end, "
                         f"call_start, call_end, name, served] ({err})") from None


def decode_reads(payload: str, where: str = "reads") -> list[ReadSpan]:
    """The spans of :func:`encode_reads`'s payload; a malformed payload is an error naming ``where``."""
    entries = _entries(payload, where)
    try:
        return [ReadSpan(str(e[0]), int(e[1]), int(e[2]), int(e[3]), int(e[4]), served=bool(e[6]) if len(e) == 7 else True)
                for e in entries]
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: {READS_KEY!r} is not a JSON list of [category, name_start, name_end, "
                         f"call_start, call_end, name, served] ({err})") from None


def decode_read_names(payload: str, where: str = "reads") -> list[str]:
    """The skill names of :func:`encode_reads`'s payload (stored form; ``""`` where none was recorded)."""
    return [str(e[5]) if len(e) >= 6 else "" for e in _entries(payload, where)]


def annotate(response_ids: Sequence[int], tokenizer, extra_info: Mapping[str, Any],
             fmt: AnyReadFormat = DEFAULT_READ_FORMAT) -> dict[str, str]:
    """``reward_extra_info`` entries for one response: its reads, categorised by the row's slate
    (two names of one key on it are refused, naming both as written)."""
    names, cats = extra_info.get("skill_names"), extra_info.get("skill_categories")
    if names is None or cats is None:
        raise KeyError("row extra_info needs 'skill_names' and 'skill_categories' (the slate) for SkillGate credit")
    slate = slate_categories(list(names), list(cats), where="extra_info slate")
    spans, read = read_spans(list(response_ids), tokenizer, slate, fmt)
    return {READS_KEY: encode_reads(spans, read)}


def reward_extra_info(item, tokenizer, fmt: AnyReadFormat = DEFAULT_READ_FORMAT) -> dict[str, str]:
    """What the SkillGate reward manager adds for one verl sample (a ``DataProtoItem``): its reads.

    The response is ``item.batch["responses"]`` up to its valid length (the response part
    of ``attention_mask``), the ids verl's naive manager decodes and scores, tool-inserted
    text included; the slate is ``item.non_tensor_batch["extra_info"]``.
    """
    response_ids = item.batch["responses"]
    n = int(item.batch["attention_mask"][-response_ids.shape[-1]:].sum())
    return annotate(response_ids[:n].tolist(), tokenizer, item.non_tensor_batch.get("extra_info", {}), fmt)


@contextlib.contextmanager
def read_annotation(reads: Sequence[Sequence[ReadSpan]], names: Sequence[Sequence[str]] | None = None) -> Iterator[None]:
    """Within this block the estimators use ``reads`` (one list per batch row) and, for utility, ``names``."""
    token = _READS.set((reads, names))
    try:
        yield
    finally:
        _READS.reset(token)


def _config_get(config: Any, key: str, default: Any) -> Any:
    if config is None:
        return default
    return config.get(key, default) if hasattr(config, "get") else getattr(config, key, default)


def _advantage(method: str, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray,
               config: Any, reads: Sequence[Sequence[ReadSpan]] | None,
               names: Sequence[Sequence[str]] | None) -> tuple[torch.Tensor, torch.Tensor]:
    if reads is None:
        reads, names = _READS.get() or (None, names)
    if reads is None:
        raise RuntimeError("skillgate estimator: no read annotation for this batch. verl's compute_advantage does not pass "
                           "one; run with trainer.v1.trainer_mode=skillgate_sync (skillgate_lib.integrations.verl_runner) "
                           "or call it inside skillgate_lib.integrations.verl.read_annotation(reads)")
    bs = token_level_rewards.shape[0]
    if len(reads) != bs or len(index) != bs:
        raise ValueError(f"skillgate estimator: batch has {bs} rows but {len(reads)} read annotations and {len(index)} uids")
    spec = methods.get(method)
    if spec.needs_skill_values and (names is None or any(n == "" for row in names for n in row)):
        raise ValueError(f"{method} estimator: the read annotation carries no skill names; "
                         "annotate reads with skillgate_lib.integrations.verl.annotate (names included)")
    _, group = np.unique(np.asarray(index, dtype=object).astype(str), return_inverse=True)
    cfg = replace(_CONFIG[0], scale_rewards=bool(_config_get(config, "norm_adv_by_std_in_grpo", True)))
    mask = response_mask.bool().cpu()
    rewards = token_level_rewards.sum(dim=-1).to(torch.float64).cpu()
    values = SKILL_VALUES if spec.needs_skill_values else None
    inputs = CreditInputs(rewards, torch.as_tensor(group, dtype=torch.long), mask, reads,
                          names if spec.needs_skill_values else None, values)
    credit, kept = assign_kept(spec.credit, inputs, cfg)
    if values is not None and kept is not None:  # after assign: a batch's credit sees earlier batches only
        values.update(executed_read_names(kept), kept.rewards)
    adv = (credit.advantages * credit.weights * int(mask.sum())).to(token_level_rewards.device, token_level_rewards.dtype)
    return adv, adv


def compute_skillgate_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray,
                                config: Any = None, reads: Sequence[Sequence[ReadSpan]] | None = None,
                                **_: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """verl estimator: ``(advantages, returns)``, ``(bs, L)``, = the kit's ``A * weights * N``.

    token_level_rewards: (bs, L) float, the outcome score on the last response token
    response_mask:       (bs, L), 1 on loss-bearing response tokens (0 on tool-inserted text)
    index:               (bs,) prompt uids; equal uids form a GRPO group
    config:              ``algorithm`` config (reads ``norm_adv_by_std_in_grpo``)
    reads:               bs lists of :class:`ReadSpan`; default: the enclosing :func:`read_annotation`
    """
    return _advantage(ESTIMATORS[ESTIMATOR], token_level_rewards, response_mask, index, config, reads, None)


def compute_utility_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray,
                              config: Any = None, reads: Sequence[Sequence[ReadSpan]] | None = None,
                              names: Sequence[Sequence[str]] | None = None, **_: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """verl estimator for the ``utility`` method: as :func:`compute_skillgate_advantage`, with each read's
    selector signal the running value (:data:`SKILL_VALUES`) of the skill it names (``names``: bs lists,
    parallel to ``reads``; default: the enclosing :func:`read_annotation`), updated after the batch."""
    return _advantage(ESTIMATORS["skillgate_utility"], token_level_rewards, response_mask, index, config, reads, names)


def register() -> None:
    """Put :func:`compute_skillgate_advantage` and :func:`compute_utility_advantage` in verl's estimator registry.

    Idempotent. Needs verl (whose package imports Ray; a missing one is an error with its
    ``pip install`` command); ``algorithm.adv_estimator=skillgate`` then finds the estimator in this process.
    """
    try:
        from verl.trainer.ppo.core_algos import register_adv_est
    except ModuleNotFoundError as err:
        raise missing(err, "skillgate_lib.integrations.verl.register") from err

    for name, fn in ((ESTIMATOR, compute_skillgate_advantage), ("skillgate_utility", compute_utility_advantage)):
        register_adv_est(name)(fn)
