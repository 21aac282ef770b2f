"""Runs trained together: each row's own adapter in the batched decoder, and a small study both ways.

The batched decoder is not bit for bit the model's own forward (other arithmetic, other
shapes), so its logits are compared with a tolerance; the runs' episodes and numbers are
compared exactly where they come from the same draws, and within rounding where the
sampling logits enter (the per-token gradient weights).
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from skillgate_lib import logs
from skillgate_lib.policy.decoder import LeanLlama, MultiLlama
from skillgate_lib.policy.models import load_policy
from skillgate_lib.policy.rollout import Segment, _left_pad, generate, merged_lora
from skillgate_lib.runs import multirun, train


def _policies(n: int, scale: float):
    """``n`` LoRA-wrapped copies of the warm start, each with its own (seeded) adapter of size ``scale``."""
    base, tokenizer = load_policy("tiny")
    models = []
    for k in range(n):
        model = train.setup_training(copy.deepcopy(base), train.TrainConfig(seed=k)).model.eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, scale, generator=torch.Generator().manual_seed(k))
        models.append(model)
    return models, tokenizer


def _batched_and_alone(models, runs, rows, pad: int):
    """Prefill and one decode step (one row inserting three tokens, the other one, padding after) of ``runs``'s rows in
    one :class:`MultiLlama` batch, and the same for each run alone with its adapter merged (:class:`LeanLlama`):
    ``(batched, alone, the batch's decoder)``."""
    ids, attn, pos = _left_pad(rows, pad)
    chunk = torch.tensor([[5, 6, 7], [8, 0, 0]] * (len(rows) // 2))
    chunk_attn = (chunk != 0).long()
    with torch.inference_mode():
        multi = MultiLlama(models, runs, room=8)
        got = [multi.prefill(ids, attn, pos)]
        got.append(multi.step(chunk, chunk_attn, pos[:, -1:] + 1 + torch.arange(3), chunk_attn.sum(1)))
        want = [torch.empty_like(g) for g in got]
        for k, model in enumerate(models):
            mine = runs == k
            with merged_lora(model) as policy:
                lean = LeanLlama(policy, room=8)
                want[0][mine] = lean.prefill(ids[mine], attn[mine], pos[mine])
                want[1][mine] = lean.step(chunk[mine], chunk_attn[mine], pos[mine, -1:] + 1 + torch.arange(3),
                                          chunk_attn[mine].sum(1))
    return got, want, multi


def test_each_row_gets_its_own_runs_adapter():
    """Prefill and decode logits of three runs in one batch equal each run's own (lean, merged) logits up to rounding."""
    models, tokenizer = _policies(3, 0.2)
    env = train.make_env(train.TrainConfig(regime="paper"))
    tasks = env.sample_tasks(6, split="train", seed=0)
    rows = [tokenizer(env.prompt(t, env.slate(t, seed=k)), add_special_tokens=False)["input_ids"][2 * k:]
            for k, t in enumerate(tasks)]
    got, want, _ = _batched_and_alone(models, torch.tensor([0, 0, 1, 1, 2, 2]), rows, tokenizer.pad_token_id)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    assert not torch.equal(want[1][0], want[1][2])  # the runs' adapters differ, so a shared adapter would fail


def test_batched_rollouts_draw_each_runs_own_stream():
    """Three runs' rollouts decoded together are each run's rollouts decoded alone (same seeds)."""
    models, tokenizer = _policies(3, 0.02)
    cfg = train.TrainConfig(regime="paper", prompts_per_step=4, group_size=8)
    env = train.make_env(cfg)

    def segments():
        return [Segment(env, train.step_items(env, cfg, k), torch.Generator().manual_seed(k), np.random.default_rng(k))
                for k in range(3)]

    alone = [generate(m, tokenizer, s.env, s.items, 96, 1.0, s.generator, score_rng=s.score_rng)
             for m, s in zip(models, segments())]
    together = multirun.generate_together(models, tokenizer, segments(), 96, 1.0)
    for a_run, t_run in zip(alone, together):
        assert [e.response_ids for e in a_run] == [e.response_ids for e in t_run]
        assert [e.outcome.reward for e in a_run] == [e.outcome.reward for e in t_run]
        np.testing.assert_allclose(np.concatenate([e.grad_norms for e in a_run]),
                                   np.concatenate([e.grad_norms for e in t_run]), atol=1e-4)
    assert len({tuple(e.response_ids) for run in together for e in run[:1]}) > 1  # the runs did not all draw alike


def _study(root, **over):
    """Four runs of a small study (from the committed warm start, which succeeds on some rollouts): RL methods with their own lr or lambda, the separate fine-tune, skill-free RL."""
    shared = dict(model="tiny", regime="paper", steps=2, prompts_per_step=4, group_size=4, max_new_tokens=96,
                  eval_every=1, eval_tasks=8, log_train_every=1, checkpoint_every=1, threads=1)
    runs = [("outcome", 0, dict(lr=1e-2)), ("skillgate", 1, dict(selector_coef=1.0)), ("selection_bc", 2, {}),
            ("skill_free", 0, {})]
    return [train.TrainConfig(method=m, seed=s, run_dir=str(root / f"{m}-{s}"), **{**shared, **o, **over})
            for m, s, o in runs]


def _files(run_dir) -> set[str]:
    return {str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file()}


def _same_numbers(a_dir, b_dir) -> None:
    ma, mb = logs.read_metrics(a_dir), logs.read_metrics(b_dir)
    assert list(ma.columns) == list(mb.columns) and len(ma) == len(mb)
    for col in ma.columns:
        if col.startswith("time/"):
            continue
        if ma[col].dtype.kind in "fi":
            np.testing.assert_allclose(ma[col].to_numpy(float), mb[col].to_numpy(float), rtol=1e-5, atol=1e-6, err_msg=col)
        else:
            assert ma[col].tolist() == mb[col].tolist(), col
    ta, tb = logs.read_run(a_dir), logs.read_run(b_dir)
    assert len(ta) == len(tb)
    for col in ta.columns:
        if ta[col].dtype.kind == "f":
            np.testing.assert_allclose(ta[col].to_numpy(), tb[col].to_numpy(), rtol=1e-5, atol=1e-5, err_msg=col)
        else:
            assert ta[col].astype(str).tolist() == tb[col].astype(str).tolist(), col


def test_a_study_trained_together_writes_what_its_runs_write_alone(tmp_path):
    alone = _study(tmp_path / "alone")
    for cfg in alone:
        train.train(cfg, progress=False)
    together = _study(tmp_path / "together")
    multirun.train_together(together)
    for a, t in zip(alone, together):
        a_dir, t_dir = tmp_path / "alone" / a.run_dir.split("/")[-1], tmp_path / "together" / t.run_dir.split("/")[-1]
        assert _files(a_dir) == _files(t_dir)
        config_a, config_t = (json.loads((d / "config.json").read_text()) for d in (a_dir, t_dir))
        assert {k: v for k, v in config_a.items() if k != "run_dir"} == {k: v for k, v in config_t.items() if k != "run_dir"}
        _same_numbers(a_dir, t_dir)
    rl = [logs.read_metrics(tmp_path / "together" / name).query("split == 'train'") for name in ("outcome-0", "skillgate-1")]
    assert all((m["grad_norm"] > 0).any() for m in rl)  # RL updates happened: the comparison covers trained adapters


def test_runs_trained_together_resume_to_the_same_numbers(tmp_path):
    whole = _study(tmp_path / "whole")[:2]
    multirun.train_together(whole)
    first = _study(tmp_path / "parts", steps=1)[:2]
    multirun.train_together(first)
    multirun.train_together(_study(tmp_path / "parts")[:2], resume=True)
    for w, p in zip(whole, first):
        _same_numbers(tmp_path / "whole" / w.run_dir.split("/")[-1], tmp_path / "parts" / p.run_dir.split("/")[-1])


def test_runs_that_cannot_share_a_batch_are_refused(tmp_path):
    cfgs = _study(tmp_path)[:2]
    cfgs[1].max_new_tokens = 32
    with pytest.raises(ValueError, match="max_new_tokens=32"):
        multirun.train_together(cfgs)
    with pytest.raises(ValueError, match="same run_dir"):
        multirun.train_together([cfgs[0], cfgs[0]])
    with pytest.raises(ValueError, match="resume flags"):
        multirun.train_together(cfgs[:1], resume=[True, False])


def _gqa_policies(n: int):
    """``n`` LoRA-wrapped copies of a random Llama with grouped key/value heads (4 query heads, 2 key/value heads,
    SmolLM2's layout), each with its own random adapter."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    base = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, attn_implementation="eager",
                                        pad_token_id=0)).eval()
    models = []
    for k in range(n):
        model = get_peft_model(copy.deepcopy(base), LoraConfig(r=4, lora_alpha=8, target_modules=[
            "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])).eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.2, generator=torch.Generator().manual_seed(k))
        models.append(model)
    return models


@pytest.mark.parametrize("bf16", [False, True])
def test_grouped_key_value_heads_batch_with_each_runs_adapter(bf16):
    """GQA (and bf16 autocast, as a pretrained model's runs train): prefill and decode logits of three runs in one batch
    equal each run's own lean logits up to rounding."""
    from skillgate_lib.policy import devices

    if bf16 and not devices.bf16_pays(torch.device("cpu")):
        pytest.skip("this CPU has no native bf16")
    models = _gqa_policies(3)
    g = torch.Generator().manual_seed(1)
    rows = [torch.randint(1, 64, (n,), generator=g).tolist() for n in (9, 5, 7, 7, 4, 8)]
    tol = 2e-2 if bf16 else 1e-4  # bf16: the merged adapter rounds once more than the stacked one
    with devices.autocast(torch.device("cpu"), bf16):
        got, want, multi = _batched_and_alone(models, torch.tensor([0, 0, 1, 1, 2, 2]), rows, 0)
    for t, w in zip(got, want):
        torch.testing.assert_close(t, w, rtol=tol, atol=tol)
    assert multi.keys[0].shape[1] == 2 and multi.keys[0].dtype == (torch.bfloat16 if bf16 else torch.float32)
    assert not torch.equal(want[1][0], want[1][2])
