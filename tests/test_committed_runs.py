"""The committed comparison runs (data/runs/compare) are what their adapters produce.

Re-evaluating a committed run's final LoRA adapter on the fixed held-out set, with the
run's own settings and thread count, gives the final evaluation its ``metrics.jsonl`` logged.
"""

from __future__ import annotations

import pytest
import torch

from skillgate_lib import logs, methods, paths
from skillgate_lib.report import results
from skillgate_lib.runs.evaluate import evaluate, load_adapter, summarize
from skillgate_lib.runs.train import TrainConfig, make_env

RUNS = paths.DATA_DIR / "runs" / "compare"

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("run", ["skillgate-seed0", "outcome-seed1"])
def test_committed_adapter_reproduces_its_logged_final_evaluation(run):
    run_dir = RUNS / run
    model, tokenizer, config = load_adapter(run_dir)
    cfg = TrainConfig(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in config.items()
                         if k in TrainConfig.__dataclass_fields__})
    torch.set_num_threads(cfg.threads)
    try:
        episodes = evaluate(model, tokenizer, make_env(cfg, train=False), cfg.eval_tasks, cfg.max_new_tokens,
                            temperature=cfg.temperature, split=config.get("eval_split", "eval"))
    finally:
        torch.set_num_threads(2)
    logged = logs.read_metrics(run_dir).query("split == 'eval'").sort_values("step").iloc[-1]
    now = summarize(episodes)
    for key in ("eval/success", "eval/oracle_read", "eval/misleading_read", "eval/reads"):
        assert now[key] == pytest.approx(logged[key]), key


def test_committed_comparison_is_complete():
    table = results.final_metrics(RUNS)
    assert set(table["method"]) == {"sft", *methods.compared()}
    assert (table.query("method != 'sft'").groupby("method").size() == 3).all()


STUDY = paths.DATA_DIR / "runs" / "study" / "paper"


def test_a_committed_study_adapter_reproduces_its_test_set_numbers():
    """The powered study's reported numbers are what its adapters produce on the test set
    (a SkillGate run at the chosen lambda, on a seed beyond the search)."""
    import json

    from skillgate_lib.runs import protocol, study

    selection = json.loads((STUDY / "selection.json").read_text())
    plan = study.paper_plan()
    run = STUDY / study.study_run_name(plan.arm("skillgate"), selection["skillgate"]["value"], max(plan.search_seeds) + 1)
    logged = json.loads((run / "test.json").read_text())
    try:
        now = protocol.evaluate_on_test(run, plan.regime, plan.test_tasks, threads=1)
    finally:
        torch.set_num_threads(2)
    for key in ("test/success", "test/oracle_read", "test/misleading_read", "test/reads"):
        assert now[key] == pytest.approx(logged[key]), key


def test_the_dose_response_audits_only_outcome_runs_that_read():
    """In the committed paper-lookup sweep one outcome-only seed stopped reading: it is counted, not averaged
    (its Share would count as 0 and its dilution as infinite); the paired differences keep all 8 seeds."""
    import math

    from skillgate_lib.report import study as study_report

    dose = study_report.dose_response({"paper-lookup": paths.DATA_DIR / "runs" / "study" / "paper-lookup"}, n_boot=50)
    row = dose.iloc[0]
    assert row["audit_runs_without_reads"] == 1 and row["seeds"] == 8
    assert math.isfinite(row["audit_dilution"]) and row["audit_share_median"] > 0


def test_the_committed_paper_echo_outcome_run_shows_the_papers_share_and_a_moderate_value():
    """Issue 18's gates on the committed outcome-only run of ``paper_echo`` (notebook 02's contrast):
    >= 1,024 trajectories, median Share <= 2 % in the longest bin and >= 5x below the shortest,
    Value between +5 and +25 pp with its 95 % interval above 0. (Sign does not rise there; the
    notebook prints that, and nothing here asserts it.)"""
    from skillgate_lib.audit import run_audit

    result = run_audit(paths.DATA_DIR / "runs" / "audit" / "paper_echo-outcome", n_boot=500, seed=0)
    bins, ov = result.bins, result.overall
    assert result.n_rows >= 1024
    assert bins["share_median"].iloc[-1] <= 0.02 and result.dilution >= 5.0
    assert 0.05 <= ov["value"] <= 0.25 and ov["value_lo"] > 0
    assert logs.read_config(paths.DATA_DIR / "runs" / "audit" / "paper_echo-outcome")["step_echo"] == 4


def test_the_committed_paper_echo_f30_outcome_run_meets_every_audit_gate():
    """Issue 18's gates, Sign included, on the committed outcome-only run of ``paper_echo_f30`` from the
    one-read warm start (notebook 02's default): >= 1,024 trajectories; median Share <= 2 % in the longest
    bin and >= 5x below the shortest; wrong-signed reads >= 30 % in the longest bin, rising with H
    (Spearman p <= 0.05); Value between +5 and +25 pp with its 95 % interval above 0."""
    from skillgate_lib.audit import run_audit

    run_dir = paths.DATA_DIR / "runs" / "audit" / "paper_echo_f30-outcome"
    result = run_audit(run_dir, n_boot=500, seed=0)
    bins, ov = result.bins, result.overall
    trend = result.trends.set_index("measure")
    assert result.n_rows >= 1024
    assert bins["share_median"].iloc[-1] <= 0.02 and result.dilution >= 5.0
    assert bins["sign_wrong"].iloc[-1] >= 0.30
    assert trend.loc["sign_wrong", "rho"] > 0 and trend.loc["sign_wrong", "p_value"] <= 0.05
    assert 0.05 <= ov["value"] <= 0.25 and ov["value_lo"] > 0
    cfg = logs.read_config(run_dir)
    assert (cfg["step_failure"], cfg["lookalike_agreement"], cfg["step_echo"]) == (0.3, 0.3, 4)
    assert cfg["model"] == "tiny-echo-one"


def test_the_committed_paper_note8_outcome_run_starves_the_update_and_still_learns_the_choice():
    """The note regime's gates on its committed outcome-only run: every rollout logs its gradient weights;
    median Gradient Share <= 2 % in the longest bin and >= 5x below the shortest, falling with H (Spearman
    p <= 0.05); Value between +5 and +25 pp with its 95 % interval above 0; >= 1,024 trajectories. And what it
    measured: held-out oracle-read still rises by more than 20 points in its 40 steps."""
    from skillgate_lib.audit import run_audit

    run_dir = paths.DATA_DIR / "runs" / "audit" / "paper_note8-outcome"
    result = run_audit(run_dir, n_boot=500, seed=0)
    bins, ov = result.bins, result.overall
    trend = result.trends.set_index("measure")
    assert result.n_rows >= 1024 and result.n_grad == result.n_rows
    assert bins["gshare_median"].iloc[-1] <= 0.02 and result.grad_dilution >= 5.0
    assert trend.loc["gshare_median", "rho"] < 0 and trend.loc["gshare_median", "p_value"] <= 0.05
    assert 0.05 <= ov["value"] <= 0.25 and ov["value_lo"] > 0
    cfg = logs.read_config(run_dir)
    assert (cfg["step_failure"], cfg["lookalike_agreement"], cfg["step_note"], cfg["model"]) == (0.3, 0.3, 8, "tiny-note8")
    held_out = logs.read_metrics(run_dir).query("split == 'eval'").sort_values("step")["eval/oracle_read"]
    assert held_out.iloc[-1] > held_out.iloc[0] + 0.2
