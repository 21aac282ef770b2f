"""The ``skillgate`` estimator through verl's own registry (and compute_advantage where verl's trainer imports).

verl 0.9's package ``__init__`` imports ``verl.protocol``, which imports Ray at module
level only for ``ray.ObjectRef`` annotations and ``DataProtoFuture.get``. The kit's light
install has no Ray, so a minimal stand-in module is put in place when Ray is absent;
nothing here calls it. ``verl.trainer.ppo.ray_trainer`` (home of ``compute_advantage``)
needs the real Ray and verl's serving stack, so that one test skips on the light install.
"""

from __future__ import annotations

import importlib.util
import sys
import types

import numpy as np
import pytest
import torch

if importlib.util.find_spec("ray") is None and importlib.util.find_spec("verl") is not None:
    _ray = types.ModuleType("ray")
    _ray.ObjectRef = type("ObjectRef", (), {})

    def _unavailable(*_a, **_k):
        raise RuntimeError("Ray is not installed (light verl install for tests)")

    _ray.get = _ray.remote = _ray.put = _unavailable
    sys.modules["ray"] = _ray

core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
from verl import DataProto  # noqa: E402
from verl.trainer.config import AlgoConfig  # noqa: E402

from skillgate_lib.credit import CreditConfig, CreditInputs, ReadSpan, assign  # noqa: E402
from skillgate_lib.integrations import verl as sg  # noqa: E402

L = 8
# Two prompt groups, interleaved on purpose: grouping must follow the uid, not the position.
UIDS = ["p0", "p1", "p0", "p1", "p0", "p1"]
SCORES = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0]
LENGTHS = [8, 6, 7, 8, 5, 3]
READS = [
    [ReadSpan("oracle", 1, 2, 0, 3)],
    [ReadSpan("misleading", 2, 4, 1, 5)],  # a two-token name
    [ReadSpan("oracle", 1, 2, 0, 3), ReadSpan("irrelevant", 4, 5, 3, 6)],
    [],
    [ReadSpan("invalid", 1, 2, 0, 3)],
    [ReadSpan("oracle", 0, 1, 0, 2)],
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
    group = torch.tensor([0 if u == "p0" else 1 for u in UIDS])
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
    n_sel = 1 + 2 + 1 + 1 + 1 + 1  # name tokens
    # Group p0 reads: row 0 oracle alone (u=1), row 2 two reads (u=0, 0), row 4 invalid (u=0): mean 1/4.
    assert adv[0, 1].item() == pytest.approx(0.75 * 0.2 / n_sel * n, rel=1e-5)
    assert adv[2, 1].item() == pytest.approx(-0.25 * 0.2 / n_sel * n, rel=1e-5)
    # Group p1 reads: row 1 misleading (u=0), row 5 oracle alone (u=1): mean 1/2.
    assert adv[1, 2].item() == adv[1, 3].item() == pytest.approx(-0.5 * 0.2 / n_sel * n, rel=1e-5)
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
    with pytest.raises(ValueError, match="6 rows but 1 read annotations"):
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
