"""Notebook 06's tables (report/pretrained.py): the warm start's gates and log, the probes side by side, and a rate
study's state read from what its folder holds; bad files are named in the error."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from skillgate_lib import paths
from skillgate_lib.report import pretrained as P

SMOL = paths.DATA_DIR / "models" / "smollm2-sft"
PROBES = paths.DATA_DIR / "runs" / "diagnosis" / "probes"


def test_the_committed_warm_starts_gates_and_log():
    gates = P.gates(SMOL)
    assert gates["measure"].tolist() == ["success", "oracle_read", "reads", "step_acc"]
    summary = json.loads((SMOL / "gates.json").read_text())["summary"]
    assert gates.set_index("measure").loc["success", "value"] == summary["eval/success"]
    assert "evaluate" in gates.attrs["command"]
    log = P.warmstart_log(SMOL)
    assert set(log["split"]) == {"train", "heldout"} and set(log["token"]) == set(P.TOKEN_TYPES)
    assert log.attrs["batch_size"] == json.loads((SMOL / "warmstart_config.json").read_text())["batch_size"]
    assert log["accuracy"].between(0, 1).all()


def test_a_gate_outside_its_range_is_not_met_and_bad_files_are_named(tmp_path):
    summary = {"eval/success": 0.05, "eval/oracle_read": 0.5, "eval/reads": 1.0, "eval/step_acc": 0.95}
    (tmp_path / "gates.json").write_text(json.dumps({"summary": summary, "command": "x", "seconds": 1}))
    met = P.gates(tmp_path).set_index("measure")["met"]
    assert not met["success"] and met.drop("success").all()
    (tmp_path / "gates.json").write_text(json.dumps({"summary": {"eval/success": 0.5}}))
    with pytest.raises(ValueError, match=r"gates.json: field 'eval/oracle_read'"):
        P.gates(tmp_path)
    with pytest.raises(FileNotFoundError, match="no gate evaluation"):
        P.gates(tmp_path / "none")
    (tmp_path / "train_log.jsonl").write_text('{"step": 1, "acc/name": 0.5, "uncertainty/name": 0.5}\n{oops\n')
    with pytest.raises(ValueError, match=r"train_log.jsonl, line 2"):
        P.warmstart_log(tmp_path)
    (tmp_path / "train_log.jsonl").write_text('{"step": 1, "acc/name": 0.5}\n')
    with pytest.raises(ValueError, match=r"train_log.jsonl, line 1: field 'uncertainty/name' missing"):
        P.warmstart_log(tmp_path)


def test_every_committed_probe_is_one_row_and_the_figure_draws_them(tmp_path):
    t = P.probes(PROBES)
    assert len(t) == len(list(PROBES.glob("*.json"))) and {"smollm2-sft", "tiny"} <= set(t["model"])
    assert (t["gshare_median_long"] > 0).all() and (t["value_lo"] <= t["value"]).all()
    fig = P.probe_figure(t, "smollm2-sft")
    labels = [x.get_text() for x in fig.axes[0].get_yticklabels()]
    assert len(labels) == len(t) and sum("(smollm2-sft)" in x for x in labels) == (t["model"] == "smollm2-sft").sum()
    with pytest.raises(FileNotFoundError, match="no probe summaries"):
        P.probes(tmp_path)


def test_the_dilution_reads_one_probe_per_model_and_names_the_ambiguous_ones():
    t = P.probes(PROBES)
    d = P.dilution(t, "smollm2-sft", "tiny")
    rows = t.loc[[d["probes"]["model"], d["probes"]["tiny"]]]
    assert d["ratio"] == pytest.approx(rows["gshare_median_long"].iloc[1] / rows["gshare_median_long"].iloc[0])
    notes = t.loc[d["probes"]["notes"], "gshare_median_long"]
    assert (d["note_min"], d["note_max"]) == (notes.min(), notes.max()) and len(notes) >= 3
    inside = t.copy()
    inside.loc["smollm2-paper", "gshare_median_long"] = notes.mean()  # inside the note range: no distance to it
    assert P.dilution(inside, "smollm2-sft", "tiny")["log_to_notes"] == 0.0
    twice = pd.concat([t, t.loc[["paper"]].rename(index={"paper": "paper-again"})])
    with pytest.raises(ValueError, match=r"expected one probe of 'tiny' in 'paper', found 2: \['paper', 'paper-again'\]"):
        P.dilution(twice, "smollm2-sft", "tiny")


def _study(root, name, plan=True, runs=0, selected=False):
    d = root / name
    d.mkdir(parents=True)
    if plan:
        (d / "plan.json").write_text(json.dumps({"regime": "r", "grid": [1e-4, 3e-4], "settings": {"eval_every": 5}}))
    for i in range(runs):
        (d / f"outcome-lr0.0001-seed{i}").mkdir()
    if selected:
        (d / "selection.json").write_text("{}")
    return d


def test_a_studys_state_follows_what_its_folder_holds(tmp_path):
    _study(tmp_path, "a", plan=False)
    _study(tmp_path, "b")
    _study(tmp_path, "c", runs=2)
    _study(tmp_path, "d", runs=2, selected=True)
    states = {s: P.study_state(tmp_path, s) for s in "abcd"}
    assert {s: v["state"] for s, v in states.items()} == {"a": "no plan", "b": "planned", "c": "searching", "d": "run"}
    assert states["c"]["runs"] == 2 and P.study_state(tmp_path, "missing")["state"] == "no plan"
    table = P.plan_table(states["b"]["plan"])
    assert table.loc["grid", "value"] == "0.0001, 0.0003" and table.loc["eval_every", "value"] == "5"


def test_a_committed_prediction_is_read_and_a_missing_one_is_empty():
    root = paths.DATA_DIR / "runs" / "predict"
    pred = P.prediction(root, "paper_note8_h68")
    assert pred["k"].tolist() == list(range(1, len(pred) + 1)) and (pred["study"] == "paper_note8_h68").all()
    assert P.prediction(root, "no_such_study").empty
    assert isinstance(P.prediction(root, "no_such_study"), pd.DataFrame)


def _arm_rows(study, model, outcome, skillgate, success=(0.20, 0.25), oracle=(0.50, 0.60), regime="paper"):
    """Both arms of a study at their choice, one row per seed, as :func:`rates.run_table` gives them."""
    import numpy as np

    rng = np.random.default_rng(len(study))
    rows = []
    for i, (method, slope) in enumerate((("outcome", outcome), ("skillgate", skillgate))):
        rows += [{"study": study, "regime": regime, "optimizer": "adamw", "model": model, "method": method,
                  "seed": s, "chosen": True, "lr": 3e-4, "slope_val": v, "slope_onpolicy": v, "half_gap_step": 10.0,
                  "val_oracle_read_0": 0.4, "val_oracle_read_final": oracle[i] + 0.01 * rng.standard_normal(),
                  "val_success_final": success[i] + 0.01 * rng.standard_normal()}
                 for s, v in enumerate(slope + 0.003 * rng.standard_normal(8))]
    return rows


def test_a_pretrained_study_gets_its_own_sentence_and_the_tiny_models_sentences_leave_it_out(tmp_path):
    from skillgate_lib.report import rate_endpoints, rates

    runs = pd.DataFrame(_arm_rows("a", "tiny", 0.05, 0.10, regime="a") + _arm_rows("b", "tiny-note8", 0.05, 0.05, regime="b")
                        + _arm_rows("p", "smollm2-sft", 0.04, 0.08, regime="p"))
    table = rates.rate_table(runs, tmp_path, tmp_path / "none.csv")
    assert table.set_index("study")["pretrained"].to_dict() == {"a": False, "b": False, "p": True}
    said = rates.verdict_sentence(table, rates.predictor_fit(table))
    assert said.startswith("Outcome-only learns the choice in 30 steps in all 2 regimes") and "`p`" not in said
    summary = rates.rate_summary(table, rates.predictor_fit(table))
    assert "in 2 of 2 regimes" in summary and "`p`" not in summary
    ends = rate_endpoints.endpoint_table(runs)
    none = P.study_sentence(table, ends, pd.DataFrame())
    r = table.set_index("study").loc["p"]
    assert none.startswith(f"On the pretrained `smollm2-sft` (`p`, 8 seed pairs), SkillGate is faster than outcome-only "
                           f"GRPO at learning the choice ({r['ratio']:.2f} [{r['ratio_lo']:.2f}, {r['ratio_hi']:.2f}]x; "
                           "no prediction committed before its runs); after the last step, SkillGate minus "
                           "outcome-only in validation: success +")
    assert "pp (above 0), oracle-read +" in none and none.count("On the pretrained") == 1
    pre = pd.DataFrame([{"study": "p", "predicted": 1.7, "predicted_lo": 1.2, "predicted_hi": 2.5,
                         "inside": bool(1.2 <= r["ratio"] <= 2.5)}])
    assert "; the lookahead preregistered 1.70 [1.20, 2.50], the observation inside it)" in (
        P.study_sentence(table, ends, pre))
    assert P.study_sentence(table[~table["pretrained"]], ends, pre) == ""  # no pretrained study has run yet


def test_where_outcome_only_does_not_learn_the_pretrained_sentence_gives_the_paired_difference(tmp_path):
    from skillgate_lib.report import rate_endpoints, rates

    runs = pd.DataFrame(_arm_rows("p", "smollm2-sft", 0.0, 0.05, success=(0.2, 0.2)))
    table = rates.rate_table(runs, tmp_path, tmp_path / "none.csv")
    pre = pd.DataFrame([{"study": "p", "predicted": 3.1, "predicted_lo": 1.9, "predicted_hi": 6.0, "inside": None}])
    text = P.study_sentence(table, rate_endpoints.endpoint_table(runs), pre)
    assert ("outcome-only GRPO is not shown to learn the choice, so there is no ratio (SkillGate minus outcome-only: "
            "+0.04") in text
    assert " logit/step, above 0; the lookahead preregistered 3.10 [1.90, 6.00]); " in text
    assert "in validation: success " in text and "pp (covering 0)" in text and "inside" not in text


def test_the_verdicts_pretrained_sentence_reads_a_committed_study_end_to_end():
    """The docs path on committed files, `paper_note8_h68` standing in for a pretrained study (its prediction was
    committed before its runs): the ratio, the prediction with its commit order, and the end points."""
    from skillgate_lib.report import docs

    table = docs._rate_tables(paths.DATA_DIR)[0]
    landed = table["pretrained"].astype(bool)
    assert (docs._pretrained_sentence(table, paths.DATA_DIR) == "") == (not landed.any())  # one once a study lands
    table.loc[table["study"] == "paper_note8_h68", "pretrained"] = True
    text = docs._pretrained_sentence(table, paths.DATA_DIR)
    assert text.count("On the pretrained") == 1 + landed.sum()
    assert "On the pretrained `tiny-note8` (`paper_note8_h68`, 8 seed pairs), SkillGate is faster than" in text
    assert "the lookahead preregistered 1.63 [1.41, 1.87], the observation inside it" in text
    assert "in validation: success " in text and " oracle-read " in text


def test_the_readme_has_room_for_the_pretrained_studys_sentence(monkeypatch):
    """When the SmolLM2 rate study lands, the verdict keeps every sentence it has and gains one. Until then that
    sentence is written for a stand-in (the coming study's names, a copy of `paper_note8_h68`'s rate row) in each of
    its branches, with wide numbers; the verdict and the README must fit their caps in every branch. Once the study
    has landed, the verdict as generated must."""
    from skillgate_lib.report import docs

    table = docs._rate_tables(paths.DATA_DIR)[0]
    sentences = {"as generated": None}
    if not table["pretrained"].astype(bool).any():
        row = table[table["study"] == "paper_note8_h68"].copy()
        row[["study", "regime", "model", "pretrained"]] = ["paper_f30", "paper_f30", "smollm2-sft", True]
        ends = pd.DataFrame([{"study": "paper_f30", "endpoint": "validation success", "diff": -10.8, "diff_lo": -13.5,
                              "diff_hi": -8.1},
                             {"study": "paper_f30", "endpoint": "validation oracle-read", "diff": 12.3, "diff_lo": 10.5,
                              "diff_hi": 14.1}])
        branches = {"faster, inside": ({"ratio": 2.96, "ratio_lo": 2.61, "ratio_hi": 3.41}, True),
                    "not shown faster, outside": ({"ratio": 10.41, "ratio_lo": 0.88, "ratio_hi": 12.41,
                                                   "diff_lo": -0.01}, False),
                    "no ratio": ({"outcome_learns": False, "diff": -0.012, "diff_lo": -0.034, "diff_hi": 0.006}, None)}
        sentences = {}
        for name, (values, inside) in branches.items():
            r = row.copy()
            r[list(values)] = list(values.values())
            pre = pd.DataFrame([{"study": "paper_f30", "predicted": 12.96, "predicted_lo": 10.60, "predicted_hi": 13.41,
                                 "inside": inside}])
            sentences[name] = P.study_sentence(r, ends, pre)
            assert sentences[name].startswith("On the pretrained `smollm2-sft` (`paper_f30`, 8 seed pairs), ")
    readme = (paths.REPO_ROOT / "README.md").read_text()
    now = readme.split("<!-- generated: verdict -->")[1].split("<!-- end generated -->")[0].strip().splitlines()
    for name, sentence in sentences.items():
        if sentence is not None:
            monkeypatch.setattr(docs, "_pretrained_sentence", lambda table, data_dir, s=sentence: s)
        text = docs.verdict(paths.REPO_ROOT / "figures", paths.DATA_DIR)
        assert "On the pretrained `" in " ".join(text.split()), name
        lines = len(text.strip().splitlines())
        assert lines <= docs.VERDICT_LINES, (name, text)
        assert len(readme.splitlines()) - len(now) + lines <= 200, (name, len(readme.splitlines()), len(now), lines)
