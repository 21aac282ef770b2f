"""skillgate_lib.theory: closed forms against hand-computed cases, exhaustive enumeration
and the Monte Carlo twin; vectorisation, determinism, the fit, and the errors."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from skillgate_lib.theory import QUANTITIES, SIMULATED, StarvationModel, closed_forms, fit_model, simulate, z_scores


def _enumerate(model: StarvationModel, H: int) -> dict[str, float]:
    """Every quantity by brute force over all 4**G (reads, rewards) outcomes of one group,
    straight from the definitions (rollout 0 is the one conditioned on)."""
    G, p, b = model.group_size, model.p_oracle, model.s_wrong
    a = model.q_step**H
    acc = dict.fromkeys(["oracle", "zero", "zero_sel", "wrong", "nonzero", "wrong_sel", "nonzero_sel",
                         "succ_o", "succ_x", "adv_o", "adv_x", "sel_o", "sel_x"], 0.0)
    for reads in itertools.product((0, 1), repeat=G):
        for rewards in itertools.product((0, 1), repeat=G):
            prob = np.prod([(p if u else 1 - p) * ((a if u else b) if r else (1 - (a if u else b)))
                            for u, r in zip(reads, rewards)])
            u, r = reads[0], rewards[0]
            A, V = r - np.mean(rewards), u - np.mean(reads)
            acc["oracle"] += prob * u
            acc["zero"] += prob * u * (A == 0)
            acc["zero_sel"] += prob * u * (V == 0)
            acc["wrong"] += prob * ((u and A < 0) or (not u and A > 0))
            acc["nonzero"] += prob * (A != 0)
            acc["wrong_sel"] += prob * ((u and V < 0) or (not u and V > 0))
            acc["nonzero_sel"] += prob * (V != 0)
            acc["succ_o" if u else "succ_x"] += prob * r
            acc["adv_o" if u else "adv_x"] += prob * A
            acc["sel_o" if u else "sel_x"] += prob * V
    other = 1 - acc["oracle"]
    return {
        "zero_credit": acc["zero"] / acc["oracle"],
        "zero_credit_skillgate": acc["zero_sel"] / acc["oracle"],
        "sign_error": acc["wrong"] / acc["nonzero"],
        "sign_error_skillgate": acc["wrong_sel"] / acc["nonzero_sel"],
        "value": acc["succ_o"] / acc["oracle"] - acc["succ_x"] / other,
        "selector_signal": (acc["adv_o"] / acc["oracle"] - acc["adv_x"] / other) * model.share(H),
        "selector_signal_skillgate": (acc["sel_o"] / acc["oracle"] - acc["sel_x"] / other)
        * model.share_skillgate(H),
    }


@pytest.mark.parametrize("G", [2, 3, 4])
@pytest.mark.parametrize("H", [0, 1, 5])
def test_closed_forms_equal_exhaustive_enumeration(G, H):
    model = StarvationModel(group_size=G, p_oracle=0.35, q_step=0.8, s_wrong=0.25)
    for name, exact in _enumerate(model, H).items():
        assert getattr(model, name)(H) == pytest.approx(exact, rel=1e-12), name


def test_hand_computed_cases():
    # G = 2, H = 0 (a = 1), p = b = 1/2: m = 3/4; an oracle read always succeeds, so only a
    # succeeding other read next to a failing groupmate is wrong: (1/4)(1/4) / (2 m (1-m)) = 1/6.
    m = StarvationModel(group_size=2, p_oracle=0.5, s_wrong=0.5)
    assert m.zero_credit(0) == pytest.approx(0.75)
    assert m.sign_error(0) == pytest.approx(1 / 6)
    assert m.value(0) == pytest.approx(0.5)
    # G = 2, p = 1 (or p = 0): in a mixed group exactly one of the two reads is wrong-signed.
    assert StarvationModel(group_size=2, p_oracle=1.0).sign_error(3) == pytest.approx(0.5)
    assert StarvationModel(group_size=2, p_oracle=0.0).sign_error(3) == pytest.approx(0.5)
    # p = 1: m = a, so all-equal has probability a**G + (1-a)**G.
    assert StarvationModel(group_size=3, p_oracle=1.0, q_step=0.5).zero_credit(1) == pytest.approx(0.25)
    # q = 1: nothing depends on H but the share; value = 1 - b.
    flat = StarvationModel(q_step=1.0, s_wrong=0.3)
    for name in ("zero_credit", "sign_error", "value"):
        np.testing.assert_allclose(getattr(flat, name)(np.arange(6)), getattr(flat, name)(0))
    assert flat.value(7) == pytest.approx(0.7)
    # s_wrong = 0: an other read never succeeds, so only failing oracle reads are wrong-signed.
    zero_b = StarvationModel(group_size=2, p_oracle=0.5, q_step=0.5, s_wrong=0.0)
    assert zero_b.sign_error(1) == pytest.approx(0.0625 / 0.375)
    assert zero_b.zero_credit(1) == pytest.approx(0.5)


def test_shares_and_selector_signals():
    m = StarvationModel(selector_tokens=3, base_tokens=40, tokens_per_step=12, selector_coef=0.2)
    assert m.length(5) == 103
    assert m.share(5) == pytest.approx(3 / 103)
    np.testing.assert_allclose(m.share_skillgate(np.arange(10)), 1 / 6)
    # No execution tokens: the selector span is the whole loss in both schemes.
    bare = StarvationModel(selector_tokens=2, base_tokens=0, tokens_per_step=5)
    assert bare.share(0) == 1.0 and bare.share_skillgate(0) == 1.0 and bare.share_skillgate(1) == pytest.approx(1 / 6)
    two = StarvationModel(group_size=2, p_oracle=0.5, s_wrong=0.5, selector_tokens=1, base_tokens=1,
                          tokens_per_step=0, selector_coef=1.0)
    assert two.selector_signal(0) == pytest.approx(0.5 * 0.5 * 0.5)  # (G-1)/G (a-b) k/L
    assert two.selector_signal_skillgate(0) == pytest.approx(0.5 * 0.5)  # (G-1)/G lambda/(1+lambda)


def test_empty_conditioning_events_are_nan():
    never = StarvationModel(p_oracle=0.0)
    always = StarvationModel(p_oracle=1.0)
    for name in ("zero_credit", "zero_credit_skillgate", "sign_error_skillgate", "value",
                 "selector_signal", "selector_signal_skillgate"):
        assert np.isnan(getattr(never, name)(2)), name
    for name in ("sign_error_skillgate", "value", "selector_signal", "selector_signal_skillgate"):
        assert np.isnan(getattr(always, name)(2)), name
    assert np.isfinite(never.sign_error(2)) and np.isfinite(always.zero_credit(2))
    # m = 1: every reward is 1, so no advantage is nonzero.
    assert np.isnan(StarvationModel(q_step=1.0, s_wrong=1.0).sign_error(4))


def test_methods_are_vectorised_over_h():
    m = StarvationModel()
    grid = np.array([[0, 1, 2], [5, 8, 13]])
    for name in QUANTITIES + ("length", "oracle_success", "success"):
        method = getattr(m, name)
        out = method(grid)
        assert out.shape == grid.shape, name
        np.testing.assert_array_equal(out, [[method(int(h)) for h in row] for row in grid], err_msg=name)
        assert np.ndim(method(3)) == 0, name


@pytest.mark.parametrize(
    "model",
    [StarvationModel(group_size=4, p_oracle=0.3, q_step=0.85, s_wrong=0.2),
     StarvationModel(group_size=2, p_oracle=0.7, q_step=0.6, s_wrong=0.5, base_tokens=0, tokens_per_step=3),
     StarvationModel(p_oracle=0.0),
     StarvationModel(p_oracle=1.0)],
    ids=["G4", "G2", "p0", "p1"],
)
def test_simulation_agrees_with_closed_forms(model):
    horizons = [0, 2, 6]
    sim = simulate(model, horizons, n_groups=30_000, seed=3)
    z = z_scores(closed_forms(model, horizons), sim)
    assert (z[list(QUANTITIES)].abs() <= 4).all().all(), z


def test_agreement_check_can_fail():
    """A closed form with the wrong q is caught by the same check."""
    sim = simulate(StarvationModel(q_step=0.9), [2, 6], n_groups=30_000, seed=3)
    z = z_scores(closed_forms(StarvationModel(q_step=0.85), [2, 6]), sim)
    assert z["value"].abs().min() > 4 and z["sign_error"].abs().min() > 4
    assert (z["share"] == 0).all()  # lengths did not change, so neither did the share


def test_rare_event_seen_in_no_group_keeps_a_positive_error():
    """P(all 16 reads are the oracle) = 0.3**15: never seen in 10k groups, yet the check passes
    on the SE floor instead of dividing by a zero SE."""
    m = StarvationModel(group_size=16, p_oracle=0.3)
    sim = simulate(m, [2], n_groups=10_000, seed=0)
    assert sim.loc[0, "zero_credit_skillgate"] == 0 and sim.loc[0, "zero_credit_skillgate_se"] > 0
    assert abs(z_scores(closed_forms(m, [2]), sim).loc[0, "zero_credit_skillgate"]) < 1


def test_simulation_reports_every_quantity_with_an_error():
    sim = simulate(StarvationModel(), [1, 4], n_groups=5_000, seed=0)
    assert list(sim.columns) == ["horizon"] + [c for n in SIMULATED for c in (n, f"{n}_se")]
    assert sim["horizon"].tolist() == [1, 4]
    assert (sim["sign_error_se"] > 0).all() and (sim["sign_error_skillgate"] == 0).all()
    # Std normalisation scales every advantage of a group by 1/std > 1 (std <= 0.53 for G = 8).
    assert (sim["selector_signal_std"] > sim["selector_signal"]).all()


def test_simulation_is_deterministic_by_seed_and_independent_of_the_grid():
    m = StarvationModel(group_size=5)
    a = simulate(m, [1, 3], n_groups=4_000, seed=11)
    pd.testing.assert_frame_equal(a, simulate(m, [1, 3], n_groups=4_000, seed=11))
    assert not a.equals(simulate(m, [1, 3], n_groups=4_000, seed=12))
    pd.testing.assert_frame_equal(a.iloc[[1]].reset_index(drop=True), simulate(m, 3, n_groups=4_000, seed=11))


def test_simulation_spans_chunks_consistently():
    """A group count past one chunk (131072 / G groups) still agrees with the closed forms."""
    m = StarvationModel(group_size=64, p_oracle=0.4)
    z = z_scores(closed_forms(m, [3]), simulate(m, [3], n_groups=5_000, seed=1))
    assert (z[list(QUANTITIES)].abs() <= 4).all().all(), z


def _draw(rng, n, p, q, b):
    h = rng.integers(1, 9, n)
    read = rng.random(n) < p
    ok = rng.random(n) < np.where(read, q**h, b)
    return read, h, ok


def test_fit_recovers_parameters_and_maximises_the_likelihood():
    rng = np.random.default_rng(0)
    read, h, ok = _draw(rng, 200_000, 0.38, 0.9, 0.3)
    fit = fit_model(read, h, ok, group_size=4, selector_coef=0.5)
    assert (fit.group_size, fit.selector_coef) == (4, 0.5)
    assert fit.p_oracle == pytest.approx(read.mean()) and fit.s_wrong == pytest.approx(ok[~read].mean())
    assert fit.q_step == pytest.approx(0.9, abs=0.005)
    grid = np.linspace(0.85, 0.95, 2001)[:, None]
    hs = np.arange(1, 9)
    succ = np.array([(ok & read & (h == H)).sum() for H in hs])
    fail = np.array([(~ok & read & (h == H)).sum() for H in hs])
    loglik = (succ * hs * np.log(grid) + fail * np.log1p(-(grid**hs))).sum(1)
    assert fit.q_step == pytest.approx(grid[loglik.argmax()], abs=1e-4)


def test_fit_edge_cases():
    read = np.array([1, 1, 0, 0], bool)
    assert fit_model(read, np.array([2, 3, 1, 1]), np.array([1, 1, 0, 1])).q_step == 1.0
    assert fit_model(read, np.array([2, 3, 1, 1]), np.array([0, 0, 0, 1])).q_step == 0.0


@pytest.mark.parametrize(
    "args, match",
    [
        (([1, 1, 1], [1, 2, 3], [1, 0, 1]), "oracle_read must contain both"),
        (([1, 0], [1, 2, 3], [1, 0]), "horizon must be a 1-d array"),
        (([1, 0], [1, 2], [1, 2]), "success must hold booleans"),
        (([1, 0], [1.5, 2], [1, 0]), "horizon must hold ints"),
        (([1, 1, 0], [0, 2, 1], [0, 1, 1]), "success: an oracle read failed at horizon 0"),
        (([1, 0], [0, 1], [1, 1]), "horizon: no oracle read has H > 0"),
    ],
)
def test_fit_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        fit_model(*map(np.asarray, args))


@pytest.mark.parametrize(
    "field, bad",
    [("group_size", 1), ("group_size", 4.0), ("group_size", True),
     ("p_oracle", -0.1), ("p_oracle", 1.5), ("p_oracle", float("nan")),
     ("q_step", 1.01), ("s_wrong", -1e-9),
     ("selector_tokens", 0), ("base_tokens", -1), ("tokens_per_step", -2), ("tokens_per_step", 1.5),
     ("selector_coef", 0.0), ("selector_coef", -0.2), ("selector_coef", float("inf"))],
)
def test_bad_parameters_name_the_field(field, bad):
    with pytest.raises(ValueError, match=f"^{field} must"):
        StarvationModel(**{field: bad})


def test_bad_horizons_and_simulation_arguments():
    m = StarvationModel()
    with pytest.raises(ValueError, match=r"H \(horizon\) must be >= 0"):
        m.share(np.array([1, -1]))
    with pytest.raises(ValueError, match="horizons must be ints"):
        simulate(m, [1.5], n_groups=10, seed=0)
    with pytest.raises(ValueError, match="horizons must be ints"):
        simulate(m, [-1], n_groups=10, seed=0)
    with pytest.raises(ValueError, match="n_groups must be"):
        simulate(m, [1], n_groups=1, seed=0)
    with pytest.raises(ValueError, match="seed must be"):
        simulate(m, [1], n_groups=10, seed=-3)
