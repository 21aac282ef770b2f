"""scripts/rerun_check.py: a re-run that adds the choice reproduces its study; any changed number does not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import repo_scripts


def _load():
    return repo_scripts.load("scripts/rerun_check.py")


def _export(root: Path, rows_by_run: dict, chosen: float = 0.01) -> Path:
    root.mkdir(parents=True)
    (root / "selection.json").write_text(json.dumps({a: {"knob": "lr", "value": chosen} for a in ("outcome", "skillgate")}))
    for name, rows in rows_by_run.items():
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps({"lr": 0.01, "seed": 0, "run_dir": str(root / name)}))
        (root / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


STUDY = {"outcome-lr0.01-seed0": [{"step": 0, "split": "eval", "eval/oracle_read": 0.25, "time/step_s": 1.0},
                                  {"step": 1, "split": "train", "loss": 0.125, "time/step_s": 2.0}]}


def test_a_rerun_that_adds_the_choice_reproduces(tmp_path):
    check = _load()
    old = _export(tmp_path / "old", STUDY)
    rerun = {k: [dict(r, **{"time/step_s": 9.0}) for r in rows] for k, rows in STUDY.items()}
    rerun["outcome-lr0.01-seed0"][0]["eval/choice"] = 0.5
    new = _export(tmp_path / "new", rerun)
    lines, ok = check.compare_study(old, new)
    assert ok and lines == ["outcome-lr0.01-seed0: reproduced (adds eval/choice)"]
    assert check.main([str(old), str(new)]) == 0


def test_a_changed_number_a_missing_run_or_another_choice_fails(tmp_path, capsys):
    check = _load()
    old = _export(tmp_path / "old", STUDY)
    changed = {k: [dict(r) for r in rows] for k, rows in STUDY.items()}
    changed["outcome-lr0.01-seed0"][1]["loss"] = 0.1250000001
    lines, ok = check.compare_study(old, _export(tmp_path / "changed", changed))
    assert not ok and "metrics.jsonl line 2 (step 1, train): loss" in lines[0]
    assert not check.compare_study(old, _export(tmp_path / "missing", {}))[1]
    lines, ok = check.compare_study(old, _export(tmp_path / "other", STUDY, chosen=0.003))
    assert not ok and lines[0] == "selection.json: outcome chose 0.01 in the study, 0.003 in the re-run"
    assert check.main([str(old), str(tmp_path / "changed")]) == 1
    assert "NOT reproduced" in capsys.readouterr().out


def test_the_test_record_must_match_but_for_its_wall_time(tmp_path):
    check = _load()
    old, new = _export(tmp_path / "old", STUDY), _export(tmp_path / "new", STUDY)
    for root, seconds, success in ((old, 1.0, 0.25), (new, 2.0, 0.25)):
        (root / "warmstart").mkdir()
        (root / "warmstart" / "test.json").write_text(json.dumps({"seconds": seconds, "test/success": success}))
    assert check.compare_study(old, new) == (["outcome-lr0.01-seed0: reproduced", "warmstart: reproduced"], True)
    (new / "warmstart" / "test.json").write_text(json.dumps({"seconds": 2.0, "test/success": 0.5}))
    lines, ok = check.compare_study(old, new)
    assert not ok and lines[1] == "warmstart: 1 differences; first: test.json: test/success 0.25 -> 0.5"


def test_the_summary_tells_rounding_in_training_from_a_changed_evaluation(tmp_path, capsys):
    check = _load()
    old = _export(tmp_path / "old", STUDY)
    other_cpu = {k: [dict(r) for r in rows] for k, rows in STUDY.items()}
    other_cpu["outcome-lr0.01-seed0"][1]["loss"] = 0.125 * (1 + 1e-6)  # rounding in a training diagnostic
    new = _export(tmp_path / "new", other_cpu)
    assert check.difference_summary(old, new) == [{"metric": "loss", "records": 1, "splits": ["train"], "runs": 1,
                                                   "max_rel": pytest.approx(1e-6)}]
    other_cpu["outcome-lr0.01-seed0"][0]["eval/oracle_read"] = 0.25 + 1 / 256  # one instance flipped
    new = _export(tmp_path / "flipped", other_cpu)
    summary = {s["metric"]: s for s in check.difference_summary(old, new)}
    assert summary["eval/oracle_read"]["splits"] == ["eval"] and summary["eval/oracle_read"]["max_rel"] == pytest.approx(1 / 64)
    assert check.main([str(old), str(new)]) == 1
    out = capsys.readouterr().out
    assert "NOT reproduced" in out and "eval/oracle_read: 1 records (eval) in 1 runs" in out
