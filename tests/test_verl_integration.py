"""The ``skillgate`` estimator through verl's own registry (and compute_advantage where verl's trainer imports).

verl imports Ray at package import; on the kit's light install :mod:`verl_light` puts a
stand-in in place (the kit's own module imports without either: first test). ``verl.trainer.ppo.ray_trainer``
(home of ``compute_advantage``) needs the real Ray and verl's serving stack, so that one test
skips on the light install. The worker hook, the reward manager, the read tool and the tool
parser run at the end of this file on verl's own classes (they need aiohttp and hydra too).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import verl_light


def test_the_verl_integration_imports_without_verl_or_ray():
    """A fresh interpreter without the stand-in: importing the module loads neither verl nor Ray."""
    import subprocess
    import sys

    code = ("import sys, skillgate_lib.integrations.verl as m, skillgate_lib.integrations.verl_runner, "
            "skillgate_lib.integrations.verl_data; "
            "print(sorted(k for k in sys.modules if k.split('.')[0] in ('ray', 'verl')), callable(m.register))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]", "True"], out.stderr


verl_light.stub_ray_if_absent()
core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
from verl import DataProto  # noqa: E402
from verl.trainer.config import AlgoConfig  # noqa: E402

from skillgate_lib.credit import CreditConfig, CreditInputs, ReadSpan, assign  # noqa: E402
from skillgate_lib.integrations import verl as sg  # noqa: E402

sg.register()

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
    from skillgate_lib.env.skills import load_library

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
    from skillgate_lib.policy.rollout import Episode, annotate

    env, tok = SkillSlateEnv(), load_tokenizer()
    rows = verl_rows("easy", n_tasks=2, seed=0)
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


# ------------------------------------------------------------------ the launch path's pieces, on verl's own classes


def _needs_verl_loop():
    pytest.importorskip("aiohttp", reason="verl's reward loop imports aiohttp (Makefile VERL_DEPS)")


def test_the_worker_hook_registers_the_estimators_and_the_reward_manager(monkeypatch):
    """setup_worker as each Ray worker runs it. Left out on the light install: the trainer's registration (needs
    TransferQueue, which needs Ray) and the tool parser's (verl's agent loop needs its serving stack)."""
    _needs_verl_loop()
    from verl.experimental.reward_loop.reward_manager.registry import get_reward_manager_cls

    from skillgate_lib.integrations import verl_runner, verl_tool

    left_out = []
    monkeypatch.setattr(verl_runner, "trainer_class", lambda: left_out.append("trainer"))
    monkeypatch.setattr(verl_tool, "register_parser", lambda: left_out.append("parser"))
    verl_runner.setup_worker()
    verl_runner.setup_worker()  # idempotent, as Ray may run it twice in a process
    assert left_out == ["parser", "trainer"] * 2
    assert core_algos.get_adv_estimator_fn("skillgate_utility") is sg.compute_utility_advantage
    assert get_reward_manager_cls(verl_runner.REWARD_MANAGER) is verl_runner.reward_manager_class()


def test_the_reward_manager_scores_and_annotates_a_verl_sample():
    """SkillGateRewardManager.run_single (verl's naive manager underneath) on one-row DataProtos of kit episodes."""
    _needs_verl_loop()
    import asyncio

    from skillgate_lib.integrations import verl_data
    from skillgate_lib.integrations.verl_runner import read_annotations, reward_manager_class

    env, tok, data, kit = _kit_batch()
    data.non_tensor_batch["data_source"] = np.array([verl_data.DATA_SOURCE] * len(kit), dtype=object)
    data.non_tensor_batch["reward_model"] = np.array([{"ground_truth": ep.task.gold_answer} for ep in kit], dtype=object)

    async def score_all():
        manager = reward_manager_class()(config=None, tokenizer=tok, compute_score=verl_data.compute_score)
        return [await manager.run_single(data[i: i + 1]) for i in range(len(kit))]

    outs = asyncio.run(score_all())
    assert [o["reward_score"] for o in outs] == [ep.outcome.reward for ep in kit] == [1.0, 0.0, 1.0, 0.0] * 2
    reads, names = read_annotations(range(len(kit)), [{"reward_extra_info": o["reward_extra_info"]} for o in outs])
    assert reads == [ep.read_spans for ep in kit] and names == [ep.read_names for ep in kit]
    with pytest.raises(KeyError, match="sample 7: reward_extra_info has no 'skillgate_reads'; set reward.reward_manager.name=skillgate"):
        read_annotations([7], [{"reward_extra_info": {"acc": 1.0}}])


def test_the_read_tool_and_parser_insert_what_the_kit_inserts():
    """verl's tool agent loop pieces on a kit row: the parser turns the policy's read into a call, the tool answers
    it with the kit's insertion (any spelling of the name), and the episode so assembled scores as the kit's."""
    _needs_verl_loop()
    import asyncio
    import json
    from types import SimpleNamespace

    from skillgate_lib.env import display_name, regimes
    from skillgate_lib.integrations.verl_data import DATA_SOURCE, compute_score, episode_of, verl_rows
    from skillgate_lib.integrations.verl_tool import CALLS_KEY, SkillReadTool, kit_read_calls

    row = verl_rows("easy", n_tasks=1, seed=0)[0]
    env, info = regimes.get("easy").env(), row["extra_info"]
    task, slate = episode_of(env, info)
    written = display_name(slate.oracle).title().replace(" ", "_")  # a spelling the environment itself would not serve
    content, calls = kit_read_calls(f"step one <read> {written} </read> <read> </read>")
    # an empty read is a call too: the environment answers it with an error, as in the kit's rollout
    assert content == "step one" and [(n, json.loads(a)) for n, a in calls] == [("read", {"skill": written}),
                                                                               ("read", {"skill": ""})]

    async def episode(words: list[str]):
        # verl's AgentData: the tool keeps the episode's calls in its extra_fields
        tool, agent = SkillReadTool(config={"type": "native"}), SimpleNamespace(extra_fields={})
        replies = []
        for w in words:  # verl creates, executes and releases one instance per call
            iid, _ = await tool.create(create_kwargs=info["tools_kwargs"]["read"]["create_kwargs"])
            reply, reward, _ = await tool.execute(iid, {"skill": w}, agent_data=agent)
            await tool.release(iid)
            replies.append(reply.text)
        return replies, agent.extra_fields[CALLS_KEY]

    replies, served = asyncio.run(episode(["Ledger Nothing", written] + [written] * 4))
    words = [display_name(slate.oracle)]
    expected = [env.tool_response(task, slate, " ".join(f"<read> {w} </read>" for w in (["ledger nothing"] + words * k)[: k + 1])).strip()
                for k in range(6)]
    assert replies == expected and served[1:] == words * 5
    assert replies[1].startswith("<body>") and replies[5] != replies[1]  # past max_reads: an error, not the body
    # The policy's read, the tool's reply as the kit template renders it, then the demonstration's steps: success.
    demo = env.demonstration(task, slate, [slate.oracle])
    head = f"<read> {display_name(slate.oracle)} </read>"
    assert demo.startswith(head + " " + replies[1])
    assert compute_score(DATA_SOURCE, demo, task.gold_answer, info) == 1.0
    assert compute_score(DATA_SOURCE, demo.replace(" " + replies[1], "", 1), task.gold_answer, info) == 0.0  # no body


def test_make_data_writes_the_regime_and_the_tool_kwargs(tmp_path):
    import runpy
    from pathlib import Path

    import pandas as pd

    from skillgate_lib.integrations.verl_data import regime_env

    script = Path(__file__).resolve().parents[1] / "examples" / "verl" / "make_data.py"
    runpy.run_path(str(script), run_name="make_data")["main"](["--out", str(tmp_path), "--regime", "paper",
                                                               "--n-train", "3", "--n-val", "2"])
    train = pd.read_parquet(tmp_path / "train.parquet")
    assert len(train) == 3 and len(pd.read_parquet(tmp_path / "val.parquet")) == 2
    info = train["extra_info"][0]
    assert info["regime"] == "paper" and info["tools_kwargs"]["read"]["create_kwargs"]["regime"] == "paper"
    assert regime_env(info).step_failure == 0.15 and regime_env({}).step_failure == 0.0
    with pytest.raises(SystemExit):
        runpy.run_path(str(script), run_name="make_data")["main"](["--out", str(tmp_path), "--regime", "nope"])


def test_the_chat_template_override_parses_back_to_the_template():
    hydra_parser = pytest.importorskip("hydra.core.override_parser.overrides_parser")
    from skillgate_lib.integrations.kit_chat import CHAT_TEMPLATE
    from skillgate_lib.integrations.verl_runner import chat_template_override

    override = hydra_parser.OverridesParser.create().parse_override(chat_template_override())
    assert override.key_or_group == "actor_rollout_ref.model.custom_chat_template" and override.value() == CHAT_TEMPLATE


# ------------------------------------------------------------------ lambda, paths, `</read>`, slates, arguments


def test_lambda_is_set_on_the_command_line_and_reaches_every_worker(monkeypatch):
    """``skillgate.selector_coef=X`` leaves verl's overrides, goes to every Ray worker's environment, and the worker
    hook applies it: the estimator's selector weights scale with it."""
    from skillgate_lib.integrations.verl_runner import HOOK, runner_argv

    monkeypatch.setattr(sg, "_CONFIG", [CreditConfig()])
    environ: dict[str, str] = {}
    argv = runner_argv(["algorithm.adv_estimator=skillgate", "skillgate.selector_coef=0.1", "+skillgate.selector_coef=0.5"],
                       environ)
    assert argv == ["algorithm.adv_estimator=skillgate",
                    f"++ray_kwargs.ray_init.runtime_env.env_vars.{sg.SELECTOR_COEF_ENV}=0.5",
                    f"++ray_kwargs.ray_init.runtime_env.worker_process_setup_hook={HOOK}"]
    assert environ == {sg.SELECTOR_COEF_ENV: "0.5"}
    assert runner_argv([], {}) == [f"++ray_kwargs.ray_init.runtime_env.worker_process_setup_hook={HOOK}"]  # default lambda
    with pytest.raises(ValueError, match="SKILLGATE_SELECTOR_COEF='x': lambda must be a number"):
        runner_argv(["skillgate.selector_coef=x"], {})
    # In a worker: the hook reads the variable (here configure_from_env, which setup_worker calls first).
    data = _batch()
    kwargs = dict(token_level_rewards=data.batch["token_level_rewards"], response_mask=data.batch["response_mask"],
                  index=data.non_tensor_batch["uid"], reads=_reads_of(data))
    base, _ = sg.compute_skillgate_advantage(**kwargs)
    assert sg.configure_from_env(environ).selector_coef == 0.5
    scaled, _ = sg.compute_skillgate_advantage(**kwargs)
    assert scaled[0, 1].item() == pytest.approx(base[0, 1].item() * 0.5 / 0.2, rel=1e-5)  # a name token
    assert scaled[0, 5].item() == pytest.approx(base[0, 5].item(), rel=1e-6)  # an execution token


def test_the_launch_script_passes_lambda_and_absolute_paths(tmp_path):
    """skillgate_grpo.sh run from another directory, with ``python -m`` caught: data paths are absolute (the repository's
    data/verl by default, a relative argument resolved), LAMBDA and extra overrides reach the runner."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    shim = tmp_path / "bin" / "python"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nif [ "$1" = "-m" ]; then printf "%s\\n" "$@"; exit 0; fi\nexec {sys.executable} "$@"\n')
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{shim.parent}:{os.environ['PATH']}", "LAMBDA": "0.35"}
    script = root / "examples" / "verl" / "skillgate_grpo.sh"
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")

    def args(*extra: str) -> list[str]:
        out = subprocess.run([bash, str(script), *extra], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        return out.stdout.splitlines()

    got = args("Qwen/Qwen2.5-0.5B-Instruct")
    assert got[:2] == ["-m", "skillgate_lib.integrations.verl_runner"] and "skillgate.selector_coef=0.35" in got
    assert f"data.train_files={root / 'data' / 'verl' / 'train.parquet'}" in got
    assert f"data.val_files={root / 'data' / 'verl' / 'val.parquet'}" in got
    assert f"trainer.rollout_data_dir={root / 'runs' / 'verl_skillgate' / 'rollouts'}" in got
    assert "actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct" in got
    got = args("m", "mine/t.parquet", "trainer.total_training_steps=3")
    assert f"data.train_files={tmp_path / 'mine' / 't.parquet'}" in got and got[-1] == "trainer.total_training_steps=3"


def test_make_data_writes_under_the_repository_by_default():
    import runpy
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "examples" / "verl" / "make_data.py"
    default = runpy.run_path(str(script), run_name="make_data")["DEFAULT_OUT"]
    assert default.is_absolute() and default == script.parents[2] / "data" / "verl"


def _char_tokenizer(text: str):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({c: i for i, c in enumerate(["<unk>", *sorted(set(text))])}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>")


def test_the_reward_side_finds_reads_whatever_the_tokenizer_splits_the_close_tag_into():
    """A tokenizer in which ``</read>`` is seven tokens: the reward manager's annotation locates the read's name tokens."""
    text = 'step <read> alpha sort </read> <body> x </body> <tool_call>{"name": "read", "arguments": "{\\"skill\\": \\"Beta_Merge\\"}"}</tool_call>'
    tok = _char_tokenizer(text)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(tok("</read>", add_special_tokens=False)["input_ids"]) == 7
    info = {"skill_names": ["alpha-sort", "beta-merge"], "skill_categories": ["oracle", "relevant"]}
    payload = sg.annotate(ids, tok, info)[sg.READS_KEY]
    spans = sg.decode_reads(payload)
    assert [s.category for s in spans] == ["oracle", "relevant"] and sg.decode_read_names(payload) == ["alpha-sort", "beta-merge"]
    assert [tok.decode(ids[s.name_start: s.name_end]) for s in spans] == ["alpha sort", "Beta_Merge"]
    assert tok.decode(ids[spans[0].call_start: spans[0].call_end]) == "<read> alpha sort </read>"
    with pytest.raises(ValueError, match="'alpha sort' and 'alpha-sort' both normalise"):
        sg.annotate(ids, tok, {"skill_names": ["alpha sort", "alpha-sort"], "skill_categories": ["oracle", "misleading"]})


def test_the_parser_stops_at_a_one_token_close_tag_and_warns_otherwise(caplog):
    _needs_verl_loop()
    from skillgate_lib.env import load_tokenizer
    from skillgate_lib.integrations.verl_tool import close_tag_stop_ids

    kit = load_tokenizer()
    assert close_tag_stop_ids(kit) == kit("</read>", add_special_tokens=False)["input_ids"]
    with caplog.at_level("WARNING"):
        assert close_tag_stop_ids(_char_tokenizer("</read>")) == []
    assert "'</read>' is 7 tokens of this tokenizer, so generation does not stop after a read" in caplog.text


def test_the_read_tool_takes_string_encoded_arguments():
    _needs_verl_loop()
    import asyncio
    import json
    from types import SimpleNamespace

    from skillgate_lib.env import display_name
    from skillgate_lib.integrations.verl_data import verl_rows
    from skillgate_lib.integrations.verl_tool import SkillReadTool

    row = verl_rows("easy", n_tasks=1, seed=0)[0]
    oracle = row["extra_info"]["skill_names"][row["extra_info"]["skill_categories"].index("oracle")]

    async def reply(parameters):
        tool = SkillReadTool(config={"type": "native"})
        iid, _ = await tool.create(create_kwargs=row["extra_info"]["tools_kwargs"]["read"]["create_kwargs"])
        response, _, _ = await tool.execute(iid, parameters, agent_data=SimpleNamespace(extra_fields={}))
        return response.text

    as_object = asyncio.run(reply({"skill": display_name(oracle)}))
    assert as_object.startswith("<body>") and asyncio.run(reply(json.dumps({"skill": oracle}))) == as_object
