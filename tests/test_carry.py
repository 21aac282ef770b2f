"""scripts/carry.py: what resumes an unfinished study or prediction on a fresh checkout, and nothing resuming never reads."""

from __future__ import annotations

import subprocess
import threading
import time
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


def test_a_study_carries_its_records_finished_adapters_and_interrupted_checkpoints_when_asked(tmp_path):
    carry = _load()
    study = _study(tmp_path / "paper_f30")
    got = {p.relative_to(study).as_posix() for p in carry.carried(study)}
    assert got == {"plan.json", "step0_eval/0123abcd.pt",
                   "outcome-lr0.0003-seed0/config.json", "outcome-lr0.0003-seed0/metrics.jsonl",
                   "outcome-lr0.0003-seed0/test.json", "outcome-lr0.0003-seed0/adapter/adapter_config.json",
                   "outcome-lr0.0003-seed0/adapter/adapter_model.safetensors"}
    with_checkpoints = {p.relative_to(study).as_posix() for p in carry.carried(study, checkpoints=True)}
    assert with_checkpoints == got | {"skillgate-lr0.0003-seed0/checkpoint.pt", "skillgate-lr0.0003-seed0/config.json",
                                      "skillgate-lr0.0003-seed0/metrics.jsonl"}  # the finished run's never
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
    assert len(staged) == 7 and all("trajectories" not in s and "samples" not in s for s in staged)


def test_a_checkpoint_carried_before_is_untracked_and_stays_on_disk(tmp_path, monkeypatch, capsys):
    carry = _load()
    repo = tmp_path / "repo"
    study = _study(repo / "data" / "runs" / "in_progress" / "speed" / "s")
    _touch(repo / "data" / "runs" / "in_progress" / ".gitignore", "*\n")
    _touch(study / "README.md", "kept: not a run's file")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    monkeypatch.chdir(repo)

    def tracked():
        return set(subprocess.run(["git", "ls-files"], capture_output=True, text=True, check=True).stdout.split())

    rel = study.relative_to(repo)
    assert carry.main(["--checkpoints", str(rel)]) == 0
    subprocess.run(["git", "add", "-f", str(rel / "README.md")], check=True)
    checkpoint = f"{rel}/skillgate-lr0.0003-seed0/checkpoint.pt"
    assert checkpoint in tracked() and f"{rel}/outcome-lr0.0003-seed0/checkpoint.pt" not in tracked()
    assert carry.main(["--list", str(rel)]) == 0  # --list stages and untracks nothing
    assert checkpoint in tracked()
    (repo / rel / "skillgate-lr0.0003-seed0" / "metrics.jsonl").write_text('{"step": 12}\n')  # staged, then changed
    assert carry.main([str(rel)]) == 0
    assert (repo / checkpoint).is_file()
    assert tracked() == {f"{rel}/README.md"} | {p.relative_to(repo).as_posix() for p in carry.carried(study)}
    assert not any(t.startswith(f"{rel}/skillgate-lr0.0003-seed0/") for t in tracked())
    err = capsys.readouterr().err
    assert f"untracked (kept on disk): {checkpoint}" in err and "this checkout resumes it from its checkpoint" in err
    assert "a fresh clone trains it again from step 0 (--checkpoints carries it)" in err


def _trainer(run: Path, checkpoint: bool) -> threading.Thread:
    """A stand-in for the run training in a study: it logs a step, then (when ``checkpoint``) writes a checkpoint."""
    def work():
        time.sleep(0.2)
        with (run / "metrics.jsonl").open("a") as fh:
            fh.write('{"step": 11}\n')
        if checkpoint:
            time.sleep(0.2)
            (run / "checkpoint.pt").write_bytes(b"step 11")
    t = threading.Thread(target=work)
    t.start()
    return t


def test_checkpoint_first_waits_for_the_checkpoint_asked_for(tmp_path):
    carry = _load()
    study = _study(tmp_path / "s")
    run = study / "skillgate-lr0.0003-seed0"
    t = _trainer(run, checkpoint=True)
    assert carry.checkpoint_first(study, timeout_s=30, poll_s=0.05) == [run]
    t.join()
    assert (run / "checkpoint.pt").read_bytes() == b"step 11"
    from skillgate_lib.runs import train

    assert carry.CHECKPOINT_REQUEST == train.CHECKPOINT_REQUEST
    assert train.checkpoint_requested(run) is False  # the checkpoint is newer than the request it served


def test_checkpoint_first_names_a_run_that_logs_but_does_not_checkpoint_and_passes_an_idle_study(tmp_path, capsys):
    carry = _load()
    study = _study(tmp_path / "s")
    run = study / "skillgate-lr0.0003-seed0"
    t = _trainer(run, checkpoint=False)
    with pytest.raises(TimeoutError, match="skillgate-lr0.0003-seed0.*no checkpoint"):
        carry.checkpoint_first(study, timeout_s=1, poll_s=0.05)
    t.join()
    assert carry.checkpoint_first(study, timeout_s=0.2, poll_s=0.05) == []  # nothing training: carry what is there
    assert carry.main(["--list", "--checkpoint-first", "--timeout", "0.2", str(study)]) == 0
    assert "no run is training" in capsys.readouterr().err
