"""The GRPO loop at tiny scale: logged finite loss, frozen base, moving LoRA, exact resume, valid artifacts."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from skillgate_lib import logs
from skillgate_lib.policy.models import load_policy
from skillgate_lib.runs import train


def _cfg(model_dir, run_dir, **over):
    base = dict(model=str(model_dir), steps=3, prompts_per_step=2, group_size=4, max_new_tokens=48, eval_every=2,
                eval_tasks=8, log_train_every=1, checkpoint_every=1, threads=1, run_dir=str(run_dir), lr=1e-2)
    base.update(over)
    return train.TrainConfig(**base)


def test_grpo_logs_finite_loss_moves_lora_and_freezes_base(tiny_model_dir, tmp_path):
    # The committed warm start succeeds on some rollouts, so the advantages are not all zero.
    metrics = train.train(_cfg("tiny", tmp_path / "run", credit="skillgate", prompts_per_step=4, max_new_tokens=160),
                          progress=False)
    steps = metrics.query("split == 'train'")
    assert steps["loss"].map(lambda x: x == x and abs(x) < 1e6).all() and len(steps) == 3
    base = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)["adapter"]
    assert (steps["grad_norm"] > 0).any()
    assert any(k.endswith("lora_B.weight") and v.abs().sum() > 0 for k, v in base.items()), "LoRA B never moved"
    assert (tmp_path / "run" / "adapter" / "adapter_config.json").exists()
    table = logs.read_run(tmp_path / "run")
    assert set(table["split"]) == {"train", "eval"} and (table["credit"] == "skillgate").all()
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["seed"] == 0 and config["versions"]["torch"]


def test_grpo_step_moves_lora_and_leaves_base_bit_identical(tmp_path):
    from skillgate_lib.env import SkillSlateEnv

    cfg = _cfg("tiny", tmp_path, credit="skillgate", prompts_per_step=4, group_size=8, max_new_tokens=160)
    base, tokenizer = load_policy("tiny")
    model, params, opt, ccfg, skill_values = train.setup_training(base, cfg)
    assert params and all("lora_" in n for n, p in model.named_parameters() if p.requires_grad)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    env = SkillSlateEnv()
    norms = [train.grpo_step(model, tokenizer, env, opt, params, cfg, ccfg, step, skill_values)[3]["grad_norm"]
             for step in range(3)]
    assert max(norms) > 0  # the selector channel has signal even when every reward is 0
    after = dict(model.named_parameters())
    assert any(not torch.equal(before[n], after[n]) for n in before if "lora_B" in n)
    assert all(torch.equal(before[n], after[n]) for n in before if "lora_" not in n)


def test_resume_reproduces_the_uninterrupted_run(tiny_model_dir, tmp_path):
    full = train.train(_cfg(tiny_model_dir, tmp_path / "full", credit="outcome"), progress=False)
    train.train(_cfg(tiny_model_dir, tmp_path / "cut", credit="outcome", steps=2), progress=False)
    # "Kill" the run after step 2: a longer budget resumed from its checkpoint.
    cfg = json.loads((tmp_path / "cut" / "config.json").read_text())
    assert cfg["steps"] == 2
    resumed = train.train(_cfg(tiny_model_dir, tmp_path / "cut", credit="outcome"), progress=False, resume=True)
    cols = [c for c in full.columns if not c.startswith("time/")]
    pd.testing.assert_frame_equal(full[cols].reset_index(drop=True), resumed[cols].reset_index(drop=True))


def test_a_checkpoint_asked_for_is_written_once_and_resumes_to_the_same_numbers(tiny_model_dir, tmp_path, monkeypatch):
    """``touch STUDY/checkpoint.now``: the run in it checkpoints after the step in progress (none is due before step 3
    here), and a run given back right after resumes from that step to the uninterrupted run's numbers."""
    full = train.train(_cfg(tiny_model_dir, tmp_path / "full", credit="outcome", checkpoint_every=10), progress=False)
    study = tmp_path / "study"
    study.mkdir()
    (study / train.CHECKPOINT_REQUEST).touch()
    cfg = _cfg(tiny_model_dir, study / "run", credit="outcome", checkpoint_every=10)
    saved, real = [], train._save_checkpoint

    def save(run_dir, model, opt, step, skill_values=None):
        real(run_dir, model, opt, step, skill_values)
        saved.append(step)
        if len(saved) == 1:
            raise KeyboardInterrupt  # the machine goes back right after the checkpoint asked for

    monkeypatch.setattr(train, "_save_checkpoint", save)
    with pytest.raises(KeyboardInterrupt):
        train.train(cfg, progress=False)
    assert saved == [1]
    resumed = train.train(cfg, progress=False, resume=True)
    assert saved == [1, 3], "one checkpoint per request: the touch older than the checkpoint asks for nothing more"
    cols = [c for c in full.columns if not c.startswith("time/")]
    pd.testing.assert_frame_equal(full[cols].reset_index(drop=True), resumed[cols].reset_index(drop=True))


def test_same_seed_same_numbers(tiny_model_dir, tmp_path):
    a = train.train(_cfg(tiny_model_dir, tmp_path / "a", steps=1, eval_every=1), progress=False)
    b = train.train(_cfg(tiny_model_dir, tmp_path / "b", steps=1, eval_every=1), progress=False)
    cols = [c for c in a.columns if not c.startswith("time/")]
    pd.testing.assert_frame_equal(a[cols], b[cols])


def test_existing_run_is_not_overwritten(tiny_model_dir, tmp_path):
    train.train(_cfg(tiny_model_dir, tmp_path / "r", steps=1, eval_every=1), progress=False)
    before = (tmp_path / "r" / "metrics.jsonl").read_text()
    with pytest.raises(FileExistsError, match="--resume"):
        train.train(_cfg(tiny_model_dir, tmp_path / "r", steps=1, eval_every=1), progress=False)
    assert (tmp_path / "r" / "metrics.jsonl").read_text() == before


def test_resume_with_other_settings_names_the_fields(tiny_model_dir, tmp_path):
    train.train(_cfg(tiny_model_dir, tmp_path / "r", steps=1, eval_every=1), progress=False)
    with pytest.raises(ValueError, match=r"config.json.*seed: 0 in the run, 3 now.*lr: 0.01 in the run, 0.5 now"):
        train.train(_cfg(tiny_model_dir, tmp_path / "r", steps=2, eval_every=1, lr=0.5, seed=3), progress=False,
                    resume=True)


@pytest.mark.parametrize("credit", ["masked_exec", "shaped", "selection_bc", "utility", "outcome"])
def test_every_assigner_trains(tiny_model_dir, tmp_path, credit):
    metrics = train.train(_cfg(tiny_model_dir, tmp_path / credit, credit=credit, steps=1, eval_every=1), progress=False)
    assert metrics.query("split == 'train'")["loss"].notna().all()


def test_skill_free_run_shows_no_slate(tiny_model_dir, tmp_path):
    cfg = _cfg(tiny_model_dir, tmp_path / "free", credit="outcome", skill_free=True, steps=1, eval_every=1)
    env = train.make_env(cfg)
    task, slate, _ = train.step_items(env, cfg, 0)[0]
    assert env.prompt(task, slate) == task.text + "\nrespond :"
    metrics = train.train(cfg, progress=False)
    assert (metrics.query("split == 'eval'")["eval/oracle_read"] == 0).all()


def test_bad_config_names_the_field():
    with pytest.raises(ValueError, match="credit"):
        train.TrainConfig(credit="grpo")
    with pytest.raises(ValueError, match="group_size"):
        train.TrainConfig(group_size=1)


def test_runs_on_other_weights_are_not_reused_or_reevaluated(tiny_model_dir, tmp_path):
    """A finished run is reused by `compare`, and its adapter re-evaluated, only on the weights it was trained on."""
    import shutil

    from skillgate_lib.runs import compare
    from skillgate_lib.runs.evaluate import load_adapter

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    cfg = _cfg(model, tmp_path / "r", steps=1, eval_every=1)
    train.train(cfg, progress=False)
    compare.train_all([cfg], workers=1, resume=False, progress=False, desc="reuse")  # same weights: skipped
    load_adapter(tmp_path / "r")
    from safetensors.torch import load_file, save_file

    weights = load_file(model / "model.safetensors")
    save_file({k: v + 1e-3 for k, v in weights.items()}, model / "model.safetensors")
    with pytest.raises(ValueError, match="model_fingerprint"):
        compare.train_all([cfg], workers=1, resume=False, progress=False, desc="reuse")
    with pytest.raises(ValueError, match="trained on model .* with weights"):
        load_adapter(tmp_path / "r")


def test_a_resumed_batch_counts_only_the_steps_its_runs_keep(tmp_path):
    """The progress bar of resumed runs starts at their checkpoints' steps: a run whose log holds steps but that has
    no checkpoint starts over (counting its log made the bar run backwards, with a negative rate)."""
    from skillgate_lib.runs import compare

    (tmp_path / "metrics.jsonl").write_text('{"step": 7, "split": "train"}\n')
    assert compare._steps_done(tmp_path) == 7 and compare._steps_kept(tmp_path) == 0
    torch.save({"step": 5}, tmp_path / "checkpoint.pt")
    assert compare._steps_kept(tmp_path) == 5
