"""The rate study: its measure, its search's edge rule, the optimizers, and a small study end to end."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest
import torch

from skillgate_lib.report import rates
from skillgate_lib.runs import optimizers, protocol, speed
from skillgate_lib.runs.train import TrainConfig


def _write_run(run_dir, oracle_by_step, train_by_step, method="outcome", lr=1e-3, seed=0, eval_tasks=256):
    run_dir.mkdir(parents=True)
    cfg = {"method": method, "lr": lr, "seed": seed, "eval_tasks": eval_tasks, "prompts_per_step": 4, "group_size": 8}
    (run_dir / "config.json").write_text(json.dumps(cfg))
    rows = [{"split": "eval", "step": s, "eval/oracle_read": p, "eval/success": 0.2} for s, p in oracle_by_step.items()]
    rows += [{"split": "train", "step": s, "train/oracle_read": p} for s, p in train_by_step.items()]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _sigmoid(x):
    return 1 / (1 + math.exp(-x))


def test_primary_measure_is_the_logit_slope(tmp_path):
    # oracle-read on a logistic curve with slope 0.1 a step: the measure returns 0.1 (steps past 25 ignored)
    evals = {s: _sigmoid(-0.5 + 0.1 * s) for s in range(0, 31, 5)}
    evals[30] = 0.01  # after the window: must not move the slope
    train = {s: _sigmoid(0.2 + 0.05 * s) for s in range(1, 31)}
    _write_run(tmp_path / "run", evals, train)
    m = rates.speed_measures(tmp_path / "run")
    assert m["slope_val"] == pytest.approx(0.1, rel=1e-9)
    assert m["slope_onpolicy"] == pytest.approx(0.05, rel=1e-9)
    assert m["val_oracle_read_final"] == 0.01
    # half the gap from sigmoid(-0.5) = 0.3775 to 1 is 0.689, crossed between steps 10 and 15
    assert 10 < m["half_gap_step"] < 15


def test_rates_of_zero_and_one_stay_finite(tmp_path):
    _write_run(tmp_path / "run", {0: 0.0, 5: 0.5, 10: 1.0}, {1: 0.0, 2: 1.0})
    m = rates.speed_measures(tmp_path / "run")
    assert np.isfinite(m["slope_val"]) and m["slope_val"] > 0
    assert np.isfinite(m["slope_onpolicy"])


def test_half_gap_step_by_hand():
    assert rates.half_gap_step([0, 5, 10], [0.6, 0.7, 0.9]) == pytest.approx(7.5)
    assert rates.half_gap_step([0, 5], [0.6, 0.6]) == math.inf


def test_a_run_without_a_step_zero_evaluation_is_refused(tmp_path):
    _write_run(tmp_path / "run", {5: 0.5}, {1: 0.5})
    with pytest.raises(ValueError, match="step-0 evaluation"):
        rates.speed_measures(tmp_path / "run")


def test_plans_are_equal_for_both_arms_and_refuse_unknown_regimes():
    plan = speed.plan_for("paper_note8")
    assert plan.methods == ("outcome", "skillgate") and plan.grid == speed.GRIDS["adamw"]
    a = plan.config("outcome", 1e-3, 0, speed.paths.BUILD_DIR, 1)
    b = plan.config("skillgate", 1e-3, 0, speed.paths.BUILD_DIR, 1)
    differ = {k for k in a.__dataclass_fields__ if getattr(a, k) != getattr(b, k)}
    assert differ == {"method", "credit", "run_dir"}
    assert speed.plan_for("paper_note8", "nsgd").name == "paper_note8-nsgd"
    with pytest.raises(ValueError, match="no warm start"):
        speed.plan_for("paper_long")
    with pytest.raises(ValueError, match="optimizer"):
        speed.plan_for("paper", "adam")


def test_normalised_sgd_steps_a_fixed_length_along_the_whole_gradient():
    a, b = torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(2))
    opt = optimizers.build("nsgd", [a, b], lr=0.5)
    a.grad, b.grad = torch.tensor([3.0, 0.0, 0.0]), torch.tensor([0.0, 4.0])
    opt.step()
    assert torch.allclose(a.detach(), torch.tensor([-0.3, 0.0, 0.0]))  # -0.5 * 3 / 5
    assert torch.allclose(b.detach(), torch.tensor([0.0, -0.4]))
    step = torch.cat([a.detach(), b.detach()]).norm()
    assert float(step) == pytest.approx(0.5)
    a.grad, b.grad = a.grad * 100, b.grad * 100  # invariant to a global rescale
    opt.step()
    assert float(torch.cat([a.detach(), b.detach()]).norm()) == pytest.approx(1.0)


def test_unknown_optimizer_is_refused():
    with pytest.raises(ValueError, match="optimizer"):
        TrainConfig(optimizer="adam")
    with pytest.raises(ValueError, match="optimizer"):
        optimizers.build("lion", [torch.nn.Parameter(torch.zeros(1))], 1e-3)


def test_ratio_interval_brackets_the_ratio_of_means():
    rng = np.random.default_rng(0)
    den = 0.1 + 0.01 * rng.standard_normal(8)
    num = 2 * den + 0.01 * rng.standard_normal(8)
    r, lo, hi = rates.ratio_interval(num, den)
    assert r == pytest.approx(num.mean() / den.mean())
    assert lo < r < hi and 1.5 < lo and hi < 2.5


def test_a_perfect_predictor_fits_with_slope_one():
    t = pd.DataFrame({"ratio": [1.2, 2.0, 5.0], "pred_share": [1.2, 2.0, 5.0], "pred_gshare": [5.0, 2.0, 1.2],
                      "pred_summed": [np.nan, 2.0, 5.0]})
    fit = rates.predictor_fit(t).set_index("predictor")
    assert fit.loc["loss-weight Share", "loglog_slope"] == pytest.approx(1.0)
    assert fit.loc["loss-weight Share", "max_abs_residual"] == pytest.approx(0.0, abs=1e-12)
    assert fit.loc["Gradient Share", "spearman"] == pytest.approx(-1.0)
    assert fit.loc["summed-gradient share", "studies"] == 2


def _runs(study, regime, outcome_slopes, skillgate_slopes, start=0.5, final=(0.8, 0.9)):
    rows = []
    for method, slopes, end in (("outcome", outcome_slopes, final[0]), ("skillgate", skillgate_slopes, final[1])):
        rows += [{"study": study, "regime": regime, "optimizer": "adamw", "model": "tiny", "method": method, "seed": i,
                  "chosen": True, "lr": 3e-3, "slope_val": v, "slope_onpolicy": v, "half_gap_step": 10.0,
                  "val_oracle_read_0": start, "val_oracle_read_final": end, "val_success_final": 0.2}
                 for i, v in enumerate(slopes)]
    return rows


def test_a_ratio_is_given_only_where_outcome_only_learns_the_choice(tmp_path):
    rng = np.random.default_rng(0)
    learning = 0.06 + 0.005 * rng.standard_normal(8)
    runs = pd.DataFrame(_runs("a", "a", learning, 2 * learning + 0.005 * rng.standard_normal(8))
                        + _runs("b", "b", -0.02 + 0.005 * rng.standard_normal(8), -0.03 + 0.005 * rng.standard_normal(8),
                                start=0.36, final=(0.25, 0.2)))
    table = rates.rate_table(runs, tmp_path, tmp_path / "none.csv").set_index("study")
    assert table.loc["a", "outcome_learns"] and table.loc["a", "ratio"] == pytest.approx(2.0, rel=0.1)
    assert not table.loc["b", "outcome_learns"] and math.isnan(table.loc["b", "ratio"])  # -/- is no speed-up
    assert table.loc["b", "diff"] < 0
    fit = rates.predictor_fit(table.reset_index())
    text = rates.verdict_sentence(table.reset_index(), fit)
    assert "(1 of 2 regimes, a rule set after the first results)" in text and "elsewhere (`b`) it is not shown faster" in text
    summary = rates.rate_summary(table.reset_index(), fit)
    assert "in 1 of 2 regimes" in summary and "`b` 36 % -> 25 %" in summary
    assert "outcome-only does not learn" in rates.rate_markdown(table.reset_index())


@pytest.mark.slow
def test_a_small_study_runs_extends_resumes_and_exports(tmp_path):
    settings = {"prompts_per_step": 2, "group_size": 4, "selector_coef": 0.2, "eval_every": 2, "eval_tasks": 8,
                "eval_split": "val", "log_train_every": 10, "checkpoint_every": 10, "max_new_tokens": 96}
    plan = speed.SpeedPlan("easy", "tiny", optimizer="nsgd", grid=(0.06, 0.18), search_seeds=(0,), seeds=2, steps=2,
                           max_extensions=1, test_tasks=8, settings=settings)
    chosen = speed.run_speed(plan, tmp_path / "study", workers=1, progress=False)
    for m, c in chosen.items():
        # the plan's primary measure (the choice alone, teacher-forced) scored every value: two, one extension
        assert len(c["slope_choice"]) == 3 and len(c["extended"]) == 1 and "slope_val" not in c
        for s in (0, 1):
            assert (tmp_path / "study" / rates.speed_run_name(m, c["value"], s) / "test.json").exists()
    assert (tmp_path / "study" / "warmstart" / "test.json").exists()
    before = (tmp_path / "study" / "selection.json").read_text()
    assert speed.run_speed(plan, tmp_path / "study", workers=1, progress=False) == chosen  # resumes: nothing new
    assert (tmp_path / "study" / "selection.json").read_text() == before
    # a run stopped before its adapter was saved (a study carried to a fresh machine with its checkpoint) continues
    # from the checkpoint, where a fresh start would refuse a directory that holds a run
    m = "skillgate"
    stopped = tmp_path / "study" / rates.speed_run_name(m, chosen[m]["value"], 1)
    test_before = json.loads((stopped / "test.json").read_text())
    shutil.rmtree(stopped / "adapter")
    (stopped / "test.json").unlink()
    assert speed.run_speed(plan, tmp_path / "study", workers=1, progress=False) == chosen
    assert (stopped / "adapter" / "adapter_config.json").exists()
    test_after = json.loads((stopped / "test.json").read_text())
    assert {k: v for k, v in test_after.items() if k != "seconds"} == {k: v for k, v in test_before.items()
                                                                       if k != "seconds"}
    n = protocol.export(tmp_path / "study", tmp_path / "kept")
    kept = sorted(p.name for p in (tmp_path / "kept").rglob("*") if p.is_file())
    assert n == len(kept) and set(kept) == {"plan.json", "selection.json", *protocol.KEPT}
    runs = rates.run_table(tmp_path / "kept")
    assert runs["chosen"].sum() == 4 and (runs["optimizer"] == "nsgd").all()
    other = speed.SpeedPlan("easy", "tiny", optimizer="nsgd", grid=(0.06, 0.5), search_seeds=(0,), seeds=2, steps=2,
                            max_extensions=1, test_tasks=8, settings=settings)
    with pytest.raises(ValueError, match="another plan"):
        speed.run_speed(other, tmp_path / "study", workers=1, progress=False)


def test_calibration_times_the_studys_own_steps_and_keeps_nothing(tmp_path, monkeypatch, capsys):
    from skillgate_lib.runs.calibrate import calibrate

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR read again
    plan = speed.plan_for("easy")
    timed = calibrate(plan.config("outcome", 3e-3, 0, tmp_path / "unused", 1), steps=2, eval_tasks=4, progress=False)
    assert len(timed["step_seconds"]) == 2 and timed["step_s"] > 0 and timed["eval_s"] > 0
    assert timed["eval_tasks"] == 4 and timed["threads"] == 1 and timed["model"] == "tiny"
    assert list(tmp_path.iterdir()) == []  # the temporary run is gone, and nothing was written where the plan points
    with pytest.raises(ValueError, match="steps and eval_tasks must be >= 1"):
        calibrate(plan.config("outcome", 3e-3, 0, tmp_path, 1), steps=0)


def test_the_dry_run_estimates_from_timings_measured_here_when_asked(monkeypatch, capsys, tmp_path):
    import skillgate_lib.runs.calibrate as calibration

    seen = {}

    def fake(cfg, **kw):
        seen["cfg"] = cfg
        return {"step_s": 2.0, "eval_s": 12.0, "step_seconds": [2.0, 2.0, 2.0]}

    monkeypatch.setattr(calibration, "calibrate", fake)
    plan = speed.plan_for("easy")
    assert speed.speed_main(["--regime", "easy", "--dry-run", "--calibrate", "--workers", "1", "--threads", "2",
                             "--out-dir", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    expected = speed.estimate_speed_minutes(plan, 1, 2.0, 12.0)
    assert f"estimated wall time: {expected:.0f} min with 1 workers" in out and "timed here: 2.0 s a step" in out
    assert seen["cfg"].threads == 2 and seen["cfg"].method == "outcome" and seen["cfg"].lr == plan.grid[1]


def test_the_verdict_names_each_regime_that_is_not_shown_faster(tmp_path):
    rng = np.random.default_rng(1)
    fast = 0.06 + 0.005 * rng.standard_normal(8)
    same = 0.04 + 0.005 * rng.standard_normal(8)
    runs = pd.DataFrame(_runs("a", "a", fast, 2 * fast + 0.005 * rng.standard_normal(8))
                        + _runs("b", "b", same, same + 0.005 * rng.standard_normal(8)))
    table = rates.rate_table(runs, tmp_path, tmp_path / "none.csv")
    assert table["outcome_learns"].all()
    text = rates.verdict_sentence(table, rates.predictor_fit(table))
    assert text.startswith("Outcome-only learns the choice in 30 steps in all 2 regimes; SkillGate learns it faster in 1 (")
    assert "; not shown faster in `b` (" in text and "a rule set after" not in text  # the rule left nothing out
    summary = rates.rate_summary(table, rates.predictor_fit(table))  # docs/results.md says what the verdict says
    assert "learns it faster (the ratio's interval above 1 and the paired slope difference's above 0) in 1 (" in summary
    assert "and is not shown faster in 1 (`b` " in summary


def test_the_summary_counts_a_ratio_above_1_with_a_paired_difference_covering_0_as_not_shown():
    r = pd.Series({"ratio_lo": 1.08, "ratio_hi": 2.94, "diff_lo": -0.002, "diff_hi": 0.014})
    assert rates.faster_word(r) == "not shown faster"


def test_curves_take_each_arms_chosen_runs_and_the_choice_where_logged(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from skillgate_lib.report import rate_curves

    for study, logged in (("new", True), ("old", False)):
        d = tmp_path / study
        for method in ("outcome", "skillgate"):
            for lr in (1e-3, 3e-3):
                _write_run(d / rates.speed_run_name(method, lr, 0), {0: 0.3, 5: 0.4 if lr == 3e-3 else 0.9}, {1: 0.3},
                           method=method, lr=lr)
        (d / "selection.json").write_text(json.dumps({m: {"knob": "lr", "value": 3e-3} for m in ("outcome", "skillgate")}))
        (d / "plan.json").write_text("{}")
        if logged:
            for run in d.glob("*-seed0"):
                rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
                rows = [dict(r, **{"eval/choice": 0.2 + r["step"] / 100}) if r["split"] == "eval" else r for r in rows]
                (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    c = rate_curves.curves(tmp_path)
    assert set(c["oracle_read"]) == {0.3, 0.4}  # the chosen step size's runs only
    assert c[c["study"] == "new"]["choice"].tolist() == [0.2, 0.25, 0.2, 0.25]
    assert c[c["study"] == "old"]["choice"].isna().all()
    assert rate_curves.curves(tmp_path, names=["old"])["study"].unique().tolist() == ["old"]
    fig = rate_curves.curves_figure(c)
    assert fig.axes[3].texts[0].get_text() == "not logged"  # the old study's choice panel


def test_threads_per_worker_splits_the_cores_unless_given(monkeypatch):
    monkeypatch.setattr(protocol.os, "cpu_count", lambda: 16)
    assert protocol.threads_per_worker(4) == 4 and protocol.threads_per_worker(32) == 1
    assert protocol.threads_per_worker(2, threads=3) == 3


def test_endpoints_pair_each_seed_and_say_not_shown_where_the_interval_covers_zero():
    from skillgate_lib.report import rate_endpoints

    rows = []
    for seed in range(4):
        for method, success, test in (("outcome", 0.20, 0.30), ("skillgate", 0.25 + 0.01 * seed, 0.30 + 0.02 * (-1) ** seed)):
            rows.append({"study": "a", "method": method, "seed": seed, "chosen": True, "val_success_final": success,
                         "val_oracle_read_final": 0.5, "val_choice_final": math.nan, "test_success": test,
                         "test_oracle_read": 0.9})
    rows.append(dict(rows[-1], seed=9, chosen=False, test_success=1.0))  # off the choice: not counted
    table = rate_endpoints.endpoint_table(pd.DataFrame(rows)).set_index("endpoint")
    assert "validation choice" not in table.index  # not logged: left out
    val = table.loc["validation success"]
    assert val["seeds"] == 4 and val["diff"] == pytest.approx(6.5) and val["shown"] == "SkillGate higher"
    assert table.loc["test success", "diff"] == pytest.approx(0.0, abs=1e-9) and table.loc["test success", "shown"] == "not shown"
    text = rate_endpoints.endpoint_sentence(table.reset_index())
    assert "in test success SkillGate ends higher in 0, lower in 0 and not shown to differ in 1 of 1 studies" in text


def test_the_ratio_under_each_measure_reads_each_measures_own_slopes():
    from skillgate_lib.report import rate_measures

    rng = np.random.default_rng(1)
    learning = 0.06 + 0.005 * rng.standard_normal(8)
    runs = pd.DataFrame(_runs("a", "a", learning, 2 * learning + 0.002 * rng.standard_normal(8)))
    # under the choice both arms learn at the same rate, seed by seed: no speed-up
    runs["slope_choice"] = np.tile(learning / 3, 2)
    assert rate_measures.logged_both(runs) == ["a"]
    assert rate_measures.logged_both(runs.assign(slope_choice=np.nan)) == []  # a study before the choice was logged
    table = rate_measures.ratios_under_each_measure(runs, ["a"]).set_index("study")
    assert table.loc["a", "ratio_oracle"] == pytest.approx(2.0, rel=0.05) and table.loc["a", "word_oracle"] == "faster"
    assert table.loc["a", "ratio_choice"] == pytest.approx(1.0) and table.loc["a", "word_choice"] == "not shown faster"
    shown = rate_measures.display_ratios(table.reset_index())
    assert shown.loc["a", "ratio under the choice"].startswith("1.00 [")
