"""The batched multi-turn decoder against a plain reference: one full forward per token, no cache.

The decoder shares prompt caches across a group, samples with the LoRA update folded into
the weights, feeds inserted skill bodies in one forward with the closing token, and drops
ended rows from the batch. Under greedy decoding each of those must leave every policy
token equal to the argmax of the unmerged LoRA model on prompt + response so far.
"""

from __future__ import annotations

import pytest
import torch

from skillgate_lib.env import SkillSlateEnv
from skillgate_lib.policy.models import load_policy
from skillgate_lib.policy.rollout import generate, merged_lora
from skillgate_lib.runs import train


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    base, tokenizer = load_policy("tiny")
    model = train.setup_training(base, train.TrainConfig()).model
    with torch.no_grad():  # a LoRA update that changes the outputs, so folding it is tested
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    return model, tokenizer


def _items(env, n_prompts=6, group=3):
    cfg = train.TrainConfig(prompts_per_step=n_prompts, group_size=group)
    return train.step_items(env, cfg, step=0)


@pytest.mark.parametrize("cap,min_new", [(96, 0), (160, 0), (512, 512)])
def test_greedy_rollouts_match_a_token_by_token_reference(policy, cap, min_new):
    """At 512 EOS is forbidden until the cap (``min_new_tokens``), so every row is 512 tokens long."""
    model, tokenizer = policy
    env = SkillSlateEnv()
    items = _items(env)
    episodes = generate(model, tokenizer, env, items, max_new_tokens=cap, temperature=0.0,
                        generator=torch.Generator().manual_seed(0), min_new_tokens=min_new)
    assert sum(not m for e in episodes for m in e.policy_mask) > 0, "no skill body was inserted: nothing tested"
    if min_new:
        assert all(len(e.response_ids) == cap and tokenizer.eos_token_id not in e.response_ids for e in episodes)
    else:
        assert len({len(e.response_ids) for e in episodes}) > 1, "every row the same length: row dropping untested"
    model.eval()
    with torch.no_grad():
        for e in episodes:
            ids = torch.tensor([e.prompt_ids + e.response_ids])
            logits = model(input_ids=ids).logits[0]
            P = len(e.prompt_ids)
            for t, (tok, is_policy) in enumerate(zip(e.response_ids, e.policy_mask)):
                if is_policy:
                    row = logits[P - 1 + t].clone()
                    if t < min_new:
                        row[tokenizer.eos_token_id] = float("-inf")
                    top2 = row.topk(2)
                    if top2.values[0] - top2.values[1] > 1e-3:  # skip exact near-ties
                        assert tok == int(top2.indices[0]), f"{e.task.task_id}: token {t} differs from the reference"
            # every run of environment tokens is exactly the environment's reply at that point
            k = 0
            while k < len(e.response_ids):
                if e.policy_mask[k]:
                    k += 1
                    continue
                end = k
                while end < len(e.response_ids) and not e.policy_mask[end]:
                    end += 1
                reply = env.tool_response(e.task, e.slate, tokenizer.decode(e.response_ids[:k], skip_special_tokens=True))
                expected = tokenizer(reply, add_special_tokens=False)["input_ids"]
                assert e.response_ids[k:end] == expected[: end - k], f"{e.task.task_id}: inserted text at {k}"
                assert end - k == len(expected) or end == len(e.response_ids)
                k = end


def test_same_generator_same_rollouts(policy):
    model, tokenizer = policy
    env = SkillSlateEnv()
    runs = [generate(model, tokenizer, env, _items(env), 64, 1.0, torch.Generator().manual_seed(3)) for _ in range(2)]
    assert [e.response_ids for e in runs[0]] == [e.response_ids for e in runs[1]]


def test_merged_lora_restores_the_base_bit_for_bit(policy):
    model, tokenizer = policy
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    ids = torch.tensor([[3, 4, 5, 6]])
    with torch.no_grad():
        unmerged = model(input_ids=ids).logits
        with merged_lora(model) as m:
            merged = m(input_ids=ids).logits
    torch.testing.assert_close(merged, unmerged, atol=1e-5, rtol=1e-5)
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())
    with torch.no_grad(), model.disable_adapter():
        base = model(input_ids=ids).logits
    assert not torch.allclose(base, unmerged, atol=1e-4), "the LoRA update did not change the outputs"


def test_response_cap_cuts_an_insertion(policy):
    model, tokenizer = policy
    env = SkillSlateEnv()
    episodes = generate(model, tokenizer, env, _items(env, 2, 2), max_new_tokens=8, temperature=1.0,
                        generator=torch.Generator().manual_seed(0))
    assert all(len(e.response_ids) <= 8 and len(e.policy_mask) == len(e.response_ids) for e in episodes)


def test_packed_logprobs_match_each_episode_alone(policy):
    """Left-padded prompts, aligned responses: each row's log-probs equal its own unpadded forward."""
    from skillgate_lib.policy.batching import pack, response_logprobs

    model, tokenizer = policy
    env = SkillSlateEnv()
    episodes = generate(model, tokenizer, env, _items(env, 3, 2), 48, 1.0, torch.Generator().manual_seed(1))
    assert len({len(e.prompt_ids) for e in episodes}) > 1 or len({len(e.response_ids) for e in episodes}) > 1
    batch = pack(episodes, tokenizer.pad_token_id)
    with torch.no_grad():
        packed = response_logprobs(model, batch)
        for i, e in enumerate(episodes):
            logits = model(input_ids=torch.tensor([e.prompt_ids + e.response_ids])).logits[0].float()
            P, R = len(e.prompt_ids), len(e.response_ids)
            alone = torch.log_softmax(logits[P - 1 : P - 1 + R], -1).gather(1, torch.tensor(e.response_ids)[:, None])[:, 0]
            torch.testing.assert_close(packed[i, :R], alone, atol=1e-4, rtol=1e-4)
            assert batch["response_mask"][i, :R].tolist() == e.policy_mask and not batch["response_mask"][i, R:].any()


def test_shared_prompt_forward_matches_the_plain_one_with_gradients(policy):
    """One prompt forward per group, its cache copied to the G rows: same log-probs, same LoRA gradients."""
    from skillgate_lib.policy.batching import pack, response_logprobs

    model, tokenizer = policy
    env = SkillSlateEnv()
    episodes = generate(model, tokenizer, env, _items(env, 3, 4), 48, 1.0, torch.Generator().manual_seed(2))
    batch = pack(episodes, tokenizer.pad_token_id)
    assert len(batch["unique"]) == 3 and batch["source"].tolist() == [0] * 4 + [1] * 4 + [2] * 4
    params = [p for p in model.parameters() if p.requires_grad]
    weights = torch.rand(batch["response_ids"].shape) * batch["response_mask"]
    results = []
    model.train()
    for share in (False, True):
        model.zero_grad(set_to_none=True)
        logp = response_logprobs(model, batch, share_prompts=share)
        (logp * weights).sum().backward()
        results.append((logp.detach(), [p.grad.clone() for p in params]))
    (plain, g_plain), (shared, g_shared) = results
    mask = batch["response_mask"]
    torch.testing.assert_close(shared[mask], plain[mask], atol=1e-4, rtol=1e-4)
    for a, b in zip(g_shared, g_plain):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)
    assert any(g.abs().sum() > 0 for g in g_plain)


@pytest.mark.parametrize("share", [True, False])
def test_length_buckets_match_one_padded_batch_with_gradients(policy, share):
    """Rows grouped by response length, each group padded to its own longest response: the same
    log-probs and LoRA gradients as one batch padded to the longest."""
    from skillgate_lib.policy.batching import pack, response_logprobs

    model, tokenizer = policy
    env = SkillSlateEnv()
    episodes = generate(model, tokenizer, env, _items(env, 3, 4), 64, 1.0, torch.Generator().manual_seed(3))
    lengths = sorted(len(e.response_ids) for e in episodes)
    assert lengths[0] < lengths[-1], "equal lengths would not exercise the buckets"
    batch = pack(episodes, tokenizer.pad_token_id)
    params = [p for p in model.parameters() if p.requires_grad]
    mask = batch["response_mask"]
    weights = torch.rand(mask.shape) * mask
    results = []
    model.train()
    for buckets in (1, 3, 20):  # 20 > rows: empty groups are skipped
        model.zero_grad(set_to_none=True)
        logp = response_logprobs(model, batch, share_prompts=share, buckets=buckets)
        (logp * weights).sum().backward()
        results.append((logp.detach(), [p.grad.clone() for p in params]))
    (plain, g_plain), *bucketed = results
    for logp, grads in bucketed:
        torch.testing.assert_close(logp[mask], plain[mask], atol=1e-4, rtol=1e-4)
        for a, b in zip(grads, g_plain):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)
    assert any(g.abs().sum() > 0 for g in g_plain)


def test_ended_rows_keep_nothing_after_their_end():
    """Rows that sampled EOS (or hit the cap) stay in the batch until enough have ended; they
    must not collect tokens meanwhile. The warm start ends episodes at many different lengths."""
    model, tokenizer = load_policy("tiny")
    env = SkillSlateEnv()
    cap = 160
    episodes = generate(model, tokenizer, env, _items(env, 8, 4), cap, 1.0, torch.Generator().manual_seed(5))
    eos = tokenizer.eos_token_id
    ends = [e.response_ids.index(eos) for e in episodes if eos in e.response_ids]
    assert len(set(ends)) > 3, "too few distinct end points to exercise the batch compaction"
    for e in episodes:
        assert len(e.response_ids) <= cap and len(e.policy_mask) == len(e.response_ids)
        if eos in e.response_ids:
            assert e.response_ids.index(eos) == len(e.response_ids) - 1, f"{e.task.task_id}: tokens after EOS"
