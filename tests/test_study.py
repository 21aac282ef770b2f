"""The study protocol: validation and test sets apart, a fixed plan, selection on validation only."""

from __future__ import annotations

import json

import pytest

from skillgate_lib.env import SkillSlateEnv, in_split
from skillgate_lib.runs import protocol, study
from skillgate_lib.runs.evaluate import heldout_tasks


def _pair(task) -> str:
    return f"{task.oracle}-s{task.start}"


def test_validation_and_test_sets_share_no_chain_and_the_test_set_is_distinct():
    env = SkillSlateEnv()
    val, _ = heldout_tasks(env, 256, "val")
    test, _ = heldout_tasks(env, 1024, "test")
    assert {_pair(t) for t in val}.isdisjoint({_pair(t) for t in test})
    assert len({t.task_id for t in test}) == 1024
    assert all(in_split(_pair(t), "eval") for t in val + test)
    train = env.sample_tasks(512, "train", seed=1)
    assert {_pair(t) for t in train}.isdisjoint({_pair(t) for t in val + test})


def test_the_training_chains_can_be_drawn_for_the_generalisation_gap_and_nothing_else_is_a_split():
    env = SkillSlateEnv()
    train, _ = heldout_tasks(env, 256, "train")
    assert all(in_split(_pair(t), "train") for t in train)
    with pytest.raises(ValueError, match="split must be eval, val, test or train; got 'training'"):
        heldout_tasks(env, 8, "training")


def test_asking_the_test_split_for_more_than_it_holds_names_its_size():
    with pytest.raises(ValueError, match="distinct instances"):
        SkillSlateEnv(horizons=(1,)).distinct_tasks(5000, "test", seed=0)


def test_training_cannot_evaluate_on_the_test_set():
    with pytest.raises(ValueError, match="eval_split"):
        study.TrainConfig(eval_split="test")


def test_every_method_gets_the_same_number_of_configurations():
    plan = study.paper_plan()
    assert len({len(a.values) for a in plan.arms}) == 1
    assert plan.arm("skillgate").knob == "selector_coef" and plan.arm("skillgate").values[0] == 0.2
    assert plan.arm("outcome").seeds >= 8 and min(a.seeds for a in plan.arms) >= 5


def test_a_choice_at_an_edge_extends_the_grid_by_its_ratio():
    assert protocol.edge_extension([1e-3, 3e-3, 1e-2], 1e-2) == pytest.approx(1e-2 * 1e-2 / 3e-3, rel=1e-3)
    assert protocol.edge_extension([1e-3, 3e-3, 1e-2], 1e-3) == pytest.approx(1e-3 * 1e-3 / 3e-3, rel=1e-3)
    assert protocol.edge_extension([1e-3, 3e-3, 1e-2], 3e-3) is None
    assert protocol.edge_extension([0.2], 0.2) is None


def test_the_committed_paper_plan_reads_back_unchanged():
    """A plan field added later (extend, an arm's also) stays out of plan.json at its default, so the committed
    study still resumes and its selection reads as before."""
    from skillgate_lib import paths

    committed = json.loads((paths.DATA_DIR / "runs" / "study" / "paper" / "plan.json").read_text())
    assert study.paper_plan().to_json() == committed
    arm = study.paper_plan().arm("outcome")
    assert study.study_run_name(arm, 0.005, 3) == "outcome-lr0.005-seed3"
    assert study.point_label(arm, {"lr": 0.005}) == "0.005"


def test_the_note8_table_searches_one_lr_grid_for_every_arm_and_lambda_jointly_for_skillgate():
    plan = study.note8_plan()
    assert plan.regime == "paper_note8" and plan.model == "tiny-note8" and plan.extend >= 1
    assert {a.values for a in plan.arms} == {study.NOTE8_LRS} and len(study.NOTE8_LRS) >= 3
    assert min(a.seeds for a in plan.arms) >= 8 and plan.test_tasks >= 1024
    assert {"skillgate", "skillgate_exec_read", "outcome", "utility", "selection_bc", "skill_free", "masked_exec",
            "shaped"} == {a.method for a in plan.arms}
    sg = plan.arm("skillgate")
    points = sg.points()
    assert len(points) == 6 and {"lr": 1e-3, "selector_coef": 1.0} in points
    assert study.study_run_name(sg, {"lr": 1e-3, "selector_coef": 1.0}, 0) == "skillgate-lr0.001-selector_coef1-seed0"
    assert study.point_label(sg, {"lr": 1e-3, "selector_coef": 1.0}) == "lr=0.001,selector_coef=1"
    config = plan.config(sg, {"lr": 1e-3, "selector_coef": 1.0}, 0, study.Path("out"), 1, "cpu")
    assert config.lr == 1e-3 and config.selector_coef == 1.0 and config.regime == "paper_note8"
    assert plan.to_json()["extend"] == plan.extend and "also" in plan.to_json()["arms"][0]
    assert "also" not in plan.to_json()["arms"][2]
    assert study.n_runs(plan) == 2 * (6 * 2 + 6) + 6 * (3 * 2 + 6)


def _joint_plan() -> study.Plan:
    settings = {"prompts_per_step": 2, "group_size": 4, "eval_every": 1, "eval_tasks": 8,
                "eval_split": "val", "log_train_every": 1, "max_draws": 1}
    arms = (study.Arm("skillgate", "lr", (1e-3, 1e-2), 2, also=(("selector_coef", (0.2, 1.0)),)),
            study.Arm("outcome", "lr", (1e-3, 1e-2), 2))
    return study.Plan("joint", "easy", arms, search_seeds=(0,), steps=1, test_tasks=12, settings=settings, extend=1)


@pytest.mark.slow
def test_a_joint_search_selects_a_point_extends_an_edge_and_the_report_reads_the_choice(tmp_path):
    plan = _joint_plan()
    chosen = study.run_study(plan, tmp_path, workers=1, progress=False, device="cpu")
    sg, out = chosen["skillgate"], chosen["outcome"]
    assert set(sg["point"]) == {"lr", "selector_coef"} and sg["value"] == sg["point"]["lr"]
    assert sg["val_success"][study.point_label(plan.arms[0], sg["point"])] == max(sg["val_success"].values())
    assert "point" not in out and out["val_success"][f"{out['value']:g}"] == max(out["val_success"].values())
    for m, entry in chosen.items():  # two values, so any choice sits at an edge: each grid grew once, no more
        assert len(entry["extended"]) == 1 and entry["extended"][0] in (1e-4, 0.1)
        assert entry["at_edge"] == (entry["value"] in (min(entry["extended"][0], 1e-3), max(entry["extended"][0], 1e-2)))
    assert len(sg["val_success"]) == 6 and len(out["val_success"]) == 3
    runs = study.runs_at_chosen_point(plan, tmp_path, chosen)
    assert len(runs) == 4 and all((r / "test.json").exists() for r in runs)
    from skillgate_lib.report import study as study_report

    tests = study_report.test_results(tmp_path)
    assert sorted(tests["method"]) == ["outcome", "outcome", "sft", "skillgate", "skillgate"]
    curves = study_report.validation_curves(tmp_path)
    assert curves.loc[curves["method"] == "skillgate", "point"].nunique() == 6
    assert curves.query("method == 'skillgate' and chosen")["seed"].nunique() == 2
    assert study.run_study(plan, tmp_path, workers=1, progress=False, device="cpu") == chosen  # resumes


def _tiny_plan() -> study.Plan:
    settings = {"prompts_per_step": 2, "group_size": 4, "lr": 5e-3, "eval_every": 1, "eval_tasks": 8,
                "eval_split": "val", "log_train_every": 1, "max_draws": 1}
    arms = (study.Arm("skillgate", "selector_coef", (0.2, 1.0), 2), study.Arm("outcome", "lr", (5e-3, 1e-2), 2))
    return study.Plan("tiny", "easy", arms, search_seeds=(0,), steps=1, test_tasks=12, settings=settings)


@pytest.mark.slow
def test_a_study_selects_on_validation_tests_the_choice_and_refuses_another_plan(tmp_path):
    plan = _tiny_plan()
    chosen = study.run_study(plan, tmp_path, workers=1, progress=False)
    for m, arm in (("skillgate", plan.arms[0]), ("outcome", plan.arms[1])):
        scores = chosen[m]["val_success"]
        assert scores[f"{chosen[m]['value']:g}"] == max(scores.values())
        chosen_runs = [tmp_path / study.study_run_name(arm, chosen[m]["value"], s) for s in (0, 1)]
        assert all((r / "test.json").exists() for r in chosen_runs)
        other = [v for v in arm.values if v != chosen[m]["value"]][0]
        assert not (tmp_path / study.study_run_name(arm, other, 0) / "test.json").exists()  # no peeking
    record = json.loads((tmp_path / "warmstart" / "test.json").read_text())
    assert record["tasks"] == 12 and 0 <= record["test/success"] <= 1
    config = json.loads((tmp_path / study.study_run_name(plan.arms[1], chosen["outcome"]["value"], 1) / "config.json").read_text())
    assert config["eval_split"] == "val" and config["steps"] == 1
    from skillgate_lib.report import study as study_report

    tests = study_report.test_results(tmp_path)
    assert sorted(tests["method"]) == ["outcome", "outcome", "sft", "skillgate", "skillgate"]
    assert set(study_report.validation_curves(tmp_path)["step"]) == {0, 1}
    again = study.run_study(plan, tmp_path, workers=1, progress=False)  # resumes: nothing left to do
    assert again == chosen
    changed = study.Plan(plan.name, plan.regime, plan.arms, search_seeds=(0,), steps=2, test_tasks=12,
                         settings=plan.settings)
    with pytest.raises(ValueError, match="another plan"):
        study.run_study(changed, tmp_path, workers=1, progress=False)


def _fake_study(root, values):
    """A study directory with test.json files only: ``values[method][seed] = (success, oracle_read)``."""
    (root / "selection.json").write_text(json.dumps({m: {"knob": "lr", "value": 0.005, "val_success": {}} for m in values}))
    for m, by_seed in values.items():
        for s, (succ, orc) in by_seed.items():
            run = root / f"{m}-lr0.005-seed{s}"
            run.mkdir()
            (run / "config.json").write_text(json.dumps({"method": m, "credit": m, "skill_free": False, "seed": s, "lr": 0.005}))
            (run / "test.json").write_text(json.dumps({"tasks": 100, "test/success": succ, "test/oracle_read": orc,
                                                       "test/misleading_read": 0.5, "test/reads": 1.0,
                                                       "test/success/horizon=1": succ}))
    (root / "other-lr0.01-seed0").mkdir()  # a search run at the value not chosen: never read
    (root / "other-lr0.01-seed0" / "config.json").write_text(json.dumps({"method": "outcome", "credit": "outcome",
                                                                         "skill_free": False, "seed": 0, "lr": 0.01}))
    (root / "other-lr0.01-seed0" / "test.json").write_text(json.dumps({"tasks": 100, "test/success": 1.0}))


def test_paired_differences_pair_by_seed(tmp_path):
    from skillgate_lib.report import study as study_report

    _fake_study(tmp_path, {"skillgate": {0: (0.30, 0.6), 1: (0.10, 0.4), 2: (0.20, 0.5)},
                           "outcome": {0: (0.20, 0.5), 1: (0.00, 0.3), 2: (0.10, 0.4), 3: (0.9, 0.9)}})
    tests = study_report.test_results(tmp_path)
    assert len(tests) == 7  # the unchosen value's run is left out
    diffs = study_report.paired_differences(tests).set_index("baseline")
    assert diffs.loc["outcome", "seeds"] == 3
    assert diffs.loc["outcome", "success"] == pytest.approx(10.0)  # +10 pp on every shared seed
    assert diffs.loc["outcome", "success_lo"] == pytest.approx(10.0)
    table = study_report.summary_table(tests).set_index("method")
    assert table.loc["outcome", "seeds"] == 4 and table.loc["outcome", "success"] == pytest.approx(30.0)
    assert table.loc["skillgate", "success_lo"] <= 20.0 <= table.loc["skillgate", "success_hi"]
    assert "[" in study_report.table_markdown(table.reset_index())
    assert study_report.paired_differences_by_horizon(tests)["diff"].iloc[0] == pytest.approx(10.0)
    import matplotlib.pyplot as plt

    from skillgate_lib.report import study_plots as plots_study

    fig = plots_study.rates_and_differences(table.reset_index(), diffs.reset_index())
    assert len(fig.axes) == 2
    plt.close(fig)


def test_named_sweeps_carry_their_regime_and_warm_start():
    selection = {"skillgate": {"knob": "selector_coef", "value": 0.2}, "outcome": {"knob": "lr", "value": 5e-3}}
    plan = study.named_sweep("paper-lookup", selection)
    assert (plan.regime, plan.model, plan.name) == ("paper", "tiny-lookup", "sweep-paper-tiny-lookup")
    assert study.named_sweep("easy", selection).model == "tiny"
    with pytest.raises(ValueError, match="unknown sweep 'hard'"):
        study.named_sweep("hard", selection)


def test_the_study_table_carries_the_choice_speed_where_a_run_chooses_on_policy(tmp_path):
    from skillgate_lib import paths
    from skillgate_lib.report import rates
    from skillgate_lib.report import study as study_report

    paper = paths.DATA_DIR / "runs" / "study" / "paper"
    tables = study_report.study_tables(paper)
    speed = tables.tests.set_index("run")["speed"]
    run = "outcome-lr0.005-seed0"
    assert speed[run] == pytest.approx(rates.speed_measures(paper / run)["slope_onpolicy"])
    by_method = tables.tests.groupby("method")["speed"]
    assert by_method.apply(lambda s: s.isna().all())[["sft", "selection_bc", "skill_free"]].all()  # nothing to measure
    assert by_method.apply(lambda s: s.notna().all())[["outcome", "skillgate", "utility"]].all()
    diffs = tables.diffs.set_index("baseline")
    pairs = tables.tests.query("method in ['skillgate', 'outcome']").pivot(index="seed", columns="method", values="speed")
    assert diffs.loc["outcome", "speed"] == pytest.approx((pairs["skillgate"] - pairs["outcome"]).mean())
    assert "choice speed (on-policy)" in tables.markdown and "| skill-free RL | 5 |" in tables.markdown
    written = study_report.write_tables(tables, tmp_path, "results_table")
    assert [p.name for p in written] == ["results_table.md", "results_table.csv", "results_table_paired.csv"]
    assert (tmp_path / "results_table.md").read_text() == tables.markdown


def test_the_search_and_the_curves_of_a_study_read_back_from_its_files():
    from skillgate_lib import paths
    from skillgate_lib.report import study as study_report

    note8 = paths.DATA_DIR / "runs" / "study" / "paper_note8"
    selection = json.loads((note8 / "selection.json").read_text())
    search = study_report.search_markdown(note8).splitlines()
    assert len(search) == 2 + len(selection)
    row = {line.split(" | ")[0].strip("| `"): line for line in search[2:]}
    for method, entry in selection.items():
        assert row[method].endswith("| yes, after the last extension |") == entry["at_edge"], method
        assert f"| {len(entry['val_success'])} |" in row[method]
    assert "| lr 0.001, selector_coef 0.2 | 28.1 |" in row["skillgate"]
    curves = study_report.curves_markdown(note8).splitlines()
    val = study_report.validation_curves(note8)
    chosen = val[val["chosen"] & (val["method"] == "outcome")]
    final = 100 * chosen[chosen["step"] == chosen["step"].max()]["oracle_read"].mean()
    outcome = next(line for line in curves if line.startswith("| `outcome` |"))
    assert outcome.startswith(f"| `outcome` | {chosen['seed'].nunique()} |")
    assert outcome.split(" | ")[2 + chosen["step"].nunique() - 1] == f"{final:.1f}"


def test_a_rate_interval_over_seeds_stays_inside_0_and_1_and_holds_the_mean():
    """One seed lagging the rest pushed a Student-t interval past 100 % (96.9 [91.6, 102.3]); cut to [0, 1] it
    keeps its lower bound and its coverage."""
    from skillgate_lib.audit import t_interval
    from skillgate_lib.report import study as study_report

    p = [0.99, 0.995, 0.99, 0.812, 0.98, 0.99, 0.985, 0.99]
    assert t_interval(p)[2] > 1  # what the table printed before
    mean, lo, hi = study_report.rate_interval(p)
    assert (mean, lo) == pytest.approx(t_interval(p)[:2]) and hi == 1.0 and lo <= mean
    assert study_report.rate_interval([0.0, 0.002, 0.0, 0.001])[1] == 0.0
    assert study_report.rate_interval([0.25] * 8) == (0.25, 0.25, 0.25)


def test_a_supplement_replaces_only_the_arms_it_searched_again(tmp_path):
    import shutil

    from skillgate_lib import paths
    from skillgate_lib.report import study as study_report

    for name in ("paper_note8", "paper_note8-edge"):
        shutil.copytree(paths.DATA_DIR / "runs" / "study" / name, tmp_path / name)
    main = study_report.test_results(tmp_path / "paper_note8")
    merged = study_report.with_supplements(main, tmp_path / "paper_note8")
    bc = merged[merged["method"] == "selection_bc"]
    assert len(bc) == 8 and bc["run_dir"].str.contains("paper_note8-edge").all()
    rest = merged[merged["method"] != "selection_bc"].sort_values("run_dir").reset_index(drop=True)
    assert rest.equals(main[main["method"] != "selection_bc"].sort_values("run_dir").reset_index(drop=True))
    assert len(merged) == len(main)
