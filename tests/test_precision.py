"""Sampling and the update in one precision: the sampler's log-probabilities against the update's, fp32 and bf16."""

from __future__ import annotations

import math

import pytest
import torch

from skillgate_lib.env import SkillSlateEnv
from skillgate_lib.policy.models import load_policy
from skillgate_lib.runs import train


@pytest.mark.parametrize("bf16,tolerance", [(False, 1e-5), (True, 1e-3)])
def test_the_update_sees_the_probabilities_it_sampled_from(bf16, tolerance):
    """Each step logs ``logp_gap``: the mean |log p_update - log p_sampler| over the policy tokens it trains on.
    Measured on this step: 9e-8 in fp32; 2.3e-4 under bf16 autocast, where sampling runs in bf16 too. A sampler left in
    fp32 under a bf16 update is off by 2.2e-3, above this test's bf16 tolerance."""
    torch.manual_seed(0)
    cfg = train.TrainConfig(model="tiny", prompts_per_step=4, group_size=8, max_new_tokens=160, threads=1, bf16=bf16,
                            lr=1e-2, kl_coef=0.0, credit="skillgate")
    base, tokenizer = load_policy("tiny")
    model, params, opt, ccfg, skill_values = train.setup_training(base, cfg)
    row = train.grpo_step(model, tokenizer, SkillSlateEnv(), opt, params, cfg, ccfg, 0, skill_values)[3]
    assert row["updated"] and math.isfinite(row["logp_gap"])
    assert row["logp_gap"] < tolerance, f"sampler and update disagree by {row['logp_gap']:.3g} (bf16={bf16})"


def test_frozen_weights_stored_in_bf16_give_autocasts_numbers_bit_for_bit():
    """``devices.frozen_weights_in_bf16`` (what a bf16 run's set-up does): the update's log-probabilities and LoRA
    gradients under autocast are those of fp32-stored weights exactly, on a random Llama with grouped-query attention
    and LoRA; the embeddings (tied to the head), norms and LoRA weights stay fp32."""
    import copy

    from transformers import LlamaConfig, LlamaForCausalLM

    from skillgate_lib.policy import devices
    from skillgate_lib.policy.batching import response_logprobs

    torch.manual_seed(0)
    base = LlamaForCausalLM(LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True))
    cfg = train.TrainConfig(model="tiny", bf16=False, lora_targets=("q_proj", "v_proj", "down_proj"))
    ids = torch.randint(0, 96, (3, 20))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "position_ids": torch.arange(20).expand(3, 20),
             "response_ids": ids[:, 8:], "unique": torch.arange(3), "source": torch.arange(3)}
    out = []
    for cast in (False, True):
        model = train.setup_training(copy.deepcopy(base), cfg).model
        torch.nn.init.normal_(model.base_model.model.model.layers[0].self_attn.q_proj.lora_B.default.weight)
        if cast:
            assert devices.frozen_weights_in_bf16(model) == 2 * 7  # 7 frozen projections a layer; the head is tied
            assert model.get_input_embeddings().weight.dtype == torch.float32
            assert all(p.dtype == torch.float32 for p in model.parameters() if p.requires_grad)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logp = response_logprobs(model, batch)
        logp.sum().backward()
        out.append((logp.detach(), [p.grad for p in model.parameters() if p.requires_grad]))
    assert torch.equal(out[0][0], out[1][0])
    assert all(torch.equal(a, b) for a, b in zip(out[0][1], out[1][1]))


def test_a_bf16_run_trains_and_evaluates_with_its_frozen_weights_in_bf16(tmp_path, monkeypatch):
    """Every forward of a bf16 run (sampling, the update, evaluation, the choice measure) is under autocast: a
    forward outside it would meet a bf16 weight and fail, so two steps with an evaluation are the check."""
    from skillgate_lib.policy import devices

    monkeypatch.setattr(devices, "native_bf16_cpu", lambda cpuinfo="/proc/cpuinfo": "amx_bf16")
    cfg = train.TrainConfig(method="skillgate", regime="paper", steps=2, prompts_per_step=2, group_size=4, eval_every=2,
                            eval_tasks=4, threads=1, bf16=True, run_dir=str(tmp_path / "run"))
    metrics = train.train(cfg, progress=False)
    assert metrics.query("split == 'train'")["loss"].notna().all() and (metrics["split"] == "eval").any()
