"""The choice alone (runs/choice.py): the teacher-forced P(oracle | slate) against sampled first reads, its
summaries, and its place in every training evaluation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from skillgate_lib.env import regimes
from skillgate_lib.policy.models import load_policy
from skillgate_lib.policy.rollout import generate
from skillgate_lib.env import SkillSlateEnv
from skillgate_lib.runs.choice import call_episode, choice_summary, logit, oracle_choice
from skillgate_lib.runs.evaluate import heldout_pairs


def test_read_call_spans_the_name_words():
    call, (s, e) = SkillSlateEnv.read_call("ledger-credit-ruby")
    assert call[s:e] == "ledger credit ruby" and call.startswith("<read>") and call.endswith("</read>")


def test_call_episode_masks_what_is_scored():
    _, tok = load_policy("tiny-note8")
    env = regimes.get("paper_note8").env()
    task, slate = heldout_pairs(env, 1)[0]
    prompt = tok(env.prompt(task, slate), add_special_tokens=False)["input_ids"]
    name = call_episode(env, tok, prompt, task, slate, 0, slate.oracle, "name")
    close = call_episode(env, tok, prompt, task, slate, 0, slate.oracle, "name+close")
    call = call_episode(env, tok, prompt, task, slate, 0, slate.oracle, "call")
    words = len(slate.oracle.split("-"))  # the word-level tokenizer: one token a word
    assert sum(name.policy_mask) == words and sum(close.policy_mask) == words + 1 and all(call.policy_mask)
    assert not name.policy_mask[0] and close.policy_mask[-1]
    with pytest.raises(ValueError, match="scored"):
        call_episode(env, tok, prompt, task, slate, 0, slate.oracle, "opener")


def test_choice_matches_sampled_first_reads_of_a_warm_start():
    """On the RL warm start of paper_note8 (one read a trial), P(oracle | slate) averaged over prompts equals the
    rate at which sampled first reads name the oracle, within sampling error (4 standard errors)."""
    torch.manual_seed(0)
    model, tok = load_policy("tiny-note8")
    env = regimes.get("paper_note8").env()
    pairs = heldout_pairs(env, 64, "val")
    probs = oracle_choice(model, tok, env, pairs)
    assert probs.shape == (64,) and ((probs > 0) & (probs < 1)).all()
    items = [(t, s, k) for k, (t, s) in enumerate(pairs)] * 8
    eps = generate(model, tok, env, items, 12, 1.0, torch.Generator().manual_seed(3))
    first = np.array([float(e.outcome.reads[0].category == "oracle") if e.outcome.reads else 0.0 for e in eps])
    se = math.sqrt(probs.mean() * (1 - probs.mean()) / len(first))
    assert abs(first.mean() - probs.mean()) < 4 * se, (first.mean(), probs.mean(), se)


def test_choice_is_deterministic_and_leaves_the_mode():
    model, tok = load_policy("tiny-note8")
    env = regimes.get("paper_note8").env()
    pairs = heldout_pairs(env, 8, "val")
    model.train()
    a = oracle_choice(model, tok, env, pairs, batch=3)
    b = oracle_choice(model, tok, env, pairs, batch=8)
    assert model.training
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_summary_and_logit():
    s = choice_summary(np.array([0.2, 0.6]))
    assert s["eval/choice"] == pytest.approx(0.4) and s["eval/choice_logit"] == pytest.approx(math.log(0.4 / 0.6))
    assert math.isfinite(logit(0.0)) and math.isfinite(logit(1.0)) and logit(0.5) == 0.0


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_tree_scores_equal_one_forward_a_row(attn):
    """Rows sharing a prompt run as one tree-masked sequence; each row's summed log-probability equals a forward of
    that row alone (a random GQA Llama, prompts and responses of different lengths)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from skillgate_lib.policy.batching import pack, response_logprobs
    from skillgate_lib.policy.rollout import Episode
    from skillgate_lib.runs.choice import tree_scores

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, attn_implementation=attn)).eval()
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, 50, (n,), generator=g).tolist() for n in (7, 3, 11)]
    rows = [Episode(None, None, 0, p, response_ids=torch.randint(1, 50, (n,), generator=g).tolist(), policy_mask=[True] * n)
            for p in prompts for n in (1, 4, 2)]
    with torch.no_grad():
        tree = tree_scores(model, rows, 0)
        for i, r in enumerate(rows):
            packed = pack([r], 0)
            alone = response_logprobs(model, packed, share_prompts=False).sum()
            assert tree[i].item() == pytest.approx(alone.item(), abs=1e-5), i
    with pytest.raises(ValueError, match="scored_suffix"):
        tree_scores(model, [Episode(None, None, 0, [1, 2], response_ids=[3, 4], policy_mask=[False, True])], 0)


def test_choice_equals_the_softmax_of_whole_call_scores():
    """P(oracle | slate) from the tree equals the softmax over names of each full episode's name+close score."""
    from skillgate_lib.policy.batching import pack, response_logprobs

    model, tok = load_policy("tiny-note8")
    env = regimes.get("paper_note8").env()
    pairs = heldout_pairs(env, 3, "val")
    probs = oracle_choice(model, tok, env, pairs)
    for (task, slate), p in zip(pairs, probs):
        prompt = tok(env.prompt(task, slate), add_special_tokens=False)["input_ids"]
        eps = [call_episode(env, tok, prompt, task, slate, 0, n, "name+close") for n in slate.names]
        packed = pack(eps, tok.pad_token_id)
        with torch.no_grad():
            s = (response_logprobs(model, packed, share_prompts=False) * packed["response_mask"]).sum(1).double()
        assert p == pytest.approx(float(torch.softmax(s, 0)[slate.names.index(slate.oracle)]), abs=1e-5)
