"""scripts/carry.py: what resumes an unfinished study or prediction on a fresh checkout, and nothing resuming never reads."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import repo_scripts


def _load():
    return repo_scripts.load("scripts/carry.py")


def _touch(path: Path, text: str = "{}") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _study(root: Path) -> Path:
    _touch(root / "plan.json")
    for run, finished in (("outcome-lr0.0003-seed0", True), ("skillgate-lr0.0003-seed0", False)):
        for name in ("config.json", "metrics.jsonl", "samples.jsonl", "checkpoint.pt",
                     "trajectories/step-000010-train.parquet"):
            _touch(root / run / name)
        if finished:
            _touch(root / run / "adapter" / "adapter_config.json")
            _touch(root / run / "adapter" / "adapter_model.safetensors", "weights")
            _touch(root / run / "test.json")
    _touch(root / "warmstart" / "test.json")  # the warm start's test record comes last, with the study's
    _touch(root / "step0_eval" / "0123abcd.pt", "episodes")  # the step-0 evaluation the runs share
    return root


def test_a_study_carries_its_records_finished_adapters_and_interrupted_checkpoints(tmp_path):
    carry = _load()
    study = _study(tmp_path / "paper_f30")
    got = {p.relative_to(study).as_posix() for p in carry.carried(study)}
    assert got == {"plan.json", "step0_eval/0123abcd.pt",
                   "outcome-lr0.0003-seed0/config.json", "outcome-lr0.0003-seed0/metrics.jsonl",
                   "outcome-lr0.0003-seed0/test.json", "outcome-lr0.0003-seed0/adapter/adapter_config.json",
                   "outcome-lr0.0003-seed0/adapter/adapter_model.safetensors",
                   "skillgate-lr0.0003-seed0/config.json", "skillgate-lr0.0003-seed0/metrics.jsonl",
                   "skillgate-lr0.0003-seed0/checkpoint.pt"}
    _touch(study / "selection.json")
    assert study / "selection.json" in carry.carried(study)
    from skillgate_lib.runs import warm_eval

    assert carry.SHARED_EVAL == warm_eval.FOLDER


def test_a_prediction_carries_its_json_and_anything_else_is_refused(tmp_path, capsys):
    carry = _load()
    pred = _touch(tmp_path / "paper_f30.json")
    assert carry.carried(pred) == [pred]
    with pytest.raises(ValueError, match="no plan.json"):
        carry.carried(tmp_path)
    assert carry.main(["--list", str(tmp_path / "nothing-here")]) == 1
    assert "nothing-here" in capsys.readouterr().err


def test_carry_stages_the_files_in_git_even_where_ignored(tmp_path, monkeypatch):
    carry = _load()
    repo = tmp_path / "repo"
    study = _study(repo / "data" / "runs" / "in_progress" / "speed" / "s")
    _touch(repo / "data" / "runs" / "in_progress" / ".gitignore", "*\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    monkeypatch.chdir(repo)
    assert carry.main([str(study.relative_to(repo))]) == 0
    staged = subprocess.run(["git", "-C", str(repo), "diff", "--cached", "--name-only"], capture_output=True, text=True,
                            check=True).stdout.split()
    assert len(staged) == 10 and all("trajectories" not in s and "samples" not in s for s in staged)
