"""A study reported under data/runs/ starts only from a plan committed before its first run."""

from __future__ import annotations

import json
import subprocess

import pytest

from skillgate_lib import paths
from skillgate_lib.runs import preregister, speed, study


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A git checkout standing in for the kit's, with an empty ``data/runs/`` and one commit."""
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.invalid")
    _git(tmp_path, "config", "user.name", "t")
    (tmp_path / "data" / "runs").mkdir(parents=True)
    (tmp_path / "README").write_text("x\n")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "start")
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(paths, "DATA_DIR", tmp_path / "data")
    return tmp_path


def test_only_a_study_written_under_data_runs_needs_a_committed_plan(repo):
    dest = repo / "data" / "runs" / "study" / "x"
    assert preregister.reported_dir(repo / "build" / "x", None) is None
    assert preregister.reported_dir(repo / "build" / "x", dest) == dest.resolve()
    assert preregister.reported_dir(dest, None) == dest.resolve()


def test_an_uncommitted_changed_or_committed_plan(repo):
    plan = study.note8_edge_plan().to_json()
    dest = repo / "data" / "runs" / "study" / "edge"
    with pytest.raises(preregister.UncommittedPlan, match="is not committed"):
        preregister.require_committed(plan, dest, "cmd")
    path = preregister.write_plan(plan, dest)
    with pytest.raises(preregister.UncommittedPlan, match="is not committed"):
        preregister.require_committed(plan, dest, "cmd")  # written, not committed
    _git(repo, "add", str(path))
    _git(repo, "commit", "-qm", "plan")
    preregister.require_committed(plan, dest, "cmd")  # committed with the same content: no error
    changed = {**plan, "steps": plan["steps"] + 1}
    with pytest.raises(preregister.UncommittedPlan, match="committed with another plan"):
        preregister.require_committed(changed, dest, "cmd")
    with pytest.raises(preregister.UncommittedPlan, match="holds another plan"):
        preregister.write_plan(changed, dest)  # a plan on disk is never overwritten by another
    assert json.loads(path.read_text()) == plan


def test_the_study_and_speed_commands_refuse_an_uncommitted_plan_and_say_how(repo, capsys):
    dest = repo / "data" / "runs" / "study" / "edge"
    with pytest.raises(SystemExit) as e:
        study.study_main(["--plan", "paper_note8-edge", "--out-dir", str(repo / "build" / "edge"),
                          "--export", str(dest)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "is not committed" in err and "--dry-run" in err and "--uncommitted-plan" in err
    assert not (repo / "build" / "edge").exists()  # nothing ran
    with pytest.raises(SystemExit) as e:
        speed.speed_main(["--regime", "easy", "--out-dir", str(repo / "data" / "runs" / "speed" / "easy")])
    assert e.value.code == 2 and "is not committed" in capsys.readouterr().err


def test_a_dry_run_writes_the_plan_to_commit_and_then_the_study_may_start(repo, capsys):
    dest = repo / "data" / "runs" / "speed" / "easy"
    assert speed.speed_main(["--regime", "easy", "--out-dir", str(repo / "build" / "easy"), "--export", str(dest),
                             "--dry-run"]) == 0
    assert "commit it before the first run" in capsys.readouterr().out
    assert json.loads((dest / "plan.json").read_text()) == speed.plan_for("easy").to_json()
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "plan")
    preregister.preregistration(speed.plan_for("easy").to_json(), repo / "build" / "easy", dest, dry_run=False,
                                uncommitted=False, command="cmd")


def test_uncommitted_plan_runs_anyway_and_says_so(repo, capsys):
    dest = repo / "data" / "runs" / "study" / "edge"
    preregister.preregistration(study.note8_edge_plan().to_json(), repo / "build", dest, dry_run=False,
                                uncommitted=True, command="cmd")
    assert "say so in the study's README" in capsys.readouterr().out


def test_every_committed_study_plan_reads_back_from_its_plan_function():
    """The committed plans of the named studies are what their functions give (so that a re-run is allowed)."""
    for name, make in study.PLANS.items():
        path = paths.DATA_DIR / "runs" / "study" / name / "plan.json"
        assert json.loads(path.read_text()) == make().to_json(), name
