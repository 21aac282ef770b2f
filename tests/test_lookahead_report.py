"""The lookahead against the rate study (report/lookahead.py): K chosen on the other studies only, the constant
left out in turn, a non-positive prediction counted as a miss, and the committed predictions read back."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from skillgate_lib.report import lookahead as L


def _table(observed: dict) -> pd.DataFrame:
    return pd.DataFrame([{"study": s, "regime": s, "optimizer": "adamw", "ratio": r, "ratio_lo": r / 1.2,
                          "ratio_hi": r * 1.2, "pred_share": 50.0, "pred_gshare": 100.0, "pred_summed": 1.5}
                         for s, r in observed.items()])


def _preds(by_k: dict) -> pd.DataFrame:
    return pd.DataFrame([{"study": s, "k": k, "ratio": v} for k, row in by_k.items() for s, v in row.items()])


def test_k_is_chosen_on_the_other_studies_and_the_constant_leaves_one_out():
    table = _table({"a": 1.5, "b": 2.0, "c": 3.0})
    preds = _preds({1: {"a": 1.0, "b": 1.0, "c": 1.0}, 2: {"a": 1.5, "b": 2.0, "c": 30.0}})
    loo = L.loo_table(table, preds).set_index("study")
    assert loo.loc["c", "k_loo"] == 2 and loo.loc["c", L.LOOKAHEAD] == 30.0  # a and b favour K = 2; c pays for it
    assert loo.loc["a", "k_loo"] == 1  # b is right at K = 2, c much better at K = 1: mean error decides
    assert loo.loc["a", L.CONSTANT] == pytest.approx(math.sqrt(2.0 * 3.0))
    s = L.loo_summary(loo.reset_index()).set_index("predictor")
    assert s.loc["lookahead, K = 2", "scored"] == False and s.loc[L.LOOKAHEAD, "scored"] == True  # noqa: E712
    assert s.loc["theory: summed-gradient share", "mean_abs_log_error"] == pytest.approx(
        np.mean(np.abs(np.log([1.5 / 1.5, 2.0 / 1.5, 3.0 / 1.5]))))


def test_a_non_positive_prediction_is_a_miss_at_the_worst_error():
    err = L._errors(np.array([2.0, 2.0, 2.0]), np.array([2.0, 1.0, -0.5]))
    assert np.isnan(err[2]) and L._score(err) == pytest.approx((0 + math.log(2) + math.log(2)) / 3)
    assert L._score(np.array([np.nan])) == 10.0


def test_verdict_says_which_wins():
    s = pd.DataFrame([{"predictor": L.LOOKAHEAD, "studies": 5, "mean_abs_log_error": 0.1, "max_abs_log_error": 0.2},
                      {"predictor": L.CONSTANT, "studies": 5, "mean_abs_log_error": 0.15, "max_abs_log_error": 0.3},
                      {"predictor": "theory: summed-gradient share", "studies": 5, "mean_abs_log_error": 0.4,
                       "max_abs_log_error": 0.6}])
    assert "beats the constant" in L.loo_verdict(s) and "summed-gradient share" in L.loo_verdict(s)
    s.loc[0, "mean_abs_log_error"] = 0.2
    assert "does not beat" in L.loo_verdict(s)


def test_predictions_read_back_only_when_complete(tmp_path):
    cfg = {"study": "x", "regime": "paper", "optimizer": "adamw", "model": "tiny", "lr": {"outcome": 3e-3, "skillgate": 3e-3},
           "seeds": [0, 1, 2]}
    ratios = [{"k": 1, "ratio": 1.5, "seeds": 3}]
    (tmp_path / "x.json").write_text(json.dumps({"config": cfg, "runs": [{}] * 6, "ratios": ratios}))
    (tmp_path / "y.json").write_text(json.dumps({"config": {**cfg, "study": "y"}, "runs": [{}] * 4, "ratios": ratios}))
    preds = L.predictions(tmp_path)
    assert set(preds["study"]) == {"x", "y"} and set(L.complete(preds, tmp_path)["study"]) == {"x"}


def test_the_verdict_sentence_reads_the_committed_predictions():
    """The README's sentence on the lookahead comes from the committed predictions and the rate study: it names the
    number of studies scored and says 'better' only when the lookahead's mean error is below the constant's."""
    from skillgate_lib.report import rates

    table = rates.rate_table(rates.all_runs())
    sentence = L.lookahead_sentence(table)
    preds = L.complete(L.predictions())
    s = L.loo_summary(L.loo_table(table, preds)).set_index("predictor")
    better = s.loc[L.LOOKAHEAD, "mean_abs_log_error"] < s.loc[L.CONSTANT, "mean_abs_log_error"]
    assert ("does better" in sentence) == better and ("does no better" in sentence) == (not better)
    assert f"{len(L.loo_table(table, preds))} studies" in sentence


def test_only_predictions_committed_before_their_runs_count_as_preregistered():
    """paper_note8_h68's prediction (6792705) precedes its runs; the seven others came after their studies."""
    from skillgate_lib.report import rates

    pre = L.preregistered(rates.rate_table(rates.all_runs()))
    assert "paper_note8_h68" in set(pre["study"])
    assert not {"paper_note8", "paper_note4", "paper_echo_f30", "paper_note8-sgd"} & set(pre["study"])
    row = pre.set_index("study").loc["paper_note8_h68"]
    assert row["predicted_lo"] < row["predicted"] < row["predicted_hi"] and row["lookahead_off"] >= 1


def test_the_cheaper_variant_is_scored_on_the_studies_both_predicted(tmp_path):
    """A variant whose predictions equal the on-policy ones predicts exactly as well; fewer than three common studies
    give no comparison."""
    import shutil

    from skillgate_lib.report import rates

    table = rates.rate_table(rates.all_runs())
    (tmp_path / "shared").mkdir()
    for path in L.PREDICT_DIR.glob("*.json"):
        shutil.copy(path, tmp_path / path.name)
    for name in ("paper_note8", "paper_note4"):
        shutil.copy(L.PREDICT_DIR / f"{name}.json", tmp_path / "shared" / f"{name}.json")
    assert L.variant_table(table, tmp_path).empty and L.variant_sentence(L.variant_table(table, tmp_path)) == ""
    shutil.copy(L.PREDICT_DIR / "paper_echo_f30.json", tmp_path / "shared" / "paper_echo_f30.json")
    v = L.variant_table(table, tmp_path)
    assert set(v["study"]) == {"paper_note8", "paper_note4", "paper_echo_f30"} and len(v) == 6
    own, cheap = (v[v["predictor"].str.contains(w)].set_index("study")["off"] for w in ("own", "shared"))
    assert (own == cheap).all() and (own >= 1).all()
    assert "predicts as well" in L.variant_sentence(v)


def test_a_preregistered_prediction_is_judged_at_the_k_it_was_committed_to():
    """paper_note8_h68's commit stated K = 5, its file's last K; leave-one-out over later studies may choose another
    K, which must not move the preregistered number."""
    from skillgate_lib.report import rates

    table = rates.rate_table(rates.all_runs())
    row = L.preregistered(table).set_index("study").loc["paper_note8_h68"]
    preds = L.complete(L.predictions(L.PREDICT_DIR), L.PREDICT_DIR)
    at5 = preds[(preds["study"] == "paper_note8_h68") & (preds["k"] == 5)].iloc[0]
    assert row["k"] == 5 and row["predicted"] == at5["ratio"]


def test_a_preregistered_study_without_a_ratio_keeps_its_row(monkeypatch):
    """Whether a prediction preceded its runs does not depend on the result: a study where outcome-only is not shown
    to learn (no ratio) is still preregistered, its observation nan; the sentence says there is no ratio."""
    import math

    from skillgate_lib.report import rates

    rng = np.random.default_rng(0)
    rows = [{"study": s, "regime": s, "optimizer": "adamw", "model": "tiny", "method": m, "seed": i, "chosen": True,
             "lr": 3e-3, "slope_val": v, "slope_onpolicy": v, "half_gap_step": 10.0, "val_oracle_read_0": 0.4,
             "val_oracle_read_final": 0.5, "val_success_final": 0.2}
            for s, (o, g) in {"learns": (0.05, 0.1), "stalls": (0.0, 0.05)}.items()
            for m, base in (("outcome", o), ("skillgate", g)) for i, v in enumerate(base + 0.003 * rng.standard_normal(8))]
    table = rates.rate_table(pd.DataFrame(rows), None, None)
    preds = pd.DataFrame([{"study": s, "k": k, "ratio": 2.0, "ratio_lo": 1.5, "ratio_hi": 3.0, "file": f"{s}.json"}
                          for s in ("learns", "stalls") for k in (1, 5)])
    monkeypatch.setattr(L, "predictions", lambda root: preds)
    monkeypatch.setattr(L, "complete", lambda p, root: p)
    monkeypatch.setattr(L, "_added_by", lambda *paths: ("a" if all(str(p).endswith(".json") and "selection" not in str(p)
                                                                    for p in paths) else "b") * 40)
    monkeypatch.setattr(L, "_git", lambda *args: type("Done", (), {"returncode": 0})())
    pre = L.preregistered(table).set_index("study")
    assert set(pre.index) == {"learns", "stalls"} and pre.loc["stalls", "inside"] is None
    assert math.isnan(pre.loc["stalls", "observed"]) and math.isnan(pre.loc["stalls", "lookahead_off"])
    assert pre.loc["learns", "inside"] in (True, False) and pre.loc["learns", "lookahead_off"] >= 1
    text = L.preregistered_sentence(pre.reset_index())
    assert "Preregistered for `stalls` (prediction in aaaaaaa, runs in bbbbbbb): " in text
    assert "the study observed no ratio (outcome-only's speed interval does not lie above 0)." in text


def test_a_prediction_committed_after_a_carried_run_is_not_preregistered(tmp_path, monkeypatch):
    """A long study is carried across checkouts (``data/runs/in_progress/speed/<study>``) long before it is exported:
    its runs begin with the first commit holding a carried run's records, not with its ``selection.json``, so a
    prediction committed between the two is a retro-prediction; one committed before the first carry counts, with
    that carry as the runs' commit."""
    import subprocess

    from skillgate_lib import paths
    from skillgate_lib.report import rates

    rows = [{"study": "s", "regime": "s", "optimizer": "adamw", "model": "m", "method": m, "seed": i, "chosen": True,
             "lr": 3e-4, "slope_val": v, "slope_onpolicy": v, "half_gap_step": 10.0, "val_oracle_read_0": 0.4,
             "val_oracle_read_final": 0.5, "val_success_final": 0.2}
            for m, base in (("outcome", 0.05), ("skillgate", 0.1)) for i, v in enumerate(base + 0.001 * np.arange(8))]
    table = rates.rate_table(pd.DataFrame(rows), None, None)
    preds = pd.DataFrame([{"study": "s", "k": 5, "ratio": 2.0, "ratio_lo": 1.5, "ratio_hi": 3.0, "file": "s.json"}])
    monkeypatch.setattr(L, "predictions", lambda root: preds)
    monkeypatch.setattr(L, "complete", lambda p, root: p)

    def history(repo: Path, order: list[str]) -> list[str]:
        """A repository whose commits add ``order``'s files in turn; returns the commits' ids."""
        def git(*args):
            return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout
        repo.mkdir()
        git("init", "-q")
        for rel in order:
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text("{}\n")
            git("add", rel)
            git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--no-verify", "-m", rel)
        return git("log", "--reverse", "--format=%H").split()

    carried = "data/runs/in_progress/speed/s/outcome-lr0.0003-seed0/metrics.jsonl"
    predicted, exported = "data/runs/predict/s.json", "data/runs/speed/s/selection.json"
    for name, order, counts in (("late", [carried, predicted, exported], False),
                                ("early", [predicted, carried, exported], True),
                                ("running", [predicted, carried], False)):  # not exported yet: left out
        repo = tmp_path / name
        ids = history(repo, order)
        monkeypatch.setattr(paths, "REPO_ROOT", repo)
        pre = L.preregistered(table, repo / "data/runs/predict", repo / "data/runs/speed")
        assert (not pre.empty) == counts, (name, pre)
        assert list(pre.columns) == L.PREREGISTERED_COLUMNS and pre[pre["study"] == "s"].empty != counts  # as read
        if counts:
            assert pre.set_index("study").loc["s", "runs_commit"] == ids[order.index(carried)][:7]
