"""Each credit assigner on hand-built groups, with the per-token numbers worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from skillgate_lib import credit
from skillgate_lib.credit import CreditConfig, CreditInputs, ReadSpan

T = 10


def _read(cat, name_start, call_start=None, call_end=None):
    call_start = name_start - 1 if call_start is None else call_start
    return ReadSpan(cat, name_start, name_start + 1, call_start, name_start + 2 if call_end is None else call_end)


def _inputs(rewards, reads, lengths=None, group=None):
    B = len(rewards)
    lengths = lengths or [T] * B
    mask = torch.zeros(B, T, dtype=torch.bool)
    for i, n in enumerate(lengths):
        mask[i, :n] = True
    group = torch.zeros(B, dtype=torch.long) if group is None else torch.tensor(group)
    return CreditInputs(torch.tensor(rewards, dtype=torch.float64), group, mask, reads)


def _flat(nested):
    return [x for row in nested for x in row]


# Group of 4: oracle read that failed, misleading read that succeeded, a clean oracle win, no read.
GROUP = dict(
    rewards=[0.0, 1.0, 1.0, 0.0],
    reads=[[_read("oracle", 1)], [_read("misleading", 1)], [_read("oracle", 1)], []],
)
NO_STD = CreditConfig(scale_rewards=False)


def test_group_advantage_centres_and_scales():
    a = credit.group_advantage(torch.tensor([0.0, 1.0, 1.0, 0.0]), torch.zeros(4, dtype=torch.long), scale=True, eps=0.0)
    std = math.sqrt(4 * 0.25 / 3)  # unbiased
    torch.testing.assert_close(a, torch.tensor([-0.5, 0.5, 0.5, -0.5], dtype=torch.float64) / std)


def test_group_advantage_is_per_group():
    a = credit.group_advantage(torch.tensor([1.0, 0.0, 5.0, 5.0]), torch.tensor([0, 0, 1, 1]), scale=False)
    assert a.tolist() == [0.5, -0.5, 0.0, 0.0]


def test_all_equal_rewards_give_zero_outcome_credit():
    inp = _inputs([1.0, 1.0], [[_read("oracle", 1)], [_read("misleading", 1)]])
    c = credit.assign("outcome", inp)
    assert torch.all(c.advantages == 0) and c.read_adv == [[0.0], [0.0]]


def test_outcome_broadcasts_one_advantage_on_every_token():
    inp = _inputs(**GROUP, lengths=[10, 10, 5, 5])
    c = credit.assign("outcome", inp, NO_STD)
    assert c.advantages[0, :10].tolist() == [-0.5] * 10
    assert c.advantages[2, :5].tolist() == [0.5] * 5 and c.advantages[2, 5:].tolist() == [0.0] * 5
    torch.testing.assert_close(c.weights.sum(), torch.tensor(1.0, dtype=torch.float64))
    assert c.weights[0, 0] == pytest.approx(1 / 30)
    # Share = k / L: one name token in 10 or in 5 policy tokens.
    torch.testing.assert_close(c.selector_share(inp), torch.tensor([0.1, 0.1, 0.2, 0.0], dtype=torch.float64))
    # The failed oracle read is pushed down, the lucky misleading read pushed up: the wrong signs.
    assert c.read_adv == [[-0.5], [0.5], [0.5], []]


def test_skillgate_two_channels_by_hand():
    inp = _inputs(**GROUP)
    c = credit.assign("skillgate", inp, NO_STD)
    # Utilities: read 0 (single oracle) 1, read 1 (misleading) 0, read 2 (single oracle) 1; mean 2/3.
    assert _flat(c.read_adv) == pytest.approx([1 / 3, -2 / 3, 1 / 3])
    assert c.advantages[0, 1] == pytest.approx(1 / 3)  # the failed oracle read is credited positively
    assert c.advantages[1, 1] == pytest.approx(-2 / 3)
    # Read-call tokens other than the name (positions 0 and 2) carry no weight at all.
    assert c.weights[0, 0] == 0 and c.weights[0, 2] == 0 and c.advantages[0, 0] == 0
    # Execution tokens: outcome advantage, averaged over 3*7 + 10 = 31 tokens.
    assert c.advantages[0, 5] == pytest.approx(-0.5) and c.weights[0, 5] == pytest.approx(1 / 31)
    # Selector channel: lambda averaged over its 3 name tokens.
    assert c.weights[0, 1] == pytest.approx(0.2 / 3)
    torch.testing.assert_close(c.weights.sum(), torch.tensor(1.2, dtype=torch.float64))


def test_skillgate_multiple_reads_get_zero_utility():
    reads = [[_read("oracle", 1), _read("misleading", 4)], [_read("oracle", 1)]]
    c = credit.assign("skillgate", _inputs([1.0, 1.0], reads), NO_STD)
    # u = [0, 0, 1]; mean over the group's three read actions is 1/3.
    assert [len(r) for r in c.read_adv] == [2, 1]
    assert _flat(c.read_adv) == pytest.approx([-1 / 3, -1 / 3, 2 / 3])
    assert torch.all(c.advantages[:, 5:] == 0)  # equal rewards: no execution credit


def test_skillgate_no_reads_is_pure_outcome_on_execution():
    inp = _inputs([1.0, 0.0], [[], []])
    c = credit.assign("skillgate", inp, NO_STD)
    o = credit.assign("outcome", inp, NO_STD)
    torch.testing.assert_close(c.advantages, o.advantages)
    torch.testing.assert_close(c.weights, o.weights)


def test_wrong_read_is_credited_negatively_even_when_lucky():
    reads = [[_read("irrelevant", 1)], [_read("oracle", 1)]]
    c = credit.assign("skillgate", _inputs([1.0, 0.0], reads), NO_STD)
    assert c.read_adv == [[-0.5], [0.5]]


def test_overlapping_supports_raise():
    exec_mask = torch.tensor([[True, True, False]])
    sel_mask = torch.tensor([[False, True, True]])
    with pytest.raises(ValueError, match="overlap at 1 token.*trajectory 0, position 1"):
        credit.check_disjoint(exec_mask, sel_mask)


def test_masked_exec_drops_the_read_call():
    c = credit.assign("masked_exec", _inputs(**GROUP), NO_STD)
    assert torch.all(c.weights[:3, 0:3] == 0) and torch.all(c.advantages[:3, 0:3] == 0)
    assert c.weights[3, 0] > 0  # a trajectory without reads keeps every token
    assert c.read_adv == [[0.0], [0.0], [0.0], []] and c.bc_coef == 0


def test_shaped_adds_bonus_for_reading_the_oracle():
    cfg = CreditConfig(scale_rewards=False, shaping_bonus=0.5)
    c = credit.assign("shaped", _inputs(**GROUP), cfg)
    # shaped rewards [0.5, 1, 1.5, 0], mean 0.75
    assert [round(x, 6) for x in c.adv_exec.tolist()] == [-0.25, 0.25, 0.75, -0.75]


def test_selection_bc_sets_the_supervised_coefficient():
    c = credit.assign("selection_bc", _inputs(**GROUP), CreditConfig(selector_coef=0.3))
    assert c.bc_coef == 0.3
    torch.testing.assert_close(c.advantages, credit.assign("masked_exec", _inputs(**GROUP)).advantages)


def test_registry_and_errors():
    assert set(credit.ASSIGNERS) == {"outcome", "skillgate", "masked_exec", "shaped", "selection_bc"}
    with pytest.raises(ValueError, match="unknown credit assigner 'grpo'"):
        credit.assign("grpo", _inputs(**GROUP))
    with pytest.raises(ValueError, match="read span"):
        ReadSpan("oracle", 3, 3, 2, 4)
    with pytest.raises(ValueError, match="reads has 1 entries"):
        _inputs([1.0, 0.0], [[]])
    with pytest.raises(ValueError, match="ends at 12 > T=10"):
        _inputs([1.0], [[ReadSpan("oracle", 10, 11, 9, 12)]])
