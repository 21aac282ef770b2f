"""The lean decoder against the model's own forward: equal logits, bit for bit, hence equal rollouts.

``rollout.generate`` runs the lean decoder by default, and committed runs are re-evaluated
exactly, so "close" is not enough: every comparison here is ``torch.equal`` or list equality.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from skillgate_lib.env import SkillSlateEnv, regimes
from skillgate_lib.policy.decoder import HFDecoder, LeanLlama, Unsupported, make_decoder
from skillgate_lib.policy.models import load_policy
from skillgate_lib.policy.rollout import _left_pad, generate, merged_lora
from skillgate_lib.runs import train


@pytest.fixture(scope="module")
def tiny():
    """The committed warm start and its tokenizer."""
    return load_policy("tiny")


@pytest.fixture(scope="module")
def rambling():
    """The warm start under a LoRA update large enough that some episodes run to the cap."""
    base, tokenizer = load_policy("tiny")
    torch.manual_seed(0)
    model = train.setup_training(base, train.TrainConfig()).model
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.2)
    return model, tokenizer


def _paper_env(horizons=None) -> SkillSlateEnv:
    r = regimes.get("paper")
    return SkillSlateEnv(step_failure=r.step_failure, lookalike_agreement=r.lookalike_agreement,
                         horizons=r.horizons if horizons is None else horizons)


def _prompt_rows(tokenizer, n: int, padded: bool) -> list[list[int]]:
    """``n`` distinct paper-regime prompts; with ``padded`` their heads are cut to different lengths."""
    env = _paper_env()
    tasks = env.sample_tasks(n, split="train", seed=0)
    texts = [env.prompt(t, env.slate(t, seed=k)) for k, t in enumerate(tasks)]
    rows = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    return [r[3 * k:] for k, r in enumerate(rows)] if padded else rows


def _compare_steps(model, ids, attn, pos, vocab: int, autocast: bool = False) -> None:
    """The model's own forward against LeanLlama through a prefill, copies per group, one-token steps, wide
    right-padded steps, a masked row, a dropped row and a cache that has to grow: every logit equal."""
    g = torch.Generator().manual_seed(0)
    context = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with torch.inference_mode(), merged_lora(model) as policy, context:
        ref, lean = HFDecoder(policy), LeanLlama(policy, room=4)
        assert torch.equal(ref.prefill(ids, attn, pos), lean.prefill(ids, attn, pos))
        source = torch.tensor([0, 0, 1, 1, 2, 2])
        for decoder in (ref, lean):
            decoder.select(source)
        last = pos[:, -1][source]
        for s in range(12):
            width = 6 if s % 4 == 1 else 1
            lengths = torch.randint(1, width + 1, (len(last),), generator=g)
            if s == 6:
                lengths[1] = 0  # an ended row: fed a masked column
            step = torch.randint(3, vocab, (len(last), width), generator=g)
            new = (torch.arange(width)[None] < lengths[:, None]).long()
            positions = last[:, None] + 1 + torch.arange(width)
            a, b = ref.step(step, new, positions, lengths), lean.step(step, new, positions, lengths)
            assert torch.equal(a, b), f"step {s} (width {width}): max |diff| {(a - b).abs().max():.3g}"
            last = last + lengths
            if s == 7:
                keep = torch.tensor([0, 2, 3, 5])
                for decoder in (ref, lean):
                    decoder.select(keep)
                last = last[keep]
        assert lean.padding.shape[1] > ids.shape[1] + 4, "the cache never grew: growth untested"
        if autocast:
            assert lean.keys[0].dtype == torch.bfloat16 and lean.layers[0].q.dtype == torch.bfloat16


@pytest.mark.parametrize("attention,padded", [("sdpa", True), ("sdpa", False), ("eager", True)])
def test_prefill_and_steps_give_the_models_own_logits(rambling, attention, padded):
    """The committed tiny model under a LoRA update, left-padded or equal-length prompts."""
    model, tokenizer = rambling
    model.get_base_model().set_attn_implementation(attention)
    model.eval()
    try:
        ids, attn, pos = _left_pad(_prompt_rows(tokenizer, 3, padded), tokenizer.pad_token_id)
        assert bool((attn == 0).any()) == padded
        _compare_steps(model, ids, attn, pos, len(tokenizer))
    finally:
        model.get_base_model().set_attn_implementation("sdpa")


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16-autocast"])
@pytest.mark.parametrize("attention,padded", [("sdpa", True), ("sdpa", False), ("eager", True)])
def test_grouped_key_value_heads_give_the_models_own_logits(attention, padded, autocast):
    """A random Llama with GQA (8 query heads on 2 key/value heads, SmolLM2's kind) and a tied head, in fp32 and
    under bf16 autocast (weights and cache cast once, the logits still the model's own)."""
    torch.manual_seed(0)
    model = _llama(num_attention_heads=8, num_key_value_heads=2, hidden_size=64, vocab_size=96)
    model.set_attn_implementation(attention)
    rows = [[int(t) for t in torch.randint(3, 96, (n,))] for n in ((20, 17, 12) if padded else (15, 15, 15))]
    ids, attn, pos = _left_pad(rows, 0)
    _compare_steps(model, ids, attn, pos, 96, autocast)


@pytest.mark.parametrize("cap", [160, 512])
def test_lean_rollouts_equal_the_general_path(tiny, rambling, cap):
    """Sampled episodes of the paper regime at temperature 1: the same tokens, inserted bodies and masks.
    At 160 the committed model as it is; at 512 (horizon 16) under LoRA, so some rows run to the cap."""
    model, tokenizer = tiny if cap == 160 else rambling
    env = _paper_env(None if cap == 160 else (16,))
    items = train.step_items(env, train.TrainConfig(prompts_per_step=4, group_size=4), 0)
    runs, stats = [], []
    for lean in (False, True):
        stats.append({})
        runs.append(generate(model, tokenizer, env, items, cap, 1.0, torch.Generator().manual_seed(7),
                             stats=stats[-1], lean=lean))
    assert [s["decoder"] for s in stats] == ["HFDecoder", "LeanLlama"]
    ref, lean = runs
    for k, (a, b) in enumerate(zip(ref, lean)):
        assert a.response_ids == b.response_ids and a.policy_mask == b.policy_mask, f"episode {k} differs"
    lengths = [len(e.response_ids) for e in ref]
    assert sum(not m for e in ref for m in e.policy_mask) > 0, "no body was inserted: wide steps untested"
    assert len(set(lengths)) > 3, "too few distinct lengths: row dropping untested"
    assert max(lengths) >= (60 if cap == 160 else cap), f"episodes too short for a {cap}-token test: {lengths}"


def test_rope_table_equals_the_models_rotary_embedding(tiny):
    """Positions past the first table (so it grows), in a batch of an odd shape."""
    model, _ = tiny
    lean = LeanLlama(model)
    pos = torch.arange(3 * 701).view(3, 701)
    cos, sin = model.model.rotary_emb(torch.zeros(1, dtype=model.dtype), pos)
    ours = lean._rope(pos)
    assert torch.equal(ours[0][:, 0], cos) and torch.equal(ours[1][:, 0], sin)


def _llama(**overrides) -> LlamaForCausalLM:
    config = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=4, max_position_embeddings=128, tie_word_embeddings=True)
    return LlamaForCausalLM(LlamaConfig(**{**config, **overrides})).eval()


@pytest.mark.parametrize("overrides,reason", [
    ({"attention_bias": True}, "biases"),
    ({"num_attention_heads": 4, "num_key_value_heads": 3}, "multiple"),
    ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}}, "RoPE"),
    ({"hidden_act": "gelu"}, "silu"),
])
def test_models_it_cannot_reproduce_fall_back(overrides, reason):
    model = _llama(**overrides)
    with pytest.raises(Unsupported, match=reason):
        LeanLlama(model)
    assert isinstance(make_decoder(model, lean=True), HFDecoder)


def test_make_decoder_is_lean_when_asked_and_supported():
    assert isinstance(make_decoder(_llama(), lean=True), LeanLlama)
    assert isinstance(make_decoder(_llama(), lean=False), HFDecoder)


def test_active_lora_adapters_are_refused(rambling):
    """Outside merged_lora the LoRA update is not in the base weights: reading them would be wrong."""
    model, _ = rambling
    model.eval()
    with pytest.raises(Unsupported, match="merged_lora"):
        LeanLlama(model)
    with merged_lora(model) as policy:
        LeanLlama(policy)
