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
    assert sg.decode_reads(extra[sg.READS_KEY]) == [ReadSpan("oracle", 2, 3, 1, 4), ReadSpan("invalid", 5, 6, 4, 7)]
    with pytest.raises(KeyError, match="skill_names"):
        sg.annotate(ids, tok, {})
