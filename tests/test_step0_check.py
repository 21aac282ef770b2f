"""scripts/step0_check.py: a study's cached step-0 evaluation, recomputed here, is equal to the bit on the machine that
wrote it (its choice and its sampled trials); a changed number is found and the recorded versions are shown; a study
with nothing to compare is a clear error."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import repo_scripts
from skillgate_lib.runs import train, warm_eval


def _study(tiny_model_dir, tmp_path):
    study = tmp_path / "study"
    cfg = train.TrainConfig(model=str(tiny_model_dir), steps=1, prompts_per_step=2, group_size=4, max_new_tokens=48,
                            eval_every=1, eval_tasks=8, log_train_every=1, checkpoint_every=1, threads=1,
                            run_dir=str(study / "outcome-lr0.01-seed0"), lr=1e-2)
    train.train(cfg, progress=False, eval_cache=warm_eval.folder(study))
    return study


def _change(path, edit):
    saved = torch.load(path, weights_only=False)
    edit(saved)
    torch.save(saved, path)


def test_the_cached_step0_evaluation_is_recomputed_to_the_bit_and_a_change_is_found(tiny_model_dir, tmp_path, capsys):
    check = repo_scripts.load("scripts/step0_check.py")
    study = _study(tiny_model_dir, tmp_path)
    assert check.main([str(study), "--prompts", "3", "--sampled"]) == 0
    said = capsys.readouterr().out
    assert "the first 4 prompts' P(oracle | slate): equal to the bit" in said  # 3, rounded up to a whole batch
    assert "the sampled evaluation's 8 trials: equal to the bit" in said
    path, = warm_eval.folder(study).glob("*.pt")

    def one_ulp(saved):  # the sixth prompt's choice, one ulp up
        saved["choice"] = np.asarray(saved["choice"]).copy()
        saved["choice"][5] = np.nextafter(saved["choice"][5], 1.0)

    _change(path, one_ulp)
    assert check.main([str(study), "--prompts", "4"]) == 0  # the changed prompt is in the second batch
    assert check.main([str(study), "--prompts", "5"]) == 1
    said = capsys.readouterr().out
    assert "the first 8 prompts' P(oracle | slate): 1 differ, by up to" in said
    assert "every package version the run recorded is the same here" in said


def test_a_changed_sampled_trial_is_found_only_with_sampled(tiny_model_dir, tmp_path, capsys):
    check = repo_scripts.load("scripts/step0_check.py")
    study = _study(tiny_model_dir, tmp_path)
    path, = warm_eval.folder(study).glob("*.pt")
    _change(path, lambda saved: saved["episodes"][3].sample_logps.__setitem__(0, 0.5))
    assert check.main([str(study)]) == 0
    assert check.main([str(study), "--sampled"]) == 1
    assert "the sampled evaluation's 8 trials: 1 differ in their tokens or sampling log-probabilities" in \
        capsys.readouterr().out


def test_nothing_to_compare_or_a_bad_count_is_an_error_naming_it(tiny_model_dir, tmp_path, capsys):
    check = repo_scripts.load("scripts/step0_check.py")
    assert check.main([str(tmp_path / "absent")]) == 2
    assert f"{tmp_path / 'absent'}: no such folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert check.main([str(tmp_path / "empty")]) == 2
    assert "no step-0 evaluation to compare with" in capsys.readouterr().err
    study = _study(tiny_model_dir, tmp_path)
    assert check.main([str(study), "--run", "absent"]) == 2
    assert f"{study}: no run with a config.json named absent" in capsys.readouterr().err
    path, = warm_eval.folder(study).glob("*.pt")
    path.write_bytes(b"not a torch file")
    assert check.main([str(study)]) == 2
    assert f"{path}: not a readable step-0 evaluation" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        check.main([str(study), "--prompts", "0"])
    assert stop.value.code == 2
    assert "--prompts must be at least 1" in capsys.readouterr().err
