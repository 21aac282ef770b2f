"""The audit's printout: 100 columns, integer counts, one unit per column, trend labels that respect their
p-value, no interval for a Value bin of under 5 groups, and the closed form's prediction beside its error."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from test_audit import hand_log, write_kit

from skillgate_lib import audit, paths
from skillgate_lib.audit import printout

NOTE8 = paths.DATA_DIR / "runs" / "audit" / "paper_note8-outcome"


@pytest.fixture(scope="module")
def note8_printout():
    """The CLI's printout of the committed paper_note8 outcome-only run at its defaults (no figures)."""
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert audit.main([str(NOTE8), "--no-figures"]) == 0
    return buf.getvalue()


def _table_rows(text: str, title: str) -> list[list[str]]:
    """The cells (split on runs of two or more spaces) of the header and rows of the table under ``title``."""
    lines = text.splitlines()
    start = lines.index(title) + 1
    rows = []
    for ln in lines[start:]:
        if not re.match(r"^(bin|\d+|all)\s", ln):
            break
        rows.append(re.split(r"\s{2,}", ln.strip()))
    return rows


def test_the_committed_run_prints_within_100_columns_without_scientific_notation(note8_printout):
    lines = note8_printout.splitlines()
    too_wide = [ln for ln in lines if len(ln) > printout.WIDTH]
    assert not too_wide, too_wide
    assert "e+" not in note8_printout and not re.search(r"\de[+-]?\d", note8_printout)
    # the old printout's abbreviations are gone
    for old in ("g_q25", "share_med", "gshare_med", "ratio_gshare", "mislead_read", "value_pp"):
        assert old not in note8_printout, old


def test_counts_are_integers_and_each_column_has_one_unit(note8_printout):
    share = _table_rows(note8_printout, "Share by horizon")
    assert share[0][:5] == ["bin", "H", "n", "Share %", "Share IQR %"]
    for row in share[1:]:
        assert re.fullmatch(r"\d{1,3}(,\d{3})*", row[2]), row  # trajectories
        assert re.fullmatch(r"\d+(-\d+)?", row[1]), row  # horizon in steps
    assert share[-1][:3] == ["all", "1-8", "2,064"] and share[1][2] == "248"
    sign = _table_rows(note8_printout, "Sign and Value by horizon")
    head = sign[0]
    assert {"Value pp", "Value 95% CI pp", "groups", "negative %", "wrong %", "zero %"} <= set(head)
    for row in sign[1:]:
        cells = dict(zip(head, row))
        assert re.fullmatch(r"\d{1,3}(,\d{3})*", cells["groups"]) and re.fullmatch(r"\d{1,3}(,\d{3})*", cells["reads"])
        assert not cells["negative %"].endswith("%") and re.fullmatch(r"[+-]\d+\.\d", cells["Value pp"])
    assert sign[-1][-1] == "173"
    # every table has a legend right under it, naming each abbreviation
    lines = note8_printout.splitlines()
    for title, words in (("Share by horizon", ("H:", "n:", "Grad. Share:", "IQR:")),
                         ("Sign and Value by horizon", ("wrong:", "groups", "Value:", "CI")),
                         ("reads by horizon", ("reads / trial:", "success:"))):
        start = lines.index(title) + len(_table_rows(note8_printout, title)) + 1
        legend = " ".join(ln.strip() for ln in lines[start:lines.index("", start)])
        assert legend and all(w in legend for w in words), (title, legend)


def test_trend_verdict_says_no_trend_above_alpha():
    # constructed input: a clear but noisy fall over 6 bins whose permutation p is above 0.05
    rng = np.random.default_rng(0)
    t = audit.spearman_trend(np.arange(6.0), np.array([5, 6, 3, 4, 1, 2.0]), "down", rng)
    assert t["rho"] < -0.5 and t["p_value"] > 0.05 and t["verdict"] == "no trend"
    assert audit.spearman_trend(np.arange(6.0), np.array([5, 6, 3, 4, 1, 2.0]), "down", rng, alpha=0.2)["verdict"] \
        == "worsens"
    t = audit.spearman_trend(np.arange(6.0), np.arange(6.0), "down", rng)
    assert t["p_value"] <= 0.05 and t["monotone"] and t["verdict"] == "improves monotonically"
    # the committed run's oracle-read trend: rho -0.238, p 0.58 used to print "worsens (not monotonically)"
    assert audit.trend_verdict(-0.238, 0.58, "down") == "no trend"
    assert audit.trend_verdict(-0.714, 0.058, "up") == "no trend"
    assert audit.trend_verdict(0.929, 0.0022, "up") == "worsens"
    assert audit.trend_verdict(-1.0, 5e-5, "down", monotone=True) == "worsens monotonically"
    assert audit.trend_verdict(0.9, 0.03, "down") == "improves"
    assert audit.trend_verdict(0.9, 0.03, "down", monotone=True) == "improves monotonically"
    assert audit.trend_verdict(0.9, 0.03, "down", alpha=0.01) == "no trend"
    assert audit.trend_verdict(0.9, 0.05, "up") == "worsens"  # p <= alpha, not <
    assert audit.trend_verdict(math.nan, math.nan, "up") == "no trend"
    with pytest.raises(ValueError, match="worse"):
        audit.trend_verdict(0.5, 0.01, "sideways")


def test_the_committed_run_prints_no_trend_where_p_is_above_alpha(note8_printout):
    cells = [re.split(r"\s{2,}", ln.strip()) for ln in note8_printout.splitlines()]
    trends = {r[0]: r for r in cells if len(r) == 4}
    assert trends["oracle read"][1:] == ["-0.238", "0.58", "no trend"]
    assert trends["negative reads"][3] == "no trend"
    assert trends["wrong-signed reads"][3] == "worsens" and trends["Share (median)"][3] == "worsens monotonically"
    result = audit.run_audit(NOTE8, n_boot=200, seed=0)
    t = result.trends.set_index("measure")
    assert {"rho", "p_value", "monotone", "verdict", "worse", "n_bins"} <= set(t.columns)
    for m, r in t.iterrows():
        assert r["verdict"] == audit.trend_verdict(r["rho"], r["p_value"], r["worse"], r["monotone"]), m


def test_a_value_bin_of_one_group_prints_no_interval(tmp_path):
    r = audit.run_audit(write_kit(tmp_path / "run", hand_log()), n_boot=200, seed=0)
    assert r.bins["value_groups"].tolist() == [1, 1]
    text = printout.report(r, data_dir=None)
    assert "[+100.0, +100.0]" not in text and "[-100.0, -100.0]" not in text
    sign = _table_rows(text, "Sign and Value by horizon")
    cells = [dict(zip(sign[0], row)) for row in sign[1:]]
    assert [(c["Value pp"], c["Value 95% CI pp"], c["groups"]) for c in cells[:2]] == [("+100.0", "n<5", "1"),
                                                                                        ("-100.0", "n<5", "1")]
    assert "n<5: under 5 groups, no interval" in " ".join(text.split())
    assert max(len(ln) for ln in text.splitlines()) <= printout.WIDTH
    # a bin with 5 groups or more keeps its interval
    assert re.search(r"\[\+\d+\.\d, \+\d+\.\d\]", printout.report(audit.run_audit(NOTE8, n_boot=200), data_dir=None))


def test_the_predicted_ratio_prints_with_its_measured_error(note8_printout, tmp_path):
    from skillgate_lib.report import rates

    table = rates.rate_table(rates.all_runs(paths.DATA_DIR / "runs" / "speed"))
    fit = rates.predictor_fit(table[table["optimizer"] == "adamw"]).set_index("predictor")
    lines = note8_printout.splitlines()
    head = [i for i, ln in enumerate(lines) if ln.startswith("predicted ratio SkillGate / outcome-only")]
    assert len(head) == 1
    studies = int(fit.loc["loss-weight Share", "studies"])
    assert f"{studies} rate studies" in lines[head[0]]
    for label, predictor in (("theory (loss weight)", "loss-weight Share"), ("theory (gradient)", "Gradient Share")):
        line = next(ln for ln in lines if ln.strip().startswith(label))
        r = fit.loc[predictor]
        fold = math.exp(-r["mean_residual"])
        assert r["mean_residual"] < 0 and f"overstated the observed ratio {fold:.0f}x on average" in line, line
        assert fit.loc[rates.CONSTANT, "max_abs_residual"] < r["max_abs_residual"]
        assert line.endswith("a constant did better"), line
    assert "theory (loss weight)  71.7x" in note8_printout and "511x" in note8_printout
    # without the rate study's data, no prediction at all
    r = audit.run_audit(write_kit(tmp_path / "run", hand_log()), n_boot=50, seed=0)
    assert "theory (" in printout.report(r)
    bare = printout.report(r, data_dir=tmp_path / "no-data")
    assert "theory (" not in bare and "predicted ratio" not in bare


def test_ratios_never_print_in_scientific_notation():
    assert [printout.ratio_text(v) for v in (5.26, 71.7, 511.2, 2120.4, 1.2e6)] == \
        ["5.26x", "71.7x", "511x", "2,120x", "1,200,000x"]
