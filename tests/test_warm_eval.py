"""The step-0 evaluation shared by a study's runs (runs/warm_eval.py): it is the same for every run of a committed
study; a run reading it back logs what evaluating would have logged, and later steps are unchanged; no setting left
out of the key changes it; and the key moves with the settings, the code and the chip."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest
import torch

from skillgate_lib import logs, methods, paths
from skillgate_lib.runs import train, warm_eval
from skillgate_lib.runs.evaluate import summarize

SPEED = paths.DATA_DIR / "runs" / "speed"


def _cfg(model_dir, run_dir, **over):
    base = dict(model=str(model_dir), steps=1, prompts_per_step=2, group_size=4, max_new_tokens=48, eval_every=1,
                eval_tasks=8, log_train_every=1, checkpoint_every=1, threads=1, run_dir=str(run_dir), lr=1e-2)
    base.update(over)
    return train.TrainConfig(**base)


@pytest.mark.parametrize("study", sorted(p.name for p in SPEED.iterdir() if (p / "selection.json").exists()))
def test_every_run_of_a_committed_study_has_the_same_step_0_evaluation(study):
    rows = []
    for run in sorted((SPEED / study).glob("*-lr*-seed*")):
        ev = logs.read_metrics(run).query("split == 'eval' and step == 0")
        rows.append(ev.drop(columns=["step", "split"]).iloc[0].rename(run.name))
    table = pd.DataFrame(rows).dropna(axis=1, how="all")
    assert len(table) >= 16 and table["eval/oracle_read"].notna().all()
    differs = [c for c in table.columns if table[c].nunique(dropna=False) > 1]
    assert not differs, table[differs]


def _no_timing(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[[c for c in rows.columns if not c.startswith("time/")]].reset_index(drop=True)


def test_a_run_reading_the_cache_logs_what_evaluating_logs(tiny_model_dir, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    fresh = tmp_path / "fresh"
    train.train(_cfg(tiny_model_dir, fresh, method="skillgate", seed=1, lr=3e-2), progress=False)
    train.train(_cfg(tiny_model_dir, tmp_path / "first", method="outcome", seed=0), progress=False, eval_cache=cache)
    assert len(list(cache.glob("*.pt"))) == 1
    calls = []

    def no_evaluation(self):
        calls.append(1)
        raise RuntimeError("evaluated")

    with monkeypatch.context() as m:
        m.setattr(train.TrainingRun, "evaluate", no_evaluation)
        m.setattr(train.TrainingRun, "choice_probs", no_evaluation)
        with pytest.raises(RuntimeError, match="evaluated"):  # step 1's evaluation is not cached: it stops the run
            train.train(_cfg(tiny_model_dir, tmp_path / "cached", method="skillgate", seed=1, lr=3e-2),
                        progress=False, eval_cache=cache)
    assert calls == [1]  # once, after step 1: step 0 came from the cache
    cached, want = logs.read_metrics(tmp_path / "cached"), logs.read_metrics(fresh)
    pd.testing.assert_frame_equal(_no_timing(cached.query("split == 'eval' and step == 0")),
                                  _no_timing(want.query("split == 'eval' and step == 0")))
    # the step after it drew the same rollouts and made the same update: skipping the evaluation shifted no draw
    step1 = cached.query("split != 'eval'")
    assert len(step1) == 1
    pd.testing.assert_frame_equal(_no_timing(step1), _no_timing(want.query("split != 'eval'")))
    pd.testing.assert_frame_equal(logs.read_run(tmp_path / "cached", "eval").query("step == 0").reset_index(drop=True),
                                  logs.read_run(fresh, "eval").query("step == 0").reset_index(drop=True))


def _step0(cfg) -> tuple:
    run = train.TrainingRun(cfg)
    episodes, probs = run.first_evaluation()
    return json.dumps(summarize(episodes), sort_keys=True), [e.response_ids for e in episodes], probs.tolist()  # nan-safe


#: A value other than the default for each field the key leaves out (``report_to`` and ``run_dir``, where a run
#: writes, are left out of this check; ``method`` and ``credit`` are checked over every method below).
PERTURBED = {"seed": 7, "lr": 0.5, "optimizer": "nsgd", "steps": 2, "prompts_per_step": 3, "group_size": 2,
             "clip_eps": 0.1, "ppo_epochs": 2, "kl_coef": 0.1, "filter_groups": False, "max_draws": 1,
             "selector_coef": 0.5, "shaping_bonus": 0.1, "scale_rewards": False, "eval_every": 3,
             "log_train_every": 2, "checkpoint_every": 2, "length_buckets": 2}


@pytest.mark.slow
def test_no_setting_left_out_of_the_key_changes_the_step_0_evaluation(tiny_model_dir, tmp_path):
    assert set(PERTURBED) | {"report_to", "run_dir", "method", "credit"} == set(warm_eval.AFTER_STEP_0)
    base = _step0(_cfg(tiny_model_dir, tmp_path / "base", method="outcome"))
    changed = {}
    for name, value in PERTURBED.items():
        assert value != getattr(_cfg(tiny_model_dir, tmp_path), name), name
        got = _step0(_cfg(tiny_model_dir, tmp_path / name, method="outcome", **{name: value}))
        if got != base:
            changed[name] = value
    for m in methods.trainable():
        if _step0(_cfg(tiny_model_dir, tmp_path / f"method-{m}", method=m)) != base:
            changed[m] = "method"
    assert not changed, changed


def test_methods_hold_only_the_capabilities_reviewed_for_the_key():
    """``method`` is left out of the key because no method acts before the first update; a new capability of a
    method must be checked against that (warm_eval.AFTER_STEP_0) before it joins this list."""
    assert {f.name for f in dataclasses.fields(methods.Method)} == {
        "name", "label", "color", "credit", "skill_free", "needs_skill_values", "supervised_term", "separate_finetune",
        "paper_row", "ablation", "in_comparison"}


def test_the_key_moves_with_the_settings_the_code_and_the_chip(tiny_model_dir, tmp_path, monkeypatch):
    base = _cfg(tiny_model_dir, tmp_path / "a")
    k = warm_eval.key(base, "fp32")
    for same in ({"seed": 5}, {"lr": 1.0}, {"method": "outcome"}, {"run_dir": str(tmp_path / "b")},
                 {"steps": 30}, {"selector_coef": 0.5}):
        assert warm_eval.key(dataclasses.replace(base, **same), "fp32") == k, same
    for other in ({"eval_tasks": 16}, {"step_failure": 0.3}, {"temperature": 0.7}, {"threads": 2},
                  {"max_new_tokens": 32}, {"eval_split": "eval"}, {"regime": "paper"}, {"bf16": True}):
        assert warm_eval.key(dataclasses.replace(base, **other), "fp32") != k, other
    assert warm_eval.key(base, "bf16 (amx)") != k
    assert set(warm_eval.AFTER_STEP_0) < {f.name for f in dataclasses.fields(train.TrainConfig)}
    monkeypatch.setattr(warm_eval, "chip", lambda device: {"cpu": "another", "capability": "AVX2"})
    assert warm_eval.key(base, "fp32") != k
    monkeypatch.undo()
    monkeypatch.setattr(warm_eval, "_library_digest", lambda: "changed code")
    assert warm_eval.key(base, "fp32") != k
    monkeypatch.undo()
    assert warm_eval.key(base, "fp32", torch.device("cpu")) == k


def test_an_unreadable_cache_file_is_named(tiny_model_dir, tmp_path):
    cfg = _cfg(tiny_model_dir, tmp_path / "a")
    path = warm_eval.store_evaluation(tmp_path / "cache", cfg, "fp32", [], [])
    assert warm_eval.cached_evaluation(tmp_path / "cache", cfg, "fp32")[0] == []
    path.write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match=rf"{path.name}: not a readable step-0 evaluation"):
        warm_eval.cached_evaluation(tmp_path / "cache", cfg, "fp32")
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [path.name]  # no temporary file left behind
