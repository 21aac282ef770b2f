r"""Credit assigners: from a batch's rewards, read annotations and token masks to per-token credit.

Every assigner is a pure function ``(CreditInputs, CreditConfig) -> Credit`` registered
in :data:`ASSIGNERS`; adding one is one function and one registry line. Symbols:

* ``B`` trajectories in the batch, ``T`` response positions (padded), ``g(i)`` the
  prompt group of trajectory ``i``;
* ``R_i`` the outcome reward, ``A_i = (R_i - mean_{g(i)} R) / (std_{g(i)} R + eps)`` the
  group-normalised outcome advantage (``std`` optional, as in Dr. GRPO);
* the *read call* of a read action is all of its tokens (``<read> name </read>``); its
  *selector span* is the skill-name tokens inside it, ``k_j`` of them for read ``j``;
* a read's selector advantage ``s_j = x_j - mean_{reads in g} x`` centres a per-read
  signal ``x`` over every read action of its prompt group (no std division); the read is
  *active* when ``s_j != 0``;
* a group is *filtered* (dynamic sampling) when its raw rewards all agree,
  ``max_g R - min_g R <= 1e-12``; :func:`kept_groups` marks the trajectories of the others.

The policy loss the trainer minimises is ``sum_{i,t} weights[i,t] * surrogate(A[i,t])``:
``weights`` already holds each channel's normalisation and coefficient, so a
trajectory's share of loss weight on its selector tokens (Share) is read straight
off ``weights``. Where every group is filtered all weights are zero and the trainer
skips the optimizer step; ``Credit.groups_filtered`` counts the filtered groups.

=======================  ======================================================================  ========
assigner                 credit                                                                  filtered
=======================  ======================================================================  ========
``outcome``              broadcast GRPO: ``A_i`` on every response token, one token-mean         no
``skillgate``            the reference construction (:func:`skillgate`). Execution channel:      yes
                         ``A_i`` on every token but the read calls, averaged over those tokens.
                         Selector channel: on the name tokens of read ``j``, ``s_j`` with
                         ``x_j = u_j = 1`` iff its trajectory made exactly one read and it is
                         the oracle; weight ``lambda / (n_active * k_j)``, i.e. ``lambda``
                         shared equally by the batch's active reads, each spreading its share
                         over its name tokens. Supports disjoint (checked).
``skillgate_tokenmean``  ablation: as ``skillgate``, but the                                    no
                         selector channel is ``lambda`` averaged over *all* name tokens,
                         zero-advantage reads included, and no group is filtered
``utility``              Skill1-style utility credit: as ``skillgate``, with ``x_j`` the         yes
                         running-average outcome of the skill read ``j`` names
                         (:class:`SkillValues`, values from *before* this batch, a neutral
                         prior for unseen skills); only the executed (last served) read of
                         a trajectory is credited and centred
``selector_only``        ablation: ``skillgate``'s selector channel alone (execution weight 0)   yes
``skillgate_opener``     ablation: ``skillgate`` with each read's opener (``<read>``) in the        yes
                         selector channel beside its name, so the read/stop decision gets
                         the read's selector advantage (under the reference it gets none)
``skillgate_exec_read``  ablation: ``skillgate`` with the read call's opener and closer in the       yes
                         execution channel (only the name leaves it)
``masked_exec``          the execution channel alone (ablation: the read call gets no credit)    no
``shaped``               broadcast GRPO on ``R_i + bonus * 1[trajectory read the oracle]``       no
``selection_bc``         the ``selection_bc_rl`` ablation: the execution channel, plus a         no
                         supervised cross-entropy on the oracle's name with coefficient
                         ``lambda`` (the trainer builds that term; the assigner sets
                         ``bc_coef``). The method ``selection_bc`` itself is the reference's
                         supervised fine-tune (:func:`skillgate_lib.runs.train.sft_step`), no RL
=======================  ======================================================================  ========

The "filtered" column is the assigner's own filter (``CreditConfig.filter_groups``; off
for the ``*_nofilter`` ablations). The trainer applies the reference's dynamic sampling to
*every* RL arm before any assigner runs (:func:`skillgate_lib.runs.train.sample_batch`: groups
whose rewards agree are dropped and fresh prompts drawn), so with the default protocol no
assigner sees an all-equal group.

One module on purpose: every assigner beside the channel helpers it
shares and the table above, so their formulas are read and compared in one place.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
from torch import Tensor

TIE_TOL = 1e-12
"""Two rewards, or a selector advantage and zero, closer than this are equal (the reference's tolerance)."""


@dataclass(frozen=True)
class ReadSpan:
    """One read action, as token index ranges ``[start, end)`` into the response."""

    category: str
    name_start: int
    name_end: int
    call_start: int
    call_end: int
    served: bool = True
    """Whether the environment inserted the body (False past ``max_reads`` or off the slate)."""

    def __post_init__(self) -> None:
        if not (0 <= self.call_start <= self.name_start < self.name_end <= self.call_end):
            raise ValueError(
                f"read span: expected call_start <= name_start < name_end <= call_end, got "
                f"call [{self.call_start}, {self.call_end}) name [{self.name_start}, {self.name_end})"
            )


@dataclass
class SkillValues:
    r"""Per-skill utility carried across GRPO steps (the state of the ``utility`` assigner).

    ``value(s)`` is an exponential running average of the outcome of the trajectories
    that read skill ``s``. One update per batch and skill: with ``m_s`` the mean reward of
    the batch's trajectories that read ``s`` (a trajectory counts once however often it
    reads ``s``), ``v_s <- m_s`` at the skill's first observation (no pull towards the
    prior once a skill has been seen) and ``v_s <- decay * v_s + (1 - decay) * m_s``
    afterwards. A skill never observed has value ``prior``.

    The trainer owns one instance per run, passes it as ``CreditInputs.skill_values`` and
    calls :meth:`update` *after* :func:`assign`: a batch's name credit uses only earlier
    batches' outcomes (its own outcome already drives its execution channel).
    """

    decay: float = 0.9
    """Weight of the old value in each update, in ``[0, 1)``."""
    prior: float | None = None
    """Value of a skill no trajectory has read yet (in reward units); None (neutral): the running
    average outcome over every skill read so far, so an unseen skill is neither favoured nor penalised."""
    baseline: float | None = None
    """Running average (same decay) of the batch mean outcome over all reads: the neutral prior."""
    values: dict[str, float] = field(default_factory=dict)
    """Skill name -> current value (plain floats: saved with a checkpoint as they are)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.decay < 1.0:
            raise ValueError(f"SkillValues.decay: expected 0 <= decay < 1, got {self.decay}")

    def value(self, name: str) -> float:
        """Current utility of skill ``name`` (the prior if never read)."""
        if name in self.values:
            return self.values[name]
        if self.prior is not None:
            return self.prior
        return 0.0 if self.baseline is None else self.baseline

    def update(self, names_per_traj: Sequence[Sequence[str]], rewards: Sequence[float] | Tensor) -> None:
        """Fold one batch in: ``names_per_traj[i]`` the skills trajectory ``i`` read, ``rewards[i]`` its outcome."""
        rewards = [float(r) for r in (rewards.tolist() if isinstance(rewards, Tensor) else rewards)]
        if len(names_per_traj) != len(rewards):
            raise ValueError(f"SkillValues.update: {len(names_per_traj)} name lists for {len(rewards)} rewards")
        outcomes: dict[str, list[float]] = {}
        for names, r in zip(names_per_traj, rewards):
            for name in dict.fromkeys(names):
                outcomes.setdefault(name, []).append(r)
        seen = [r for names, r in zip(names_per_traj, rewards) if names]
        if seen:
            m = sum(seen) / len(seen)
            self.baseline = m if self.baseline is None else self.decay * self.baseline + (1 - self.decay) * m
        for name, rs in outcomes.items():
            m = sum(rs) / len(rs)
            self.values[name] = m if name not in self.values else self.decay * self.values[name] + (1 - self.decay) * m


@dataclass
class CreditInputs:
    """A batch of trajectories, grouped by prompt.

    rewards:       (B,) float, outcome reward per trajectory
    group:         (B,) long, prompt-group index per trajectory
    response_mask: (B, T) bool, True on policy (loss-bearing) tokens; environment text is False
    reads:         B lists of :class:`ReadSpan`, in response order
    read_names:    B lists of the skill name each read names, parallel to ``reads`` (``utility`` needs it)
    skill_values:  the run's :class:`SkillValues`, before this batch's update (``utility`` needs it)
    """

    rewards: Tensor
    group: Tensor
    response_mask: Tensor
    reads: Sequence[Sequence[ReadSpan]]
    read_names: Sequence[Sequence[str]] | None = None
    skill_values: SkillValues | None = None

    def __post_init__(self) -> None:
        B = self.rewards.shape[0]
        if self.group.shape != (B,) or self.response_mask.dim() != 2 or self.response_mask.shape[0] != B:
            raise ValueError(
                f"credit inputs: rewards {tuple(self.rewards.shape)}, group {tuple(self.group.shape)} and "
                f"response_mask {tuple(self.response_mask.shape)} must agree on B"
            )
        if len(self.reads) != B:
            raise ValueError(f"credit inputs: reads has {len(self.reads)} entries for B={B} trajectories")
        T = self.response_mask.shape[1]
        for i, spans in enumerate(self.reads):
            for r in spans:
                if r.call_end > T:
                    raise ValueError(f"credit inputs: trajectory {i}: read call ends at {r.call_end} > T={T}")
        if self.read_names is not None:
            if len(self.read_names) != B:
                raise ValueError(f"credit inputs: read_names has {len(self.read_names)} entries for B={B} trajectories")
            for i, (names, spans) in enumerate(zip(self.read_names, self.reads)):
                if len(names) != len(spans):
                    raise ValueError(f"credit inputs: trajectory {i}: {len(names)} read_names for {len(spans)} reads")


@dataclass(frozen=True)
class CreditConfig:
    """Hyperparameters the assigners read (each has a paper default)."""

    selector_coef: float = 0.2
    """lambda: weight of the selector channel (SkillGate) or the selection BC loss."""
    shaping_bonus: float = 0.5
    """Reward bonus for reading the oracle at least once (``shaped``)."""
    scale_rewards: bool = True
    """Divide outcome advantages by the group std (GRPO); False gives Dr. GRPO's centring only."""
    eps: float = 1e-4
    """Added to the group std."""
    filter_groups: bool = True
    """Give no weight to prompt groups whose rewards all agree (SkillGate's dynamic sampling); False: the ablation."""


@dataclass
class Credit:
    """What an assigner returns.

    advantages:      (B, T) float, the advantage in each token's policy-gradient surrogate
    weights:         (B, T) float, each token's loss weight (channel normalisation x coefficient);
                     zero off the support of every channel
    adv_exec:        (B,) float, the execution-channel (or broadcast) advantage, for logging
                     (0 in filtered groups)
    read_adv:        B lists, the advantage applied to each read's selector tokens, for logging
                     (0 for reads in filtered groups)
    bc_coef:         coefficient of the trainer's selection-BC term (0 = none)
    groups_filtered: prompt groups given no weight by dynamic sampling (all rewards equal)
    """

    advantages: Tensor
    weights: Tensor
    adv_exec: Tensor
    read_adv: list[list[float]]
    bc_coef: float = 0.0
    groups_filtered: int = 0

    def selector_share(self, inputs: CreditInputs) -> Tensor:
        """(B,) fraction of each trajectory's loss weight on its skill-name tokens."""
        sel = selector_mask(inputs)
        total = self.weights.sum(dim=1)
        on_sel = (self.weights * sel).sum(dim=1)
        return torch.where(total > 0, on_sel / total.clamp_min(1e-30), torch.zeros_like(total))


def group_advantage(rewards: Tensor, group: Tensor, scale: bool = True, eps: float = 1e-4) -> Tensor:
    """(B,) ``(R - mean_g R) / (std_g R + eps)``; all-equal groups get exactly 0.

    ``std`` is the unbiased group standard deviation, as in TRL's GRPOTrainer.
    """
    rewards = rewards.to(torch.float64)
    _, inverse, counts = torch.unique(group, return_inverse=True, return_counts=True)
    sums = torch.zeros(len(counts), dtype=rewards.dtype).index_add_(0, inverse, rewards)
    mean = (sums / counts)[inverse]
    centred = rewards - mean
    if not scale:
        return centred
    sq = torch.zeros(len(counts), dtype=rewards.dtype).index_add_(0, inverse, centred**2)
    std = torch.sqrt(sq / (counts - 1).clamp_min(1))[inverse]
    return centred / (std + eps)


def _keep(inputs: CreditInputs) -> tuple[Tensor, int]:
    """(B,) bool kept-group mask and the number of filtered groups."""
    rewards = inputs.rewards.to(torch.float64)
    _, inverse, counts = torch.unique(inputs.group, return_inverse=True, return_counts=True)
    hi = torch.full((len(counts),), -torch.inf, dtype=torch.float64).scatter_reduce(0, inverse, rewards, "amax")
    lo = torch.full((len(counts),), torch.inf, dtype=torch.float64).scatter_reduce(0, inverse, rewards, "amin")
    kept = (hi - lo) > TIE_TOL
    return kept[inverse], int((~kept).sum())


def kept_groups(inputs: CreditInputs) -> Tensor:
    """(B,) bool: True where trajectory ``i``'s prompt group survives dynamic sampling.

    A group is filtered when its raw rewards all agree (``max - min <= 1e-12``), whatever
    its reads: the reference's ``keep_raw_task_reward_nonzero_std``. A group of one is
    always filtered.
    """
    return _keep(inputs)[0]


def _span_mask(inputs: CreditInputs, start: str, end: str) -> Tensor:
    mask = torch.zeros_like(inputs.response_mask)
    for i, spans in enumerate(inputs.reads):
        for r in spans:
            mask[i, getattr(r, start) : getattr(r, end)] = True
    return mask & inputs.response_mask


def selector_mask(inputs: CreditInputs) -> Tensor:
    """(B, T) bool: the skill-name tokens of every read."""
    return _span_mask(inputs, "name_start", "name_end")


def read_call_mask(inputs: CreditInputs) -> Tensor:
    """(B, T) bool: every token of every read call (name included)."""
    return _span_mask(inputs, "call_start", "call_end")


def check_disjoint(exec_mask: Tensor, sel_mask: Tensor) -> None:
    """Raise if any token is in both channels' supports (SkillGate's construction forbids it)."""
    both = exec_mask & sel_mask
    if both.any():
        i, t = (int(x) for x in both.nonzero()[0])
        raise ValueError(
            f"channel supports overlap at {int(both.sum())} token(s), first at trajectory {i}, position {t}: "
            "a token may be in the execution channel or the selector channel, not both"
        )


def _token_mean(mask: Tensor, coef: float = 1.0) -> Tensor:
    """Weights averaging over the ``True`` tokens of ``mask`` (all zero if there are none)."""
    n = int(mask.sum())
    return mask.to(torch.float64) * (coef / n) if n else torch.zeros(mask.shape, dtype=torch.float64)


def _broadcast(adv: Tensor, mask: Tensor) -> Tensor:
    return adv[:, None] * mask


def outcome(inputs: CreditInputs, cfg: CreditConfig) -> Credit:
    """Broadcast GRPO: every response token gets its trajectory's ``A_i``; one token-mean."""
    a = group_advantage(inputs.rewards, inputs.group, cfg.scale_rewards, cfg.eps)
    mask = inputs.response_mask
    return Credit(_broadcast(a, mask), _token_mean(mask), a, [[float(a[i])] * len(r) for i, r in enumerate(inputs.reads)])


def _execution_channel(inputs: CreditInputs, cfg: CreditConfig, keep: Tensor | None = None,
                       exclude: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(A (B,), support (B, T), advantages, weights)``: ``A_i`` off the read calls, one token-mean.

    With ``keep``, trajectories of filtered groups leave the channel and the mean is over
    the kept groups' tokens only. ``exclude`` (default: every read call's tokens) is what the
    channel leaves out.
    """
    a = group_advantage(inputs.rewards, inputs.group, cfg.scale_rewards, cfg.eps)
    exec_mask = inputs.response_mask & ~(read_call_mask(inputs) if exclude is None else exclude)
    if keep is not None:
        a = torch.where(keep, a, torch.zeros_like(a))
        exec_mask = exec_mask & keep[:, None]
    return a, exec_mask, _broadcast(a, exec_mask), _token_mean(exec_mask)


def read_utilities(inputs: CreditInputs) -> list[list[float]]:
    """``u_j = 1`` iff read ``j``'s trajectory made exactly one read and it is the oracle."""
    return [[1.0 if len(spans) == 1 and r.category == "oracle" else 0.0 for r in spans] for spans in inputs.reads]


def _centre_over_group_reads(x: list[list[float]], group: Tensor) -> list[list[float]]:
    """``x_j - mean(x)`` over all read actions in the prompt group (no std division).

    Results within :data:`TIE_TOL` of zero are exactly zero: equal float utilities can
    average to a value one ulp away from each, and such a read must not count as active.
    """
    groups = group.tolist()
    totals: dict[int, list[float]] = {}
    for g, xs in zip(groups, x):
        acc = totals.setdefault(g, [0.0, 0.0])
        acc[0] += sum(xs)
        acc[1] += len(xs)
    centred = [[v - totals[g][0] / totals[g][1] for v in xs] for g, xs in zip(groups, x)]
    return [[0.0 if abs(s) <= TIE_TOL else s for s in row] for row in centred]


def selector_advantages(inputs: CreditInputs) -> list[list[float]]:
    """``u_j - mean(u)`` over all read actions in the prompt group (no std division)."""
    return _centre_over_group_reads(read_utilities(inputs), inputs.group)


def utility_advantages(inputs: CreditInputs) -> list[list[float]]:
    """``V(name_j) - mean(V)`` over the executed reads of the prompt group (``V`` from ``inputs.skill_values``); 0 for other reads.

    A trajectory's executed read is its last read on the slate (:func:`executed_read`): the
    body its step lines follow, so the only read its outcome says anything about.
    """
    for name in ("read_names", "skill_values"):
        if getattr(inputs, name) is None:
            raise ValueError(f"credit 'utility': CreditInputs.{name} is None; the utility assigner needs "
                             "read_names (the skill each read names, parallel to reads) and skill_values "
                             "(the run's SkillValues, updated after each assign)")
    executed = [executed_read(spans) for spans in inputs.reads]
    values = [[inputs.skill_values.value(n) for n in names[e:e + 1]] if e is not None else []
              for names, e in zip(inputs.read_names, executed)]
    centred = _centre_over_group_reads(values, inputs.group)
    return [[centred[i][0] if j == e else 0.0 for j in range(len(spans))]
            for i, (spans, e) in enumerate(zip(inputs.reads, executed))]


def executed_read(spans: Sequence[ReadSpan]) -> int | None:
    """Index of the read whose body execution follows (the last one whose body was served), or None."""
    served = [j for j, r in enumerate(spans) if r.served and r.category != "invalid"]
    return served[-1] if served else None


def executed_read_names(inputs: CreditInputs) -> list[list[str]]:
    """Per trajectory, the name of its executed read (none if no read was served): what ``utility`` learns from."""
    out = []
    for spans, names in zip(inputs.reads, inputs.read_names):
        j = executed_read(spans)
        out.append([] if j is None else [names[j]])
    return out


def _action_share(inputs: CreditInputs, sel_adv: list[list[float]], coef: float) -> Tensor:
    """(B, T) selector weights: ``coef`` shared equally by the active reads, each spread over its name tokens."""
    weights = torch.zeros(inputs.response_mask.shape, dtype=torch.float64)
    active = [(i, j, r) for i, spans in enumerate(inputs.reads) for j, (r, s) in enumerate(zip(spans, sel_adv[i])) if s != 0.0]
    for i, j, r in active:
        name = slice(r.name_start, r.name_end)
        if not inputs.response_mask[i, name].all():
            raise ValueError(f"selector channel: trajectory {i}, read {j}: name tokens [{r.name_start}, {r.name_end}) "
                             "are not all in response_mask; an active read's name must be policy tokens")
        if (weights[i, name] != 0).any():
            raise ValueError(f"selector channel: trajectory {i}, read {j}: name tokens [{r.name_start}, {r.name_end}) "
                             "overlap another read's name")
        weights[i, name] = coef / (len(active) * (r.name_end - r.name_start))
    return weights


def _reference_two_channels(inputs: CreditInputs, cfg: CreditConfig, sel_adv: list[list[float]],
                            exec_exclude: Tensor | None = None) -> Credit:
    """SkillGate's construction for any per-read selector advantages ``sel_adv`` (see :func:`skillgate`);
    ``exec_exclude``: what the execution channel leaves out (default: every read call)."""
    keep, n_filtered = _keep(inputs) if cfg.filter_groups else (torch.ones_like(inputs.group, dtype=torch.bool), 0)
    a, exec_mask, adv, weights = _execution_channel(inputs, cfg, keep, exec_exclude)
    check_disjoint(exec_mask, selector_mask(inputs))
    sel_adv = [row if k else [0.0] * len(row) for k, row in zip(keep.tolist(), sel_adv)]
    for i, spans in enumerate(inputs.reads):
        for r, s in zip(spans, sel_adv[i]):
            adv[i, r.name_start : r.name_end] = s
    weights = weights + _action_share(inputs, sel_adv, cfg.selector_coef)
    return Credit(adv, weights, a, sel_adv, groups_filtered=n_filtered)


def skillgate(inputs: CreditInputs, cfg: CreditConfig) -> Credit:
    """SkillGate as the public reference implements it: two disjoint channels, one update.

    Each rule and where it comes from in DeepExperience/SkillGate,
    ``Relax/examples/agent_bench/``:

    1. The execution (task) channel drops every token of each read call
       (``selector_action_credit.build_train_fields``: ``task_mask[index] = 0`` for each
       ``call_token_indices``), and gives the rest ``A_i``.
    2. A read's utility is ``u_j = 1`` iff its trajectory made exactly one read and it is the
       oracle; its selector advantage is ``u_j - mean u`` over every read action of the
       prompt group, no std division (``selector_clean_oracle_action_credit.
       annotate_group_selector_advantages``).
    3. The selector channel's weight is shared equally among the batch's *active* reads
       (``s_j != 0``), each spreading its share evenly over its name tokens; zero-advantage
       reads get no weight (``build_train_fields``: ``selector_scale = base_total /
       active_actions``, ``per_token_weight = selector_scale / len(indices)``, reads with
       ``advantage == 0.0`` skipped).
    4. Each channel carries the loss mass of the plain loss: ``task_scale = base_total /
       task_total`` and a selector total of ``base_total`` (``build_train_fields``), here
       divided by ``base_total`` (token-mean) so each sums to 1; the selector channel is
       then scaled by ``lambda = 0.2`` (``selector_action_grpo_loss``: ``loss = task_pg_loss
       + selector_coef * selector_pg_loss``, ``RELAX_SELECTOR_ACTION_LOSS_COEF`` default
       0.2). A token in both supports raises (both files check it).
    5. Prompt groups whose raw task rewards all agree are filtered out before the update,
       whatever their selector signal (``keep_raw_task_reward_nonzero_std``: drop when
       ``max - min <= 1e-12``). The weights above are built from the kept groups only,
       so here every token of a filtered group gets weight 0 and both channels' means
       (and the active-read count) run over the kept groups.

    The refill of a filtered batch with freshly sampled groups (over-sampling) is the
    trainer's (:func:`skillgate_lib.runs.train.sample_batch`), so with the default protocol this
    filter finds nothing left to drop. Where the kit differs: the reference's ``A_i`` uses
    ``std + 1e-6``, the kit ``std + cfg.eps``.
    """
    return _reference_two_channels(inputs, cfg, selector_advantages(inputs))


def skillgate_tokenmean(inputs: CreditInputs, cfg: CreditConfig) -> Credit:
    """Ablation: ``lambda`` averaged over every name token, no filter.

    Zero-advantage reads keep their share of the selector mean (diluting the active
    reads'), and all-equal groups stay in both channels' means.
    """
    a, exec_mask, adv, weights = _execution_channel(inputs, cfg)
    sel_mask = selector_mask(inputs)
    check_disjoint(exec_mask, sel_mask)
    sel_adv = selector_advantages(inputs)
    for i, spans in enumerate(inputs.reads):
        for r, s in zip(spans, sel_adv[i]):
            adv[i, r.name_start : r.name_end] = s
    weights = weights + _token_mean(sel_mask, cfg.selector_coef)
    return Credit(adv, weights, a, sel_adv)


def utility(inputs: CreditInputs, cfg: CreditConfig) -> Credit:
    """Skill1-style utility credit: :func:`skillgate` with a low-frequency per-skill signal on the names.

    Execution tokens get ``A_i`` with the read calls out of the channel (as ``masked_exec``).
    Read ``j``'s name tokens get ``V(name_j) - mean V`` over the group's reads, where ``V`` is
    the per-skill running-average outcome in ``inputs.skill_values`` *before* this batch's
    update (the trainer calls ``SkillValues.update`` after ``assign``). Weights, the
    active-read sharing, ``lambda`` and the dynamic-sampling filter are exactly
    :func:`skillgate`'s, so the two differ only in the selector signal. Only the executed read
    (the last one served: execution follows its body) is credited; earlier reads get 0, and the
    trainer updates ``V`` from executed reads only (:func:`executed_read_names`). An unseen skill
    starts at the running average outcome (a neutral prior). Raises ValueError if
    ``read_names`` or ``skill_values`` is missing.
    """
    return _reference_two_channels(inputs, cfg, utility_advantages(inputs))


def masked_exec(inputs: CreditInputs, cfg: CreditConfig) -> Credit:
    """The execution channel alone: the read call is out of the loss, names get no credit."""
    a, _, adv, weights = _execution_channel(inputs, cfg)
    return Credit(adv, weights, a, [[0.0] * len(r) for r in inputs.reads])


def shaped(inputs: CreditInputs, cfg: CreditConfig) -> Credit:
    """Broadcast GRPO on the shaped reward ``R + bonus * 1[read the oracle at least once]``."""
    read_oracle = torch.tensor([any(r.category == "oracle" for r in spans) for spans in inputs.reads], dtype=torch.float64)
    shaped_inputs = CreditInputs(inputs.rewards.to(torch.float64) + cfg.shaping_bonus * read_oracle, inputs.group,
                                 inputs.response_mask, inputs.reads)
    return outcome(shaped_inputs, cfg)


def selector_only(inputs: CreditInputs, cfg: CreditConfig) -> Credit:
    """Ablation: :func:`skillgate`'s selector channel alone (execution weight 0), to test what it can teach."""
    credit = skillgate(inputs, cfg)
    credit.weights = credit.weights * selector_mask(inputs)
    return credit


def skillgate_opener(inputs: CreditInputs, cfg: CreditConfig) -> Credit:
    """Ablation: :func:`skillgate` with each read's opener token in its selector span.

    Under the reference partition the ``<read>`` token, where the policy decides to read at
    all (or to read again), is out of both channels: the read call is dropped from the
    execution channel and the selector channel covers the name only. Here read ``j``'s
    selector advantage ``s_j`` also lands on its opener, and its share of ``lambda`` is spread
    over ``k_j + 1`` tokens. Everything else (utilities, active-read sharing, the filter) is
    :func:`skillgate`'s. The logged Share stays the name tokens' (``Credit.selector_share``).
    """
    widened = dataclasses.replace(inputs, reads=[[dataclasses.replace(r, name_start=r.call_start) for r in spans]
                                                 for spans in inputs.reads])
    return skillgate(widened, cfg)


def skillgate_exec_read(inputs: CreditInputs, cfg: CreditConfig) -> Credit:
    """Ablation: :func:`skillgate` with the read call's tokens other than the name in the execution channel.

    The reference drops every token of a read call from the execution channel, so the decision
    to read (the opener) and the closer get no outcome credit at all, which ``masked_exec``
    measured as a success deficit. Here those tokens keep ``A_i`` in the execution channel, as
    in outcome-only GRPO; the name tokens stay in the selector channel alone (supports disjoint,
    checked). Everything else is :func:`skillgate`'s.
    """
    return _reference_two_channels(inputs, cfg, selector_advantages(inputs), exec_exclude=selector_mask(inputs))


def selection_bc(inputs: CreditInputs, cfg: CreditConfig) -> Credit:
    """The execution channel, plus the trainer's supervised loss on the oracle name (``bc_coef``)."""
    credit = masked_exec(inputs, cfg)
    credit.bc_coef = cfg.selector_coef
    return credit


Assigner = Callable[[CreditInputs, CreditConfig], Credit]

#: Name -> assigner. The CLI's ``--credit`` and notebook 03 choose from these.
ASSIGNERS: dict[str, Assigner] = {
    "outcome": outcome,
    "skillgate": skillgate,
    "skillgate_tokenmean": skillgate_tokenmean,
    "utility": utility,
    "masked_exec": masked_exec,
    "shaped": shaped,
    "selection_bc": selection_bc,
    "selector_only": selector_only,
    "skillgate_opener": skillgate_opener,
    "skillgate_exec_read": skillgate_exec_read,
}


def assign(name: str, inputs: CreditInputs, cfg: CreditConfig | None = None) -> Credit:
    """Run the assigner registered as ``name``."""
    try:
        fn = ASSIGNERS[name]
    except KeyError:
        raise ValueError(f"unknown credit assigner {name!r}; choose one of: {', '.join(ASSIGNERS)}") from None
    return fn(inputs, cfg or CreditConfig())
