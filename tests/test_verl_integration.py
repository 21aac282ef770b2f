"""The ``skillgate`` estimator through verl's own registry (and compute_advantage where verl's trainer imports).

verl imports Ray at package import; on the kit's light install :mod:`verl_light` puts a
stand-in in place. ``verl.trainer.ppo.ray_trainer`` (home of ``compute_advantage``) needs
the real Ray and verl's serving stack, so that one test skips on the light install.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import verl_light

verl_light.stub_ray_if_absent()
core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
from verl import DataProto  # noqa: E402
from verl.trainer.config import AlgoConfig  # noqa: E402

from skillgate_lib.credit import CreditConfig, CreditInputs, ReadSpan, assign  # noqa: E402
from skillgate_lib.integrations import verl as sg  # noqa: E402

L = 8
# Four prompt groups, interleaved on purpose: grouping must follow the uid, not the position.
#   p0: scores [1, 0, 1], reads u = [1], [0, 0], [0]: mean 1/4, four active reads
#   p1: scores [0, 1, 1], reads u = [0], [], [1]: mean 1/2, two active reads (one with a two-token name)
#   p2: scores [0, 0]: filtered (dynamic sampling), although its reads would carry a signal
#   p3: scores [1, 0], reads u = [0], [0]: kept, but no read is active
UIDS = ["p0", "p1", "p0", "p1", "p0", "p1", "p2", "p3", "p2", "p3"]
SCORES = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0]
LENGTHS = [8, 6, 7, 8, 5, 3, 6, 4, 5, 8]
READS = [
    [ReadSpan("oracle", 1, 2, 0, 3)],
    [ReadSpan("misleading", 2, 4, 1, 5)],  # a two-token name
    [ReadSpan("oracle", 1, 2, 0, 3), ReadSpan("irrelevant", 4, 5, 3, 6)],
    [],
    [ReadSpan("invalid", 1, 2, 0, 3)],
    [ReadSpan("oracle", 0, 1, 0, 2)],
    [ReadSpan("oracle", 1, 2, 0, 3)],
    [ReadSpan("relevant", 1, 2, 0, 3)],
    [ReadSpan("irrelevant", 2, 3, 1, 4)],
    [ReadSpan("misleading", 3, 5, 2, 6)],
]


def _batch() -> DataProto:
    mask = torch.zeros(len(UIDS), L, dtype=torch.float32)
    rewards = torch.zeros(len(UIDS), L)
    for i, n in enumerate(LENGTHS):
        mask[i, :n] = 1
        rewards[i, n - 1] = SCORES[i]  # verl puts the score on the last response token
    return DataProto.from_single_dict({
        "token_level_rewards": rewards,
        "response_mask": mask,
        "uid": np.array(UIDS, dtype=object),
        sg.READS_KEY: np.array([sg.encode_reads(r) for r in READS], dtype=object),
    })


def _kit(data: DataProto, scale: bool = True):
    mask = data.batch["response_mask"].bool()
    group = torch.tensor([sorted(set(UIDS)).index(u) for u in UIDS])
    inputs = CreditInputs(torch.tensor(SCORES, dtype=torch.float64), group, mask, READS)
    return assign("skillgate", inputs, CreditConfig(scale_rewards=scale)), int(mask.sum())


def _reads_of(data: DataProto):
    return [sg.decode_reads(s) for s in data.non_tensor_batch[sg.READS_KEY]]


@pytest.mark.parametrize("norm_by_std", [True, False])
def test_registry_estimator_equals_kit_credit(norm_by_std):
    fn = core_algos.get_adv_estimator_fn("skillgate")
    assert fn is sg.compute_skillgate_advantage
    data = _batch()
    # Exactly the keywords verl's compute_advantage builds for a registered (non-GAE, non-GRPO) estimator.
    kwargs = {"token_level_rewards": data.batch["token_level_rewards"], "response_mask": data.batch["response_mask"],
              "config": AlgoConfig(adv_estimator="skillgate", norm_adv_by_std_in_grpo=norm_by_std),
              "index": data.non_tensor_batch["uid"]}
    with sg.read_annotation(_reads_of(data)):
        adv, ret = fn(**kwargs)
    credit, n = _kit(data, scale=norm_by_std)
    assert adv.shape == (len(UIDS), L) and adv.dtype == torch.float32 and torch.equal(adv, ret)
    torch.testing.assert_close(adv, (credit.advantages * credit.weights * n).float())
    # On each channel's support, dividing out the weight gives back the kit's per-token advantage.
    support = credit.weights > 0
    torch.testing.assert_close(adv.double()[support] / (credit.weights[support] * n), credit.advantages[support], rtol=1e-5, atol=1e-6)
    # verl's token-mean of -A' over the batch is the kit's loss -sum(weights * A) (ratio 1, one mini-batch).
    mask = data.batch["response_mask"]
    token_mean = core_algos.agg_loss(-adv, mask, "token-mean")
    torch.testing.assert_close(token_mean.double(), -(credit.weights * credit.advantages).sum(), rtol=1e-5, atol=1e-7)


def test_selector_channel_by_hand():
    data = _batch()
    with sg.read_annotation(_reads_of(data)):
        adv, _ = core_algos.get_adv_estimator_fn("skillgate")(
            token_level_rewards=data.batch["token_level_rewards"], response_mask=data.batch["response_mask"],
            index=data.non_tensor_batch["uid"])
    n = sum(LENGTHS)
    share = 0.2 / 6  # lambda shared by the six active reads (p0: 4, p1: 2)
    assert adv[0, 1].item() == pytest.approx(0.75 * share * n, rel=1e-5)  # p0's lone oracle read: 1 - 1/4
    assert adv[2, 1].item() == adv[2, 4].item() == pytest.approx(-0.25 * share * n, rel=1e-5)
    assert adv[1, 2].item() == adv[1, 3].item() == pytest.approx(-0.5 * share / 2 * n, rel=1e-5)  # two name tokens
    assert adv[5, 0].item() == pytest.approx(0.5 * share * n, rel=1e-5)
    assert adv[7, 1].item() == 0 and torch.all(adv[9, 3:5] == 0)  # p3's reads: zero advantage, no weight
    assert torch.all(adv[6] == 0) and torch.all(adv[8] == 0)  # p2 is filtered
    # Execution tokens of the kept groups off the read calls: 5 + 2 + 1 + 8 + 2 + 1 + 1 + 4 = 24.
    a_p0 = (1 / 3) / (np.sqrt(1 / 3) + 1e-4)  # scores [1, 0, 1]: centred 1/3, unbiased std sqrt(1/3)
    a_p3 = -0.5 / (np.sqrt(0.5) + 1e-4)
    assert adv[0, 5].item() == pytest.approx(a_p0 / 24 * n, rel=1e-5)
    assert adv[9, 7].item() == pytest.approx(a_p3 / 24 * n, rel=1e-5)
    assert adv[0, 0].item() == 0 and adv[1, 4].item() == 0  # read-call tokens outside the name: no channel
    assert torch.all(adv[3, 8:] == 0) and torch.all(adv[5, 3:] == 0)  # padding


@pytest.mark.filterwarnings("ignore")
def test_verl_compute_advantage_equals_kit_credit():
    ray_trainer = pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="compute_advantage needs Ray and verl's full stack")
    data = _batch()
    with sg.read_annotation(_reads_of(data)):
        out = ray_trainer.compute_advantage(data, adv_estimator="skillgate", config=AlgoConfig(adv_estimator="skillgate"))
    credit, n = _kit(data)
    torch.testing.assert_close(out.batch["advantages"], (credit.advantages * credit.weights * n).float())


def test_missing_or_mismatched_annotation_is_a_clear_error():
    data = _batch()
    kwargs = dict(token_level_rewards=data.batch["token_level_rewards"], response_mask=data.batch["response_mask"],
                  index=data.non_tensor_batch["uid"])
    with pytest.raises(RuntimeError, match="no read annotation.*skillgate_sync"):
        sg.compute_skillgate_advantage(**kwargs)
    with pytest.raises(ValueError, match="10 rows but 1 read annotations"):
        sg.compute_skillgate_advantage(**kwargs, reads=[[]])
    with pytest.raises(ValueError, match="row 3: 'skillgate_reads' is not a JSON list"):
        sg.decode_reads('[["oracle", 1]]', where="row 3")


def test_reward_side_annotation_round_trips():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<pad>", "</s>", "<unk>", "<read>", "</read>", "alpha-sort", "beta-merge", "step"]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    ids = tok("step <read> alpha-sort </read> <read> beta-merge </read> step </s>", add_special_tokens=False)["input_ids"]
    info = {"skill_names": ["alpha-sort", "gamma-plot"], "skill_categories": ["oracle", "relevant"]}
    extra = sg.annotate(ids, tok, info)
    assert sg.decode_reads(extra[sg.READS_KEY]) == [ReadSpan("oracle", 2, 3, 1, 4), ReadSpan("invalid", 5, 6, 4, 7, served=False)]
    with pytest.raises(KeyError, match="skill_names"):
        sg.annotate(ids, tok, {})


# ------------------------------------------------------------------ the kit's environment


def _first(category: str):
    return lambda slate: next(c.name for c in slate.candidates if c.category == category)


def _off_slate(slate):
    from skillgate_lib.skills import load_library

    return next(n for n in sorted(load_library()) if slate.category(n) is None)


# Per group: a lone oracle read (succeeds), a misleading read, a relevant read then the oracle (succeeds), an
# off-slate read (fails): every group is kept and only the lone oracle read has u = 1.
PLANS = ((_first("oracle"),), (_first("misleading"),), (_first("relevant"), _first("oracle")), (_off_slate,))


def _episode_tokens(env, tok, task, slate, reads) -> tuple[list[int], list[bool]]:
    """A demonstration's response ids and policy mask, the environment's replies marked as the kit's rollout marks them."""
    words, policy = (env.demonstration(task, slate, reads) + " </s>").split(), []
    while len(policy) < len(words):
        policy.append(True)
        if words[len(policy) - 1] == "</read>":
            reply = env.tool_response(task, slate, " ".join(words[: len(policy)])).split()
            assert words[len(policy): len(policy) + len(reply)] == reply
            policy += [False] * len(reply)
    return tok(" ".join(words), add_special_tokens=False)["input_ids"], policy


def _kit_batch():
    """Two tasks x PLANS as verl's agent loop lays a batch out, plus the kit's own annotation of each episode."""
    from skillgate_lib.env import SkillSlateEnv, load_tokenizer
    from skillgate_lib.integrations.verl_data import episode_of, verl_rows
    from skillgate_lib.rollout import Episode, annotate

    env, tok = SkillSlateEnv(), load_tokenizer()
    rows = verl_rows(env, n_tasks=2, seed=0)
    prompts, responses, policy, infos, uids, kit = [], [], [], [], [], []
    for g, row in enumerate(rows):
        task, slate = episode_of(env, row["extra_info"])
        for plan in PLANS:
            ids, mask = _episode_tokens(env, tok, task, slate, [pick(slate) for pick in plan])
            prompt_ids = tok(row["prompt"][0]["content"], add_special_tokens=False)["input_ids"]
            ep = Episode(task, slate, g, prompt_ids, ids, mask)
            annotate(ep, env, tok)
            prompts.append(prompt_ids), responses.append(ids), policy.append(mask), kit.append(ep)
            infos.append(row["extra_info"]), uids.append(f"task-{g}")
    P, R = max(map(len, prompts)), max(map(len, responses))
    batch = {k: torch.zeros(len(kit), n, dtype=torch.long) for k, n in
             (("prompts", P), ("responses", R), ("attention_mask", P + R), ("response_mask", R))}
    for i, (p, r, m) in enumerate(zip(prompts, responses, policy)):
        batch["prompts"][i, P - len(p):] = torch.tensor(p)  # verl: prompts left-padded, responses right-padded
        batch["responses"][i, : len(r)] = torch.tensor(r)
        batch["attention_mask"][i, P - len(p): P + len(r)] = 1
        batch["response_mask"][i, : len(r)] = torch.tensor(m, dtype=torch.long)
    data = DataProto.from_single_dict({**batch, "uid": np.array(uids, dtype=object),
                                       "extra_info": np.array(infos, dtype=object)})
    return env, tok, data, kit


def test_reward_manager_and_estimator_on_the_kit_environment():
    """What the SkillGate reward manager hands the estimator for kit episodes (bodies inserted by the environment):
    the environment's own read categories, verl's response mask keeping inserted text out, and the kit's credit."""
    from skillgate_lib.integrations.verl_data import DATA_SOURCE, compute_score

    env, tok, data, kit = _kit_batch()
    R = data.batch["responses"].shape[1]
    payloads = [sg.reward_extra_info(data[i], tok)[sg.READS_KEY] for i in range(len(kit))]
    reads = [sg.decode_reads(p) for p in payloads]
    names = [sg.decode_read_names(p) for p in payloads]
    assert reads == [ep.read_spans for ep in kit] and names == [ep.read_names for ep in kit]  # the kit's own annotation
    assert [[s.category for s in r] for r in reads] == [[x.category for x in ep.outcome.reads] for ep in kit]
    assert sum(s.category == "oracle" for r in reads for s in r) == 4 and names[0] == [kit[0].slate.oracle]
    # The naive manager's score: compute_score on the decoded response (inserted bodies included).
    scores = []
    for i, ep in enumerate(kit):
        n = len(ep.response_ids)
        text = tok.decode(data.batch["responses"][i, :n].tolist(), skip_special_tokens=True)
        scores.append(compute_score(DATA_SOURCE, text, ep.task.gold_answer, data.non_tensor_batch["extra_info"][i]))
    assert scores == [ep.outcome.reward for ep in kit] == [1.0, 0.0, 1.0, 0.0] * 2
    token_rewards = torch.zeros(len(kit), R)
    for i, (ep, s) in enumerate(zip(kit, scores)):
        token_rewards[i, len(ep.response_ids) - 1] = s
    mask = data.batch["response_mask"].float()
    with sg.read_annotation(reads):
        adv, _ = core_algos.get_adv_estimator_fn("skillgate")(
            token_level_rewards=token_rewards, response_mask=mask, index=data.non_tensor_batch["uid"],
            config=AlgoConfig(adv_estimator="skillgate"))
    # The kit's trainer on the same episodes: its response mask is the rollout's policy mask.
    inputs = CreditInputs(torch.tensor(scores, dtype=torch.float64), torch.arange(len(kit)) // len(PLANS),
                          mask.bool(), [ep.read_spans for ep in kit])
    credit = assign("skillgate", inputs)
    torch.testing.assert_close(adv, (credit.advantages * credit.weights * int(mask.sum())).float())
    assert torch.all(adv[mask == 0] == 0) and (mask == 0).sum() > 0  # inserted bodies: no loss
    for g in range(2):
        lone = reads[g * len(PLANS)][0]
        assert torch.all(adv[g * len(PLANS), lone.name_start: lone.name_end] > 0)  # lone oracle read: 1 - 1/5
        assert credit.read_adv[g * len(PLANS)] == pytest.approx([0.8])


def test_utility_estimator_carries_skill_values(monkeypatch):
    """``skillgate_utility``: batch 1 sees the prior only; batch 2 the values batch 1 left, by stored skill name."""
    import copy

    from skillgate_lib.credit import SkillValues

    env, tok, data, kit = _kit_batch()
    monkeypatch.setattr(sg, "SKILL_VALUES", SkillValues())
    reads, names = [ep.read_spans for ep in kit], [ep.read_names for ep in kit]
    R = data.batch["responses"].shape[1]
    token_rewards = torch.zeros(len(kit), R)
    for i, ep in enumerate(kit):
        token_rewards[i, len(ep.response_ids) - 1] = ep.outcome.reward
    mask, uids = data.batch["response_mask"].float(), data.non_tensor_batch["uid"]
    fn = core_algos.get_adv_estimator_fn("skillgate_utility")
    assert fn is sg.compute_utility_advantage
    with pytest.raises(ValueError, match="no skill names"):
        fn(token_level_rewards=token_rewards, response_mask=mask, index=uids, reads=reads)
    for step in range(2):
        before = copy.deepcopy(sg.SKILL_VALUES)
        with sg.read_annotation(reads, names):
            adv, _ = fn(token_level_rewards=token_rewards, response_mask=mask, index=uids)
        inputs = CreditInputs(token_rewards.sum(-1).double(), torch.arange(len(kit)) // len(PLANS), mask.bool(), reads,
                              names, before)
        credit = assign("utility", inputs)
        torch.testing.assert_close(adv, (credit.advantages * credit.weights * int(mask.sum())).float())
        assert (step == 0) == all(a == 0 for row in credit.read_adv for a in row)
    assert kit[0].slate.oracle in sg.SKILL_VALUES.values and all("-" in n for n in sg.SKILL_VALUES.values)
