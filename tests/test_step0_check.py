"""scripts/step0_check.py: a study's cached step-0 choice, recomputed here, is equal to the bit on the machine that
wrote it; a changed number is found; a study with nothing to compare is a clear error."""

from __future__ import annotations

import numpy as np
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


def test_the_cached_step0_choice_is_recomputed_to_the_bit_and_a_change_is_found(tiny_model_dir, tmp_path, capsys):
    check = repo_scripts.load("scripts/step0_check.py")
    study = _study(tiny_model_dir, tmp_path)
    assert check.main([str(study), "--prompts", "6"]) == 0
    said = capsys.readouterr().out
    assert "the first 6 prompts' P(oracle | slate), cached vs recomputed here: equal to the bit" in said
    path, = warm_eval.folder(study).glob("*.pt")
    saved = torch.load(path, weights_only=False)
    saved["choice"] = np.asarray(saved["choice"]).copy()
    saved["choice"][2] = np.nextafter(saved["choice"][2], 1.0)  # one prompt, one ulp
    torch.save(saved, path)
    assert check.main([str(study), "--prompts", "6"]) == 1
    assert "1 differ, by up to" in capsys.readouterr().out
    assert check.main([str(study), "--prompts", "2"]) == 0  # the changed prompt is the third


def test_a_study_without_a_step0_evaluation_or_a_run_is_an_error_naming_it(tiny_model_dir, tmp_path, capsys):
    check = repo_scripts.load("scripts/step0_check.py")
    (tmp_path / "empty").mkdir()
    assert check.main([str(tmp_path / "empty")]) == 2
    assert "no step-0 evaluation to compare with" in capsys.readouterr().err
    study = _study(tiny_model_dir, tmp_path)
    assert check.main([str(study), "--run", "absent"]) == 2
    assert f"{study}: no run with a config.json named absent" in capsys.readouterr().err
