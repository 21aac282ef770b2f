r"""Credit assigners: from a batch's rewards, read annotations and token masks to per-token credit.

Every assigner is a pure function ``(CreditInputs, CreditConfig) -> Credit`` registered
in :data:`ASSIGNERS`; adding one is one function and one registry line. Symbols:

* ``B`` trajectories in the batch, ``T`` response positions (padded), ``g(i)`` the
  prompt group of trajectory ``i``;
* ``R_i`` the outcome reward, ``A_i = (R_i - mean_{g(i)} R) / (std_{g(i)} R + eps)`` the
  group-normalised outcome advantage (``std`` optional, as in Dr. GRPO);
* the *read call* of a read action is all of its tokens (``<read> name </read>``); its
  *selector span* is the skill-name tokens inside it.

The policy loss the trainer minimises is ``sum_{i,t} weights[i,t] * surrogate(A[i,t])``:
``weights`` already holds each channel's normalisation and coefficient, so a
trajectory's share of loss weight on its selector tokens (Share) is read straight
off ``weights``.

========================  =========================================================================
assigner                  credit
========================  =========================================================================
``outcome``               broadcast GRPO: ``A_i`` on every response token, one token-mean
``skillgate``             execution channel: ``A_i`` on every token but the read calls, averaged
                          over those tokens; selector channel: on the name tokens of read ``j``,
                          ``u_j - mean_{reads in g} u`` with ``u_j = 1`` iff its trajectory made
                          exactly one read and it is the oracle; averaged over name tokens, times
                          ``lambda``. Supports must be disjoint (checked).
``masked_exec``           the execution channel alone (ablation: the read call gets no credit)
``shaped``                broadcast GRPO on ``R_i + bonus * 1[trajectory read the oracle]``
``selection_bc``          the execution channel, plus a supervised cross-entropy on the oracle's
                          name with coefficient ``lambda`` (the trainer builds that term; the
                          assigner sets ``bc_coef``)
========================  =========================================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import Tensor


@dataclass(frozen=True)
class ReadSpan:
    """One read action, as token index ranges ``[start, end)`` into the response."""

    category: str
    name_start: int
    name_end: int
    call_start: int
    call_end: int

    def __post_init__(self) -> None:
        if not (0 <= self.call_start <= self.name_start < self.name_end <= self.call_end):
            raise ValueError(
                f"read span: expected call_start <= name_start < name_end <= call_end, got "
                f"call [{self.call_start}, {self.call_end}) name [{self.name_start}, {self.name_end})"
            )


@dataclass
class CreditInputs:
    """A batch of trajectories, grouped by prompt.

    rewards:       (B,) float, outcome reward per trajectory
    group:         (B,) long, prompt-group index per trajectory
    response_mask: (B, T) bool, True on policy (loss-bearing) tokens; environment text is False
    reads:         B lists of :class:`ReadSpan`, in response order
    """

    rewards: Tensor
    group: Tensor
    response_mask: Tensor
    reads: Sequence[Sequence[ReadSpan]]

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


@dataclass
class Credit:
    """What an assigner returns.

    advantages: (B, T) float, the advantage in each token's policy-gradient surrogate
    weights:    (B, T) float, each token's loss weight (channel normalisation x coefficient);
                zero off the support of every channel
    adv_exec:   (B,) float, the execution-channel (or broadcast) advantage, for logging
    read_adv:   B lists, the advantage applied to each read's selector tokens, for logging
    bc_coef:    coefficient of the trainer's selection-BC term (0 = none)
    """

    advantages: Tensor
    weights: Tensor
    adv_exec: Tensor
    read_adv: list[list[float]]
    bc_coef: float = 0.0

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


def _execution_channel(inputs: CreditInputs, cfg: CreditConfig) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    a = group_advantage(inputs.rewards, inputs.group, cfg.scale_rewards, cfg.eps)
    exec_mask = inputs.response_mask & ~read_call_mask(inputs)
    return a, exec_mask, _broadcast(a, exec_mask), _token_mean(exec_mask)


def read_utilities(inputs: CreditInputs) -> list[list[float]]:
    """``u_j = 1`` iff read ``j``'s trajectory made exactly one read and it is the oracle."""
    return [[1.0 if len(spans) == 1 and r.category == "oracle" else 0.0 for r in spans] for spans in inputs.reads]


def selector_advantages(inputs: CreditInputs) -> list[list[float]]:
    """``u_j - mean(u)`` over all read actions in the prompt group (no std division)."""
    u = read_utilities(inputs)
    groups = inputs.group.tolist()
    totals: dict[int, list[float]] = {}
    for g, us in zip(groups, u):
        acc = totals.setdefault(g, [0.0, 0.0])
        acc[0] += sum(us)
        acc[1] += len(us)
    return [[x - totals[g][0] / totals[g][1] for x in us] for g, us in zip(groups, u)]


def skillgate(inputs: CreditInputs, cfg: CreditConfig) -> Credit:
    """Two disjoint channels: outcome credit on execution tokens, action-local utility on names."""
    a, exec_mask, adv, weights = _execution_channel(inputs, cfg)
    sel_mask = selector_mask(inputs)
    check_disjoint(exec_mask, sel_mask)
    sel_adv = selector_advantages(inputs)
    for i, spans in enumerate(inputs.reads):
        for r, s in zip(spans, sel_adv[i]):
            adv[i, r.name_start : r.name_end] = s
    weights = weights + _token_mean(sel_mask, cfg.selector_coef)
    return Credit(adv, weights, a, sel_adv)


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
    "masked_exec": masked_exec,
    "shaped": shaped,
    "selection_bc": selection_bc,
}


def assign(name: str, inputs: CreditInputs, cfg: CreditConfig | None = None) -> Credit:
    """Run the assigner registered as ``name``."""
    try:
        fn = ASSIGNERS[name]
    except KeyError:
        raise ValueError(f"unknown credit assigner {name!r}; choose one of: {', '.join(ASSIGNERS)}") from None
    return fn(inputs, cfg or CreditConfig())
