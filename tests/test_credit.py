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


def _inputs(rewards, reads, lengths=None, group=None, **extra):
    B = len(rewards)
    lengths = lengths or [T] * B
    mask = torch.zeros(B, T, dtype=torch.bool)
    for i, n in enumerate(lengths):
        mask[i, :n] = True
    group = torch.zeros(B, dtype=torch.long) if group is None else torch.tensor(group)
    return CreditInputs(torch.tensor(rewards, dtype=torch.float64), group, mask, reads, **extra)


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
    c = credit.assign("skillgate", _inputs([1.0, 0.0], reads), NO_STD)
    # u = [0, 0, 1]; mean over the group's three read actions is 1/3.
    assert [len(r) for r in c.read_adv] == [2, 1]
    assert _flat(c.read_adv) == pytest.approx([-1 / 3, -1 / 3, 2 / 3])
    assert c.advantages[0, 7] == 0.5 and c.advantages[1, 7] == -0.5


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
    assert set(credit.ASSIGNERS) == {"outcome", "skillgate", "skillgate_tokenmean", "utility", "masked_exec", "shaped",
                                     "selection_bc", "selector_only", "skillgate_opener",
                                     "skillgate_exec_read"}
    with pytest.raises(ValueError, match="unknown credit assigner 'grpo'"):
        credit.assign("grpo", _inputs(**GROUP))
    with pytest.raises(ValueError, match="read span"):
        ReadSpan("oracle", 3, 3, 2, 4)
    with pytest.raises(ValueError, match="reads has 1 entries"):
        _inputs([1.0, 0.0], [[]])
    with pytest.raises(ValueError, match="ends at 12 > T=10"):
        _inputs([1.0], [[ReadSpan("oracle", 10, 11, 9, 12)]])
    with pytest.raises(ValueError, match="trajectory 1: 0 read_names for 1 reads"):
        _inputs([1.0, 0.0], [[], [_read("oracle", 1)]], read_names=[[], []])


# ------------------------------------------------------------------ the reference SkillGate weights

# Three prompt groups (T = 10 policy tokens each):
#   group 0, kept:     rewards [1, 0, 0]; a single oracle read with a two-token name (u=1), a misleading
#                      read (u=0), no read. s = u - 1/2 = [+1/2, -1/2]: both reads active.
#   group 1, kept:     rewards [1, 0]; a misleading and a relevant read, u = [0, 0], s = [0, 0]: inactive.
#   group 2, filtered: rewards [1, 1]; an oracle and an irrelevant read, s would be [+1/2, -1/2].
REFERENCE = dict(
    rewards=[1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0],
    reads=[[ReadSpan("oracle", 1, 3, 0, 4)], [_read("misleading", 1)], [], [_read("misleading", 1)],
           [_read("relevant", 1)], [_read("oracle", 1)], [_read("irrelevant", 1)]],
    group=[0, 0, 0, 1, 1, 2, 2],
)


def test_skillgate_shares_lambda_among_active_reads_by_hand():
    inp = _inputs(**REFERENCE)
    c = credit.assign("skillgate", inp, NO_STD)
    assert c.groups_filtered == 1
    assert c.read_adv == [[0.5], [-0.5], [], [0.0], [0.0], [0.0], [0.0]]
    # Two active reads share lambda = 0.2: 0.1 each, the oracle's spread over its two name tokens.
    assert c.weights[0, 1].item() == c.weights[0, 2].item() == pytest.approx(0.05)
    assert c.weights[1, 1].item() == pytest.approx(0.1)
    assert c.advantages[0, 1] == c.advantages[0, 2] == 0.5 and c.advantages[1, 1] == -0.5
    # Zero-advantage reads get no weight although their group is kept.
    assert c.weights[3, 1] == 0 and c.weights[4, 1] == 0
    # Execution channel over the kept groups' tokens off the read calls: 6 + 7 + 10 + 7 + 7 = 37.
    assert c.weights[0, 5].item() == pytest.approx(1 / 37) and c.weights[2, 0].item() == pytest.approx(1 / 37)
    assert c.advantages[0, 5].item() == pytest.approx(2 / 3) and c.advantages[3, 5].item() == pytest.approx(0.5)
    assert c.weights[0, 0] == c.weights[0, 3] == 0  # "<read>" and "</read>": in neither channel
    # The filtered group carries nothing, whatever its selector signal.
    assert torch.all(c.weights[5:] == 0) and torch.all(c.advantages[5:] == 0) and c.adv_exec[5:].tolist() == [0.0, 0.0]
    # Each channel carries the plain loss's mass (1), the selector's times lambda.
    torch.testing.assert_close(c.weights.sum(), torch.tensor(1.2, dtype=torch.float64))


def test_tokenmean_ablation_keeps_the_kit_s_earlier_weights():
    c = credit.assign("skillgate_tokenmean", _inputs(**REFERENCE), NO_STD)
    assert c.groups_filtered == 0
    # lambda over all 7 name tokens, zero-advantage and filtered-group reads included.
    assert c.weights[0, 1].item() == c.weights[3, 1].item() == c.weights[5, 1].item() == pytest.approx(0.2 / 7)
    assert c.read_adv[5] == [0.5] and c.read_adv[6] == [-0.5]  # the all-equal group keeps its selector signal
    # Execution over every group: 37 + 7 + 7 = 51 tokens.
    assert c.weights[5, 5].item() == pytest.approx(1 / 51)


def test_kept_groups_follow_the_raw_rewards_only():
    keep = credit.kept_groups(_inputs([0.5, 0.5 + 1e-13, 0.5, 0.5 + 1e-9, 1.0], [[]] * 5, group=[0, 0, 1, 1, 2]))
    assert keep.tolist() == [False, False, True, True, False]  # a tie within 1e-12, a real gap, a group of one


def test_every_group_filtered_gives_zero_weight():
    reads = [[_read("oracle", 1)], [_read("misleading", 1)], [_read("oracle", 1)], []]
    c = credit.assign("skillgate", _inputs([1.0, 1.0, 0.0, 0.0], reads, group=[0, 0, 1, 1]))
    assert c.groups_filtered == 2
    assert torch.all(c.weights == 0) and torch.all(c.advantages == 0) and _flat(c.read_adv) == [0.0, 0.0, 0.0]


def test_active_read_outside_the_policy_tokens_raises():
    reads = [[_read("oracle", 1)], [_read("misleading", 1)]]
    with pytest.raises(ValueError, match="trajectory 0, read 0: name tokens \\[1, 2\\) are not all in response_mask"):
        credit.assign("skillgate", _inputs([1.0, 0.0], reads, lengths=[1, 10]))
    overlapping = [[_read("oracle", 1), ReadSpan("misleading", 1, 2, 1, 3)], [_read("oracle", 1)]]
    with pytest.raises(ValueError, match="trajectory 0, read 1: .* overlap another read's name"):
        credit.assign("skillgate", _inputs([1.0, 0.0], overlapping))


# ------------------------------------------------------------------ Skill1-style utility credit


def test_skill_values_running_average_by_hand():
    v = credit.SkillValues(decay=0.9)
    # "a" read by a success and by a failure (the failure reads it twice: counted once); "b" by the failure.
    v.update([["a"], ["a", "a", "b"], []], torch.tensor([1.0, 0.0, 1.0]))
    assert v.value("a") == 0.5 and v.value("b") == 0.0  # the first observation is the value
    assert v.value("never-read") == 0.5  # neutral prior: the mean outcome of trajectories that read anything
    assert credit.SkillValues(prior=0.0).value("never-read") == 0.0 and credit.SkillValues().value("x") == 0.0
    v.update([["a"]], [1.0])
    assert v.value("a") == pytest.approx(0.9 * 0.5 + 0.1 * 1.0)
    assert v.value("never-read") == pytest.approx(0.9 * 0.5 + 0.1 * 1.0)
    assert v.value("b") == 0.0  # not read this batch: unchanged
    with pytest.raises(ValueError, match="2 name lists for 1 rewards"):
        v.update([["a"], []], [1.0])
    with pytest.raises(ValueError, match="decay < 1, got 1.0"):
        credit.SkillValues(decay=1.0)


# Group 0 (kept): the executed (last) reads have V = 0.8, 0.0 (gamma, never read), 0.8; mean 1.6 / 3 ->
# s = [0.2667], [0 (beta: not executed), -0.5333], [0.2667].
# Group 1 (kept): three reads of "delta" (V = 0.1): the float mean is 0.1 + 1e-17, still no signal.
# Group 2 (filtered): rewards [0, 0].
UTILITY = dict(
    rewards=[1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0],
    reads=[[_read("oracle", 1)], [_read("misleading", 1), _read("relevant", 4)], [_read("oracle", 1)],
           [_read("relevant", 1)], [_read("relevant", 1)], [_read("relevant", 1)],
           [_read("oracle", 1)], [_read("misleading", 1)]],
    group=[0, 0, 0, 1, 1, 1, 2, 2],
    read_names=[["alpha"], ["beta", "gamma"], ["alpha"], ["delta"], ["delta"], ["delta"], ["alpha"], ["beta"]],
)


def _values():
    return credit.SkillValues(values={"alpha": 0.8, "beta": 0.2, "delta": 0.1})


def test_utility_by_hand():
    values = _values()
    c = credit.assign("utility", _inputs(**UTILITY, skill_values=values), NO_STD)
    assert _flat(c.read_adv[:3]) == pytest.approx([0.8 - 1.6 / 3, 0.0, -1.6 / 3, 0.8 - 1.6 / 3])
    assert c.read_adv[3:] == [[0.0]] * 5  # equal utilities (group 1) and the filtered group 2: no signal
    assert c.groups_filtered == 1
    # Three active (executed) reads share lambda: 0.2 / 3 on each one-token name; the others get nothing.
    assert [c.weights[i, t].item() for i, t in [(0, 1), (1, 4), (2, 1)]] == pytest.approx([0.2 / 3] * 3)
    assert c.weights[1, 1] == 0 and c.weights[3, 1] == 0 and torch.all(c.weights[6:] == 0)
    assert c.advantages[1, 4].item() == pytest.approx(-1.6 / 3)
    # Execution: the masked_exec channel over the kept groups (7 + 4 + 7 + 7 + 7 + 7 = 39 tokens).
    assert c.weights[1, 8].item() == pytest.approx(1 / 39) and c.advantages[1, 8].item() == pytest.approx(-1 / 3)
    assert c.weights[1, 3] == 0  # the second read call's "<read>"
    torch.testing.assert_close(c.weights.sum(), torch.tensor(1.2, dtype=torch.float64))
    assert values.values == {"alpha": 0.8, "beta": 0.2, "delta": 0.1}  # assign reads the values, never updates them


def test_utility_with_oracle_indicator_values_is_skillgate():
    """With V = 1[oracle] and one read per trajectory, the two assigners differ in nothing."""
    reads = [[_read("oracle", 1)], [_read("misleading", 1)], [_read("oracle", 2)], [], [_read("irrelevant", 3)]]
    names = [["o"], ["m"], ["o"], [], ["i"]]
    inp = _inputs([1.0, 0.0, 0.0, 1.0, 1.0], reads, group=[0, 0, 0, 1, 1], read_names=names,
                  skill_values=credit.SkillValues(values={"o": 1.0, "m": 0.0, "i": 0.0}))
    u, s = credit.assign("utility", inp), credit.assign("skillgate", inp)
    torch.testing.assert_close(u.weights, s.weights)
    torch.testing.assert_close(u.advantages, s.advantages)
    assert u.read_adv == s.read_adv and s.read_adv[0] == [pytest.approx(1 / 3)]


def test_utility_names_its_missing_inputs():
    with pytest.raises(ValueError, match="CreditInputs.read_names is None"):
        credit.assign("utility", _inputs(**GROUP))
    with pytest.raises(ValueError, match="CreditInputs.skill_values is None"):
        credit.assign("utility", _inputs(**GROUP, read_names=[["o"], ["m"], ["o"], []]))


def test_opener_ablation_moves_the_reads_selector_advantage_onto_its_opener():
    """``skillgate_opener``: each read's ``<read>`` token (position ``call_start``) gets the read's
    selector advantage and a share of lambda; under ``skillgate`` it is in neither channel."""
    inp = _inputs(**GROUP)
    ref, abl = credit.assign("skillgate", inp), credit.assign("skillgate_opener", inp)
    # reads 0..2 open at token 0 (name at 1); trajectory 3 made no read
    assert all(ref.weights[i, 0] == 0 for i in range(3))
    lam, n_active = 0.2, 3
    u = [1.0, 0.0, 1.0]
    for i in range(3):
        s = u[i] - sum(u) / 3
        assert abl.advantages[i, 0] == pytest.approx(s) and abl.advantages[i, 1] == pytest.approx(s)
        assert abl.weights[i, 0] == pytest.approx(lam / (n_active * 2)) == abl.weights[i, 1]
    # the execution channel and the logged read advantages are unchanged
    exec_cols = [2, 3, 4, 5, 6, 7, 8, 9]
    torch.testing.assert_close(abl.weights[:, exec_cols], ref.weights[:, exec_cols])
    assert abl.read_adv == ref.read_adv


def test_exec_read_ablation_keeps_the_read_calls_other_tokens_in_the_execution_channel():
    """``skillgate_exec_read``: the opener and closer of each read get ``A_i`` in the execution channel
    (under ``skillgate`` they are in neither channel); the name keeps its selector credit alone."""
    inp = _inputs(**GROUP)
    ref, abl = credit.assign("skillgate", inp), credit.assign("skillgate_exec_read", inp)
    a = credit.group_advantage(inp.rewards, inp.group)
    n_exec = sum(T - 1 if spans else T for spans in inp.reads)  # every token but the names
    for i, spans in enumerate(inp.reads):
        for r in spans:
            for t in (r.call_start, r.call_end - 1):
                assert ref.weights[i, t] == 0
                assert abl.advantages[i, t] == pytest.approx(float(a[i]))
                assert abl.weights[i, t] == pytest.approx(1 / n_exec)
            name = slice(r.name_start, r.name_end)
            torch.testing.assert_close(abl.advantages[i, name], ref.advantages[i, name])
    assert float(abl.weights.sum()) == pytest.approx(float(ref.weights.sum()))  # each channel still sums to 1 (+ lambda)
    assert abl.read_adv == ref.read_adv
