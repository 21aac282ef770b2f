"""SkillGateGRPOTrainer on a tiny random Llama: TRL's per-token advantages and loss equal the kit's (and verl's)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
import verl_light

pytest.importorskip("trl")
peft = pytest.importorskip("peft")
from datasets import Dataset  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402
from trl import GRPOConfig  # noqa: E402

from skillgate_lib.credit import CreditInputs, ReadSpan, SkillValues, assign  # noqa: E402
from skillgate_lib.integrations import ReadFormat, find_reads, read_spans  # noqa: E402
from skillgate_lib.integrations.trl import SkillGateGRPOTrainer  # noqa: E402

WORDS = ["<pad>", "<s>", "</s>", "<unk>", "<read>", "</read>", "alpha-sort", "alpha-sorx", "beta-merge", "gamma-plot",
         "step", "ok", "done", "task:", "sort", "list", "slate:", "two", "words"]
SLATE = {"alpha-sort": "oracle", "alpha-sorx": "misleading", "beta-merge": "relevant", "gamma-plot": "irrelevant"}
# The first generation batch, scripted so that every kind of read occurs; the second is sampled.
# Three prompt groups of four (TRL's layout: consecutive completions share a prompt):
#   group 0, rewards [1, 0, 1, 0]: u = [1], [0], [0, 0], []: mean 1/4, all four reads active
#   group 1, rewards [0, 0, 0, 0]: filtered (dynamic sampling), though its reads carry a signal
#   group 2, rewards [1, 0, 1, 1]: u = [0], [0], [0]: kept, no read active (one has a two-token name)
SCRIPT = [
    "<read> alpha-sort </read> step ok done </s>",  # single oracle read, success
    "<read> alpha-sorx </read> step done </s>",  # misleading read, failure
    "<read> alpha-sort </read> <read> beta-merge </read> step ok done </s>",  # two reads, success
    "step step done </s>",  # no read, failure
    "<read> alpha-sort </read> step done </s>",
    "<read> gamma-plot </read> step done </s>",
    "<read> alpha-sort </read> step step done </s>",
    "done </s>",
    "<read> alpha-sorx </read> step ok done </s>",
    "<read> beta-merge </read> step done </s>",
    "<read> two words </read> step ok ok done </s>",  # an off-slate name
    "step ok step done </s>",
]
# Hand-made read spans of SCRIPT (word-level: token index = word index).
ORACLE, MISLEADING = ReadSpan("oracle", 1, 2, 0, 3), ReadSpan("misleading", 1, 2, 0, 3)
SCRIPT_READS = [
    [ORACLE], [MISLEADING], [ORACLE, ReadSpan("relevant", 4, 5, 3, 6)], [],
    [ORACLE], [ReadSpan("irrelevant", 1, 2, 0, 3)], [ORACLE], [],
    [MISLEADING], [ReadSpan("relevant", 1, 2, 0, 3)], [ReadSpan("invalid", 1, 3, 0, 4)], [],
]
SCRIPT_NAMES = [["alpha-sort"], ["alpha-sorx"], ["alpha-sort", "beta-merge"], [], ["alpha-sort"], ["gamma-plot"],
                ["alpha-sort"], [], ["alpha-sorx"], ["beta-merge"], ["two-words"], []]
GROUP = torch.arange(len(SCRIPT)) // 4
PROMPTS = ("task: sort list slate: alpha-sort alpha-sorx", "task: sort two words slate: beta-merge gamma-plot",
           "task: list two words slate: alpha-sort gamma-plot")
LAMBDA = 0.2


def _tokenizer() -> PreTrainedTokenizerFast:
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def _reward(completions, **_):
    return [1.0 if "ok" in c.split() else 0.0 for c in completions]


class _Recording(SkillGateGRPOTrainer):
    """Scripts the generations of the steps in ``script_steps``; records each generation batch before TRL
    shuffles it (rows in prompt-group order) and the loss of each step."""

    def __init__(self, *a, script_steps=(0,), **k):
        super().__init__(*a, **k)
        self.script_steps = set(script_steps)
        self.generated: list[dict] = []
        self.losses: list[torch.Tensor] = []

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        if self.state.global_step in self.script_steps:
            return [self.processing_class(s, add_special_tokens=False)["input_ids"] for s in SCRIPT], None
        return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.generated.append({k: output[k].detach().cpu().clone()
                               for k in ("completion_ids", "completion_mask", "advantages", "num_items_in_batch")})
        return output

    def _compute_loss(self, model, inputs):
        loss = super()._compute_loss(model, inputs)
        self.losses.append(loss.detach().cpu().clone())
        return loss


def test_find_reads_on_hand_made_tokens():
    tok = _tokenizer()
    ids = tok("step <read> alpha-sort </read> done <read> two words </read> <read> gamma-plot", add_special_tokens=False)["input_ids"]
    found = find_reads(ids, tok)
    assert [(r.name, r.name_start, r.name_end, r.call_start, r.call_end) for r in found] == [
        ("alpha-sort", 2, 3, 1, 4), ("two words", 6, 8, 5, 9)]  # multi-word name; the unclosed call is no read
    spans, names = read_spans(ids, tok, {**SLATE, "two  words": "relevant"})
    assert names == ["alpha-sort", "two-words"] and [s.category for s in spans] == ["oracle", "relevant"]
    assert read_spans(ids, tok, {"two-words": "misleading"})[0][1].category == "misleading"  # stored or written form
    assert [s.category for s in read_spans(ids, tok, {})[0]] == ["invalid", "invalid"]
    custom = find_reads(tok("step alpha-sort done", add_special_tokens=False)["input_ids"], tok, ReadFormat("step", "done"))
    assert [(r.name, r.name_start, r.call_end) for r in custom] == [("alpha-sort", 1, 3)]


def test_a_turn_is_cut_after_its_first_read_call_whatever_the_tokenizer():
    """first_call_end on a character-level tokenizer, where ``</read>`` is seven tokens (and on the word-level one)."""
    from tokenizers import Regex, decoders

    from skillgate_lib.integrations import first_call_end

    text = "ok <read> two words </read> <body> x </body> <read> alpha-sort </read>"
    chars = sorted(set(text))
    core = Tokenizer(models.WordLevel({c: i for i, c in enumerate(["<unk>", *chars])}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    char_tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>")
    ids = char_tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text)
    cut = first_call_end(ids, char_tok)
    assert char_tok.decode(ids[:cut]) == "ok <read> two words </read>"
    at = text.index  # one token per character
    assert [(r.name, r.name_start, r.name_end, r.call_end) for r in find_reads(ids, char_tok)] == [
        ("two words", at("two"), at(" </read>"), cut), ("alpha-sort", at("alpha"), at("alpha") + 10, len(text))]
    word = _tokenizer()
    assert first_call_end(word("<read> </read> step", add_special_tokens=False)["input_ids"], word) == 2  # empty: still a call
    assert first_call_end(word("step ok </read>", add_special_tokens=False)["input_ids"], word) is None


def _train(out, credit="skillgate", script_steps=(0,), reward=_reward, credit_config=None, slate=True, evaluate=False,
           **extra):
    torch.manual_seed(0)
    tok = _tokenizer()
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(WORDS), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                         pad_token_id=0, bos_token_id=1, eos_token_id=2))
    columns = {"skill_names": list(SLATE), "skill_categories": list(SLATE.values())} if slate else {}
    rows = [{"prompt": p, **columns} for p in PROMPTS]
    if evaluate:  # an eval split of the same rows, scripted like step 0
        extra = {"per_device_eval_batch_size": len(SCRIPT), "num_generations_eval": 4, **extra}
    args = GRPOConfig(output_dir=str(out), report_to="none", max_steps=2, num_generations=4,
                      per_device_train_batch_size=len(SCRIPT), max_completion_length=10, logging_steps=1,
                      use_cpu=True, bf16=False, learning_rate=5e-2, save_strategy="no", seed=0, **extra)
    trainer = _Recording(model=model, args=args, processing_class=tok, reward_funcs=reward, train_dataset=Dataset.from_list(rows),
                         eval_dataset=Dataset.from_list(rows) if evaluate else None,
                         peft_config=peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"),
                         credit=credit, credit_config=credit_config, script_steps=script_steps)
    before = {k: v.detach().clone() for k, v in trainer.model.named_parameters()}
    trainer.train()
    return trainer, tok, before, dict(trainer.model.named_parameters())


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("trl")
    return (*_train(out, log_completions=True), out)


def _lengths(batch) -> list[int]:
    return [int(n) for n in batch["completion_mask"].sum(dim=1)]


def _texts(batch, tok) -> list[str]:
    return [tok.decode(ids[:n], skip_special_tokens=True) for ids, n in zip(batch["completion_ids"], _lengths(batch))]


def _kit_inputs(batch, tok, scripted: bool, **extra) -> CreditInputs:
    """The kit's view of a recorded generation batch: rows in TRL's order, ``num_generations`` per group."""
    if scripted:
        assert _texts(batch, tok) == [t.replace(" </s>", "") for t in SCRIPT]
        reads = SCRIPT_READS
    else:
        reads = [read_spans(ids[:n].tolist(), tok, SLATE)[0] for ids, n in zip(batch["completion_ids"], _lengths(batch))]
    rewards = torch.tensor(_reward(_texts(batch, tok)), dtype=torch.float64)
    return CreditInputs(rewards, GROUP, batch["completion_mask"].bool(), reads, **extra)


def test_trl_uses_the_kit_credit_token_by_token(run):
    trainer, tok, *_ = run
    assert len(trainer.generated) == len(trainer.losses) == 2
    for step, (batch, loss) in enumerate(zip(trainer.generated, trainer.losses)):
        inputs = _kit_inputs(batch, tok, scripted=step == 0)
        credit = assign("skillgate", inputs)
        N = int(batch["num_items_in_batch"])
        assert N == int(inputs.response_mask.sum())
        torch.testing.assert_close(batch["advantages"], (credit.advantages * credit.weights * N).float(), rtol=1e-6, atol=1e-7)
        # On-policy first iteration the ratio is 1, so TRL's dapo loss is -sum(A') / N: the kit's -sum(weights * A).
        torch.testing.assert_close(loss.double(), -(credit.weights * credit.advantages).sum(), rtol=1e-5, atol=1e-7)
    assert trainer.state.log_history[0]["credit/groups_filtered"] == 1.0  # scripted group 1

    # Step 0 by hand. Active reads: group 0's four (u = [1], [0], [0, 0], mean 1/4), one name token each.
    adv = trainer.generated[0]["advantages"].double()
    N = 27 + 21 + 27  # tokens per group (with </s>)
    assert adv[0, 1].item() == pytest.approx(0.75 * LAMBDA / 4 * N, rel=1e-6)
    assert adv[2, 4].item() == pytest.approx(-0.25 * LAMBDA / 4 * N, rel=1e-6)
    assert adv[0, 0].item() == 0 and adv[0, 2].item() == 0  # "<read>" and "</read>": in neither channel
    assert torch.all(adv[4:8] == 0)  # group 1: filtered
    assert adv[8, 1].item() == 0 and adv[10, 1].item() == adv[10, 2].item() == 0  # group 2: no active read
    exec_tokens = (27 - 12) + (27 - 10)  # groups 0 and 2, off their read calls
    a0 = 0.5 / (torch.tensor([1.0, 0, 1, 0]).std().item() + 1e-4)
    a2 = 0.25 / (torch.tensor([1.0, 0, 1, 1]).std().item() + 1e-4)
    assert adv[0, 3].item() == pytest.approx(a0 / exec_tokens * N, rel=1e-5)
    assert adv[8, 3].item() == pytest.approx(a2 / exec_tokens * N, rel=1e-5)


def test_trl_verl_and_kit_give_the_same_token_weights(run):
    """One batch (TRL's scripted step) through verl's reward-side annotation and estimator, too."""
    verl_light.stub_ray_if_absent()
    pytest.importorskip("verl.trainer.ppo.core_algos")
    from skillgate_lib.integrations import verl as sg

    trainer, tok, *_ = run
    batch = trainer.generated[0]
    lengths, scores = _lengths(batch), _reward(_texts(batch, tok))
    slate = {"skill_names": list(SLATE), "skill_categories": list(SLATE.values())}
    reads = [sg.decode_reads(sg.annotate(ids[:n].tolist(), tok, slate)[sg.READS_KEY])
             for ids, n in zip(batch["completion_ids"], lengths)]
    token_rewards = torch.zeros(batch["completion_mask"].shape)
    for i, (n, r) in enumerate(zip(lengths, scores)):
        token_rewards[i, n - 1] = r  # verl puts the score on the last response token
    uids = np.array([f"prompt-{int(g)}" for g in GROUP], dtype=object)
    verl_adv, _ = sg.compute_skillgate_advantage(token_rewards, batch["completion_mask"].float(), uids,
                                                 config={"norm_adv_by_std_in_grpo": True}, reads=reads)
    trl_adv = batch["advantages"]
    torch.testing.assert_close(verl_adv, trl_adv, rtol=0, atol=0)

    kit = assign("skillgate", _kit_inputs(batch, tok, scripted=True))
    assert kit.groups_filtered == 1
    N = int(batch["num_items_in_batch"])
    support = kit.advantages != 0
    implied = trl_adv.double()[support] / (kit.advantages[support] * N)  # each engine's weight on a token
    torch.testing.assert_close(implied, kit.weights[support], rtol=1e-5, atol=1e-9)
    assert torch.all(trl_adv[kit.weights == 0] == 0)
    # The reference's weights on one name token: lambda / 4 active reads, 1 / 32 execution tokens elsewhere.
    assert kit.weights[0, 1].item() == pytest.approx(LAMBDA / 4) and kit.weights[0, 3].item() == pytest.approx(1 / 32)


def test_lora_moves_and_base_stays(run):
    _, _, before, after, _ = run
    lora = [k for k in before if "lora_" in k]
    base = [k for k in before if "lora_" not in k]
    assert lora and base
    assert any(not torch.equal(before[k], after[k]) for k in lora if "lora_B" in k)
    assert all(torch.equal(before[k], after[k]) for k in base)


def test_completions_parquet_carries_channel_columns(run):
    *_, out = run
    first = pd.read_parquet(out / "completions" / "completions_00001.parquet")
    for col in ("advantage", "response_tokens", "read_skills", "read_categories", "read_tok_start", "read_tok_end",
                "adv_exec", "read_adv", "sel_weight", "credit"):
        assert col in first.columns, col
    assert len(first) == len(SCRIPT) and set(first["credit"]) == {"skillgate"}
    by_text = {c: r for c, r in zip(first["completion"], first.itertuples())}
    two = by_text[SCRIPT[2].replace(" </s>", "")]
    assert list(two.read_skills) == ["alpha-sort", "beta-merge"] and list(two.read_categories) == ["oracle", "relevant"]
    assert list(two.read_tok_start) == [1, 4] and list(two.read_adv) == pytest.approx([-0.25, -0.25])
    assert two.response_tokens == 10 and 0 < two.sel_weight < 1
    assert by_text[SCRIPT[3].replace(" </s>", "")].sel_weight == 0
    filtered = by_text[SCRIPT[4].replace(" </s>", "")]
    assert list(filtered.read_adv) == [0.0] and filtered.adv_exec == 0 and filtered.sel_weight == 0
    off_slate = by_text[SCRIPT[10].replace(" </s>", "")]
    assert list(off_slate.read_skills) == ["two-words"] and list(off_slate.read_categories) == ["invalid"]
    assert list(off_slate.read_tok_end) == [3] and list(off_slate.read_adv) == [0.0] and off_slate.sel_weight == 0
    # TRL's own scalar column is the broadcast outcome advantage; adv_exec is the same number.
    assert first["adv_exec"].to_numpy() == pytest.approx(first["advantage"].to_numpy(), rel=1e-5)
    assert (out / "completions" / "completions_00002.parquet").is_file()


def test_utility_credit_carries_skill_values_across_steps(tmp_path):
    """Both steps scripted: step 0 sees only the prior (no name credit), step 1 the values step 0 left.

    As in the kit's trainer, values learn from the kept groups' executed reads (the last read served)
    and only the executed read is credited; an unseen skill is worth the running mean outcome."""
    trainer, tok, *_ = _train(tmp_path, credit="utility", script_steps=(0, 1))
    # Executed reads of the kept groups 0 and 2 (group 1 is filtered): alpha-sort (1), alpha-sorx (0, 1),
    # beta-merge (1, 0); "two-words" is off the slate, so never executed.
    after_0 = {"alpha-sort": 1.0, "alpha-sorx": 0.5, "beta-merge": 0.5}
    values = trainer.skill_values
    assert values.values == pytest.approx(after_0) and values.baseline == pytest.approx(0.6)  # step 1: unchanged
    first, second = trainer.generated
    name_tokens = [(0, 1), (1, 1), (2, 1), (2, 4), (8, 1), (9, 1), (10, 1), (10, 2)]  # of the kept groups
    assert [first["advantages"][i, t].item() for i, t in name_tokens] == [0.0] * 8  # every V is the prior
    # Step 1, centred over each group's executed reads. Group 0: V = 1, 0.5, 0.5 (beta-merge, read after alpha-sort,
    # which is not executed) -> s = +1/3, -1/6, -1/6. Group 2: V = 0.5, 0.5 (two-words is off the slate) -> s = 0.
    # Three active reads share lambda.
    adv, N = second["advantages"].double(), int(second["num_items_in_batch"])
    share = LAMBDA / 3 * N
    expected = [share / 3, -share / 6, 0.0, -share / 6, 0.0, 0.0, 0.0, 0.0]
    assert [adv[i, t].item() for i, t in name_tokens] == pytest.approx(expected, rel=1e-5, abs=1e-9)
    kit = assign("utility", _kit_inputs(second, tok, scripted=True, read_names=SCRIPT_NAMES,
                                        skill_values=SkillValues(values=after_0, baseline=0.6)))
    torch.testing.assert_close(second["advantages"], (kit.advantages * kit.weights * N).float(), rtol=1e-6, atol=1e-7)


def test_refuses_loss_types_it_cannot_match(tmp_path):
    tok = _tokenizer()
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(WORDS), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1, pad_token_id=0, eos_token_id=2))
    data = Dataset.from_list([{"prompt": "task: sort", "skill_names": [], "skill_categories": []}] * 4)
    args = GRPOConfig(output_dir=str(tmp_path), report_to="none", num_generations=4, per_device_train_batch_size=4,
                      use_cpu=True, bf16=False, loss_type="grpo")
    with pytest.raises(ValueError, match="loss_type='grpo'.*needs one of \\('dapo',\\): only dapo divides"):
        SkillGateGRPOTrainer(model=model, args=args, processing_class=tok, reward_funcs=_reward, train_dataset=data)


def test_the_docs_list_every_refused_grpo_config_value_with_its_reason():
    """docs/integrations.md's table of refusals has one row per field the trainer restricts, with the values it accepts."""
    from pathlib import Path

    from skillgate_lib.integrations.trl import GRPO_CONFIG_LIMITS

    docs = (Path(__file__).resolve().parents[1] / "docs" / "integrations.md").read_text()
    rows = {line.split("|")[1].strip(" `"): line.split("|")[2] for line in docs.splitlines()
            if line.startswith("| `") and line.split("|")[1].strip(" `") in GRPO_CONFIG_LIMITS}
    assert set(rows) == set(GRPO_CONFIG_LIMITS)
    for field, (allowed, why) in GRPO_CONFIG_LIMITS.items():
        assert [v for v in allowed if f"`{v}`" not in rows[field]] == [], field
        assert why


def test_the_kit_audit_reads_the_trl_run(run):
    """The completions a SkillGate TRL run logs are audited by the kit's own audit."""
    from skillgate_lib import audit, readers

    trainer, tok, *_, out = run
    tasks = readers.TaskTable([{"prompt": p, "skills": SLATE} for p in PROMPTS])
    # The sampled second step may hold empty completions: the audit names and counts them under --skip-bad.
    result = audit.run_audit(out, fmt="trl", tasks=tasks, tokenizer=tok, split=None, n_boot=50, skip_bad=True)
    assert result.n_rows + sum(result.problems.skipped.values()) == 2 * len(SCRIPT)  # two logged steps
    assert result.n_rows >= len(SCRIPT) and 0 < result.overall["oracle_read"] <= 1


# ------------------------------------------------------------------ the kit's environment, multi-turn


def test_an_oracle_read_of_the_env_dataset_is_oracle():
    """The read the policy writes (the name's words) is matched to the stored, hyphenated slate name."""
    from skillgate_lib.env import SkillSlateEnv, display_name, load_tokenizer
    from skillgate_lib.integrations.trl import env_dataset

    env, tok = SkillSlateEnv(), load_tokenizer()
    row = env_dataset(env, n_tasks=1, seed=0)[0][0]
    assert "-" in row["oracle"] and row["skill_names"][row["skill_categories"].index("oracle")] == row["oracle"]
    text = f"<read> {display_name(row['oracle'])} </read>"
    spans, names = read_spans(tok(text, add_special_tokens=False)["input_ids"], tok,
                              dict(zip(row["skill_names"], row["skill_categories"])))
    assert [s.category for s in spans] == ["oracle"] and names == [row["oracle"]]
    skill_free = env_dataset(SkillSlateEnv(show_slate=False), n_tasks=1, seed=0)[0][0]
    assert skill_free["skill_names"] == [] and "skills :" not in skill_free["prompt"]  # every read is off-slate


class _EnvRecording(SkillGateGRPOTrainer):
    """On the kit's environment: scripts step 0's turns from the environment's own demonstrations
    (``plans[k]``: the reads of the k-th rollout of each group) and records each generation batch."""

    def __init__(self, *a, env, reward, plans, **k):
        super().__init__(*a, **k)
        self.env, self.plans = env, plans
        self.by_prompt = {" ".join(env.prompt(t, s).split()): (t, s) for t, s in reward.episodes.values()}
        self.generated: list[dict] = []
        self.losses: list[torch.Tensor] = []

    def plan_reads(self, task, slate, k: int) -> list[str]:
        return [pick(task, slate) for pick in self.plans[k]]

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        if self.state.global_step != 0:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)
        tok, turns = self.processing_class, []
        for i, ids in enumerate(prompt_ids):
            prompt, _, so_far = tok.decode(ids).partition("respond :")
            task, slate = self.by_prompt[prompt.strip() + " respond :"]
            done = so_far.split()
            if not done:  # a first turn: the i-th rollout of its group
                k = i % self.num_generations
            else:  # a later turn: the plan whose first read this episode made
                k = next(k for k in range(len(self.plans))
                         if self.env.demonstration(task, slate, self.plan_reads(task, slate, k)).split()[:len(done)] == done)
            rest = (self.env.demonstration(task, slate, self.plan_reads(task, slate, k)) + " </s>").split()[len(done):]
            rest = rest[: rest.index("</read>") + 1] if "</read>" in rest else rest
            turns.append(tok(" ".join(rest), add_special_tokens=False)["input_ids"])
        return turns, None

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.generated.append({k: output[k].detach().cpu().clone() for k in
                               ("completion_ids", "completion_mask", "tool_mask", "advantages", "num_items_in_batch")}
                              | {"task_id": [x["task_id"] for x in inputs]})
        return output

    def _compute_loss(self, model, inputs):
        loss = super()._compute_loss(model, inputs)
        self.losses.append(loss.detach().cpu().clone())
        return loss


def _first(category: str):
    return lambda task, slate: next(c.name for c in slate.candidates if c.category == category)


def _off_slate(task, slate):
    from skillgate_lib.env.skills import load_library

    return next(n for n in sorted(load_library()) if slate.category(n) is None)


# Each group: a lone oracle read (succeeds), a misleading read, a relevant read then the oracle (succeeds:
# execution follows the last body), an off-slate read (fails): every group is kept, and only the first
# rollout's read is a lone oracle read (u = 1), so its selector advantage is 1 - 1/5 > 0.
PLANS = ((_first("oracle"),), (_first("misleading"),), (_first("relevant"), _first("oracle")), (_off_slate,))


@pytest.fixture(scope="module")
def env_run(tmp_path_factory):
    import os

    from skillgate_lib.env import SkillSlateEnv
    from skillgate_lib.integrations.trl import env_dataset, use_kit_chat_format, write_task_table
    from skillgate_lib.policy.models import load_policy

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    out = tmp_path_factory.mktemp("trl_env")
    torch.manual_seed(0)
    env = SkillSlateEnv()
    model, tok = load_policy("tiny")
    use_kit_chat_format(tok)
    dataset, reward = env_dataset(env, n_tasks=2, seed=0, tools=True)
    write_task_table(dataset, out / "tasks.jsonl")
    args = GRPOConfig(output_dir=str(out), report_to="none", max_steps=2, num_generations=len(PLANS),
                      per_device_train_batch_size=2 * len(PLANS), max_completion_length=160, logging_steps=1,
                      log_completions=True, use_cpu=True, bf16=False, learning_rate=1e-3, save_strategy="no", seed=0)
    trainer = _EnvRecording(model=model, args=args, processing_class=tok, reward_funcs=reward, train_dataset=dataset,
                            environment_factory=reward.environment, env=env, reward=reward, plans=PLANS,
                            peft_config=peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                        task_type="CAUSAL_LM"))
    trainer.train()
    return trainer, env, reward, tok, out


def _slate(reward, task_id: str) -> dict[str, str]:
    return {c.name: c.category for c in reward.episodes[task_id][1].candidates}


def _episodes(batch, reward, tok):
    """Each recorded completion: its text, the environment's verdict, its length."""
    for ids, n, tid in zip(batch["completion_ids"], batch["completion_mask"].sum(dim=1).tolist(), batch["task_id"]):
        task, slate = reward.episodes[tid]
        text = tok.decode(ids[: int(n)].tolist(), skip_special_tokens=True)
        yield text, reward.env.score(task, slate, text), int(n)


def test_trl_runs_the_kit_environment_multi_turn(env_run):
    trainer, env, reward, tok, _ = env_run
    assert len(trainer.generated) == 2 and trainer.state.global_step == 2
    for step, batch in enumerate(trainer.generated):
        for i, (text, outcome, n) in enumerate(_episodes(batch, reward, tok)):
            ids, tool = batch["completion_ids"][i, :n].tolist(), batch["tool_mask"][i, :n].tolist()
            # The inserted text is exactly the environment's reply to each read, and it alone carries no loss.
            words = text.split()
            env_words = [w for k, (w, m) in enumerate(zip(tok.convert_ids_to_tokens(ids), tool)) if not m]
            served = "".join(env.tool_response(*reward.episodes[batch["task_id"][i]], " ".join(words[: j + 1]))
                             for j, w in enumerate(words) if w == "</read>" and j + 1 < len(words))  # a last call
            # is left unanswered only when its reply would pass max_completion_length
            assert env_words == served.split(), (step, text)
            assert all(m for w, m in zip(tok.convert_ids_to_tokens(ids), tool) if w in ("<read>", "</read>", "</s>"))
            if step == 0:  # scripted from demonstrations: the plans' outcomes
                assert outcome.reward == float(i % len(PLANS) in (0, 2)), text
        # Inserted tokens get no advantage (so no loss); TRL's loss is the kit's (ratio 1 on the first iteration).
        assert torch.all(batch["advantages"][batch["tool_mask"] == 0] == 0)


def test_trl_credit_on_the_kit_environment(env_run):
    trainer, env, reward, tok, _ = env_run
    for step, batch in enumerate(trainer.generated):
        episodes = list(_episodes(batch, reward, tok))
        found = [read_spans(batch["completion_ids"][i, :n].tolist(), tok, _slate(reward, t))
                 for i, ((_, _, n), t) in enumerate(zip(episodes, batch["task_id"]))]
        # The trainer's categories are the environment's own (the verifier parses the reads of well-formed episodes).
        for (spans, names), (text, outcome, _) in zip(found, episodes):
            if not outcome.malformed:
                assert [(s.category, n) for s, n in zip(spans, names)] == [(r.category, r.name) for r in outcome.reads], text
        assert step > 0 or sum(s.category == "oracle" for spans, _ in found for s in spans) == 4
        inputs = CreditInputs(torch.tensor([o.reward for _, o, _ in episodes], dtype=torch.float64),
                              torch.arange(len(episodes)) // len(PLANS),
                              (batch["completion_mask"] * batch["tool_mask"]).bool(), [spans for spans, _ in found])
        credit = assign("skillgate", inputs)
        N = int(batch["num_items_in_batch"])
        torch.testing.assert_close(batch["advantages"], (credit.advantages * credit.weights * N).float(), rtol=1e-6, atol=1e-7)
        if step == 0:
            assert credit.groups_filtered == 0 and len(trainer.losses) >= 1
            torch.testing.assert_close(trainer.losses[0].double(), -(credit.weights * credit.advantages).sum(),
                                       rtol=1e-5, atol=1e-7)
            for g in range(2):
                lone = found[g * len(PLANS)][0]
                assert [s.category for s in lone] == ["oracle"]
                adv = batch["advantages"][g * len(PLANS), lone[0].name_start: lone[0].name_end]
                assert torch.all(adv > 0)  # the lone oracle read: 1 - 1/5
                assert credit.read_adv[g * len(PLANS)] == pytest.approx([0.8])
                for k in range(1, len(PLANS)):  # every other read of the group: 0 - 1/5
                    assert credit.read_adv[g * len(PLANS) + k] == pytest.approx([-0.2] * len(found[g * len(PLANS) + k][0]))


def test_the_audit_reads_the_kit_environment_trl_run(env_run, capsys):
    """The audit of a SkillGate TRL run uses the reads the trainer logged (categories, token positions): no --tasks,
    no read pattern; off-slate reads are ``invalid`` reads, not bad rows. Its figures go beside the run."""
    from skillgate_lib import audit
    from skillgate_lib.__main__ import main

    trainer, env, reward, tok, out = env_run
    first = pd.read_parquet(out / "completions" / "completions_00001.parquet")
    assert set(first["task_id"]) == set(reward.episodes) and list(first["read_categories"].map(list)[:1]) == [["oracle"]]
    assert [t.split() for t in first["completion"]] == [t.split() for t, _, _ in _episodes(trainer.generated[0], reward, tok)]
    assert main(["audit", str(out), "--format", "trl", "--n-boot", "50", "--split", "all"]) == 0
    printed = capsys.readouterr().out
    beside = out.parent / f"{out.name}-audit"
    assert "no skill categories" not in printed and f"figures: {beside}" in printed
    assert (beside / "audit_trends.csv").is_file() and any(beside.glob("*.png"))
    result = audit.run_audit(out, fmt="trl", split=None, n_boot=50)
    logged = pd.concat([first, pd.read_parquet(out / "completions" / "completions_00002.parquet")])
    invalid = logged["read_categories"].map(lambda c: "invalid" in list(c))
    assert len(logged) == 2 * 2 * len(PLANS) and invalid.sum() >= 2  # step 0's scripted off-slate reads
    assert result.categorised and result.n_rows == len(logged) and not result.problems.skipped
    has_oracle = logged["read_categories"].map(lambda c: "oracle" in list(c))
    assert result.overall["oracle_read"] == pytest.approx(has_oracle.mean()) and result.overall["oracle_read"] > 0


def test_a_batch_with_every_group_filtered_takes_no_optimizer_step(tmp_path):
    """Filter parity with the kit's trainer: constant rewards filter every group (in every method); weight decay and
    a KL term would still move the LoRA weights under an optimizer step (they do without the filter)."""
    from skillgate_lib.credit import CreditConfig

    frozen = {}
    for name, credit, cfg in (("skillgate", "skillgate", None), ("outcome", "outcome", None),
                              ("unfiltered", "skillgate", CreditConfig(filter_groups=False))):
        trainer, _, before, after = _train(tmp_path / name, credit=credit, script_steps=(0, 1), weight_decay=0.5, beta=0.1,
                                           reward=lambda completions, **_: [1.0] * len(completions), credit_config=cfg)
        lora = [k for k in before if "lora_A" in k]
        frozen[name] = all(torch.equal(before[k], after[k]) for k in lora)
        skipped = [h["credit/update_skipped"] for h in trainer.state.log_history if "credit/update_skipped" in h]
        assert skipped == ([0.0, 0.0] if cfg else [1.0, 1.0]), name
        assert len(trainer.losses) == (2 if cfg else 0), name
    assert frozen == {"skillgate": True, "outcome": True, "unfiltered": False}


def _run_example(argv: list[str]) -> int:
    """examples/trl/train_skillgate.py as a user runs it (``python examples/trl/train_skillgate.py ARGV``): its exit status."""
    import runpy
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "examples" / "trl" / "train_skillgate.py"
    old = sys.argv
    sys.argv = [str(script), *argv]
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as stop:
        return int(stop.code or 0)
    finally:
        sys.argv = old
    return 0


def test_the_trl_example_runs(tmp_path, monkeypatch, capsys):
    """The example at a small size, with every reward equal: it writes the run and ends loudly, exit status 1."""
    import importlib.util
    import json

    from skillgate_lib.integrations import trl as sg_trl

    import trl.trainer.grpo_trainer as grpo

    monkeypatch.setattr(sg_trl.EnvReward, "__call__", lambda self, prompts, completions, **_: [0.0] * len(completions))
    printed = []  # TRL's printout of each step's completions: how many it was asked to print, of how many
    show = grpo.print_prompt_completions_sample
    monkeypatch.setattr(grpo, "print_prompt_completions_sample", lambda prompts, completions, rewards, advantages, step,
                        num_samples=None, **k: (printed.append((num_samples, len(prompts))),
                                                show(prompts, completions, rewards, advantages, step, num_samples, **k)))
    out = tmp_path / "run"
    report = "tensorboard" if importlib.util.find_spec("tensorboard") else "none"
    status = _run_example(["--output-dir", str(out), "--n-tasks", "4", "--max-steps", "2", "--per-device-train-batch-size",
                           "8", "--max-completion-length", "128", "--report-to", report])
    captured = capsys.readouterr()
    assert status == 1 and "NO OPTIMIZER STEP WAS TAKEN: all 2 steps were skipped" in captured.err
    # Two of each step's eight completions, by default (TRL prints at each log: the two steps and the run's summary).
    assert len(printed) >= 2 and set(printed) == {(2, 8)}
    assert "audit it with" not in captured.out
    config = json.loads((out / "config.json").read_text())
    assert config["method"] == "skillgate" and config["credit"] == "skillgate" and config["versions"]["trl"]
    assert config["regime"] == "easy" and config["step_failure"] == 0.0 and config["max_completion_length"] == 128
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["split"]) for r in rows] == [(1, "train"), (2, "train"), (2, "summary")]
    assert all("credit/groups_filtered" in r and "rewards/env_reward/mean" in r for r in rows[:2])
    assert all(r["reads/parsed"] >= 0 and r["reads/failed"] == 0 and r["rows/no_slate"] == 0 for r in rows[:2])
    assert [r["credit/update_skipped"] for r in rows[:2]] == [1.0, 1.0]
    assert sorted(p.name for p in (out / "completions").iterdir()) == ["completions_00001.parquet", "completions_00002.parquet"]
    assert len((out / "tasks.jsonl").read_text().splitlines()) >= 1 and (out / "tokenizer" / "tokenizer.json").is_file()
    if report == "tensorboard":
        assert any((out / "runs").rglob("events.out.tfevents.*"))


@pytest.mark.slow
def test_the_trl_smoke_defaults_take_an_optimizer_step(tmp_path, capsys):
    """``python examples/trl/train_skillgate.py`` with its defaults (minutes on 2 CPU cores): at least one step updates."""
    import json

    out = tmp_path / "run"
    assert _run_example(["--output-dir", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    skipped = [r["credit/update_skipped"] for r in rows if r["split"] == "train"]
    assert len(skipped) == 4 and skipped.count(0.0) >= 1
    assert f"{skipped.count(0.0)} of 4 steps took an optimizer step" in capsys.readouterr().out


@pytest.mark.parametrize("hook", ["_generate_single_turn", "_generate_and_score_completions", "_calculate_rewards",
                                  "_tool_call_loop", "compute_loss"])
def test_trl_private_hook_is_unchanged(hook):
    """One test per private GRPOTrainer method SkillGateGRPOTrainer overrides: a TRL release that changes one fails here."""
    from trl import GRPOTrainer

    from skillgate_lib.integrations.trl_hooks import method_problem

    assert method_problem(GRPOTrainer, hook) is None


@pytest.mark.parametrize("attribute", ["_metrics", "_logs"])
def test_trl_private_attribute_is_unchanged(run, attribute):
    from skillgate_lib.integrations.trl_hooks import attribute_problem

    trainer, *_ = run
    assert attribute_problem(trainer, attribute) is None


def test_a_changed_trl_hook_is_refused_by_name(monkeypatch):
    from trl import GRPOTrainer

    from skillgate_lib.integrations.trl_hooks import check_trl_hooks

    monkeypatch.setattr(GRPOTrainer, "_calculate_rewards", lambda self, inputs, prompts, completions: None)
    with pytest.raises(RuntimeError, match=r"GRPOTrainer._calculate_rewards\('self', 'inputs', 'prompts', 'completions'\) "
                                           r"differs.*Install trl==1.16.0"):
        check_trl_hooks(GRPOTrainer)
    monkeypatch.delattr(GRPOTrainer, "_generate_single_turn")
    with pytest.raises(RuntimeError, match="_generate_single_turn no longer exists"):
        check_trl_hooks(GRPOTrainer)


# ------------------------------------------------------------------ any TRL dataset, any reward, any typo


def test_a_dataset_without_slate_columns_trains_and_evaluates_with_outcome_credit(tmp_path):
    """Rows without skill_names / skill_categories have an empty slate: every read is off-slate, so no read carries a
    selector signal and the row trains on the outcome channel; the rows are counted, and their credit logged as outcome."""
    trainer, tok, *_ = _train(tmp_path, slate=False, evaluate=True, log_completions=True, num_completions_to_print=0)
    batch = trainer.generated[0]
    reads = [[ReadSpan("invalid", r.name_start, r.name_end, r.call_start, r.call_end, served=False) for r in row]
             for row in SCRIPT_READS]
    rewards = torch.tensor(_reward(_texts(batch, tok)), dtype=torch.float64)
    credit = assign("skillgate", CreditInputs(rewards, GROUP, batch["completion_mask"].bool(), reads))
    N = int(batch["num_items_in_batch"])
    torch.testing.assert_close(batch["advantages"], (credit.advantages * credit.weights * N).float(), rtol=1e-6, atol=1e-7)
    assert all(a == 0 for row in credit.read_adv for a in row)  # no selector signal
    train_logs = [h for h in trainer.state.log_history if "rows/no_slate" in h]
    assert [h["rows/no_slate"] for h in train_logs] == [12.0, 12.0]
    logged = pd.read_parquet(tmp_path / "completions" / "completions_00001.parquet")
    assert set(logged["credit"]) == {"outcome"} and set(c for cats in logged["read_categories"] for c in cats) <= {"invalid"}
    metrics = trainer.evaluate()
    assert metrics["eval_rows/no_slate"] == 12.0 and "eval_reward" in metrics


def test_completions_no_reward_function_scores_are_left_out_as_trl_does(tmp_path, caplog):
    """Every reward function returns None: TRL warns and goes on. Rows without a reward get no advantage and no part in
    their group's baseline; a batch of only such rows takes no optimizer step."""

    def partial(completions, **_):  # group 0's last rollout and all of group 2 are unscorable
        scores = _reward(completions)
        return [None if i == 3 or i >= 8 else r for i, r in enumerate(scores)]

    with caplog.at_level("WARNING"):
        trainer, tok, *_ = _train(tmp_path / "partial", reward=partial, script_steps=(0,))
    assert "All reward functions returned None" in caplog.text
    batch = trainer.generated[0]
    inputs = _kit_inputs(batch, tok, scripted=True)
    rows = [0, 1, 2, 4, 5, 6, 7]
    kept = CreditInputs(inputs.rewards[rows], inputs.group[rows], inputs.response_mask[rows], [inputs.reads[i] for i in rows])
    credit = assign("skillgate", kept)  # groups 1 (rewards all 0) is filtered; group 0 has three rows
    N = int(batch["num_items_in_batch"])
    expected = torch.zeros_like(batch["advantages"], dtype=torch.float64)
    expected[rows] = credit.advantages * credit.weights * N
    torch.testing.assert_close(batch["advantages"], expected.float(), rtol=1e-6, atol=1e-7)
    assert trainer.state.log_history[0]["rows/unscorable"] == 5.0

    trainer, *_ = _train(tmp_path / "none", reward=lambda completions, **_: [None] * len(completions), script_steps=(0, 1))
    assert trainer.state.global_step == 2
    assert [h["credit/update_skipped"] for h in trainer.state.log_history if "credit/update_skipped" in h] == [1.0, 1.0]
    assert [h["rows/unscorable"] for h in trainer.state.log_history if "rows/unscorable" in h] == [12.0, 12.0]


def test_a_typo_in_the_credit_lists_only_the_methods_the_trainer_trains(tmp_path):
    from skillgate_lib import methods

    tok = _tokenizer()
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(WORDS), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1, pad_token_id=0, eos_token_id=2))
    data = Dataset.from_list([{"prompt": "task: sort"}] * 4)
    args = GRPOConfig(output_dir=str(tmp_path), report_to="none", num_generations=4, per_device_train_batch_size=4,
                      use_cpu=True, bf16=False)
    for credit, why in (("skilgate", "unknown credit 'skilgate'"), ("sft", "results-only row"),
                        ("selection_bc", "supervised selector loss")):
        with pytest.raises(ValueError, match=why) as err:
            SkillGateGRPOTrainer(model=model, args=args, processing_class=tok, reward_funcs=_reward, train_dataset=data,
                                 credit=credit)
        listed = str(err.value).split("trains one of: ")[1].split(", ")
        assert "skillgate" in listed and "sft" not in listed and "selection_bc" not in listed, str(err.value)
        assert all(not (m.supervised_term or m.separate_finetune) and m.trainable for m in map(methods.get, listed))
    from skillgate_lib.integrations.trl import trl_methods

    assert listed == list(trl_methods())


def test_one_audit_command_for_a_trl_run_in_the_docs_and_the_example(env_run, capsys):
    """The README, docs/integrations.md and the example show the same audit command, and it runs on a TRL run."""
    import runpy
    from pathlib import Path

    from skillgate_lib.__main__ import main

    command = "python -m skillgate_lib audit RUN --format trl --tasks RUN/tasks.jsonl"
    root = Path(__file__).resolve().parents[1]
    example = root / "examples" / "trl" / "train_skillgate.py"
    assert runpy.run_path(str(example), run_name="example")["audit_command"](Path("RUN")) == command
    for where in (example, root / "docs" / "integrations.md", root / "README.md"):
        assert command in where.read_text(), where
    *_, out = env_run
    argv = command.replace("RUN", str(out)).split()[3:] + ["--n-boot", "20", "--no-figures"]
    assert main(argv) == 0
    assert "no skill categories" not in capsys.readouterr().out
