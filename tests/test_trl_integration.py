"""SkillGateGRPOTrainer on a tiny random Llama: TRL's per-token advantages and loss equal the kit's."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

pytest.importorskip("trl")
peft = pytest.importorskip("peft")
from datasets import Dataset  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402
from trl import GRPOConfig  # noqa: E402

from skillgate_lib.credit import CreditInputs, ReadSpan, assign  # noqa: E402
from skillgate_lib.integrations import ReadFormat, find_reads, read_spans  # noqa: E402
from skillgate_lib.integrations.trl import SkillGateGRPOTrainer  # noqa: E402

WORDS = ["<pad>", "<s>", "</s>", "<unk>", "<read>", "</read>", "alpha-sort", "alpha-sorx", "beta-merge", "gamma-plot",
         "step", "ok", "done", "task:", "sort", "list", "slate:", "two", "words"]
SLATE = {"alpha-sort": "oracle", "alpha-sorx": "misleading", "beta-merge": "relevant", "gamma-plot": "irrelevant"}
# The first generation batch, scripted so that every kind of read occurs; the second is sampled.
SCRIPT = [
    "<read> alpha-sort </read> step ok done </s>",  # single oracle read, success
    "<read> alpha-sorx </read> step done </s>",  # misleading read, failure
    "<read> alpha-sort </read> <read> beta-merge </read> step ok done </s>",  # two reads, success
    "step step done </s>",  # no read, failure
]
# Hand-made read spans of SCRIPT (word-level: token index = word index).
SCRIPT_READS = [
    [ReadSpan("oracle", 1, 2, 0, 3)],
    [ReadSpan("misleading", 1, 2, 0, 3)],
    [ReadSpan("oracle", 1, 2, 0, 3), ReadSpan("relevant", 4, 5, 3, 6)],
    [],
]
LAMBDA = 0.2


def _tokenizer() -> PreTrainedTokenizerFast:
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def _reward(completions, **_):
    return [1.0 if "ok" in c.split() else 0.0 for c in completions]


class _Recording(SkillGateGRPOTrainer):
    """Scripts the first generation and records what ``_compute_loss`` receives and returns."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.seen: list[dict] = []

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        if self.state.global_step == 0:
            return [self.processing_class(s, add_special_tokens=False)["input_ids"] for s in SCRIPT], None
        return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)

    def _compute_loss(self, model, inputs):
        loss = super()._compute_loss(model, inputs)
        self.seen.append({k: inputs[k].detach().clone() for k in ("completion_ids", "completion_mask", "advantages", "num_items_in_batch")}
                         | {"loss": loss.detach().clone()})
        return loss


def test_find_reads_on_hand_made_tokens():
    tok = _tokenizer()
    ids = tok("step <read> alpha-sort </read> done <read> two words </read> <read> gamma-plot", add_special_tokens=False)["input_ids"]
    found = find_reads(ids, tok)
    assert [(r.name, r.name_start, r.name_end, r.call_start, r.call_end) for r in found] == [
        ("alpha-sort", 2, 3, 1, 4), ("two words", 6, 8, 5, 9)]  # multi-word name; the unclosed call is no read
    spans, names = read_spans(ids, tok, {**SLATE, "two  words": "relevant"})
    assert names == ["alpha-sort", "two words"] and [s.category for s in spans] == ["oracle", "relevant"]
    assert [s.category for s in read_spans(ids, tok, {})[0]] == ["invalid", "invalid"]
    custom = find_reads(tok("step alpha-sort done", add_special_tokens=False)["input_ids"], tok, ReadFormat("step", "done"))
    assert [(r.name, r.name_start, r.call_end) for r in custom] == [("alpha-sort", 1, 3)]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    torch.manual_seed(0)
    tok = _tokenizer()
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(WORDS), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                         pad_token_id=0, bos_token_id=1, eos_token_id=2))
    rows = [{"prompt": p, "skill_names": list(SLATE), "skill_categories": list(SLATE.values())}
            for p in ("task: sort list slate: alpha-sort alpha-sorx", "task: sort two words slate: beta-merge gamma-plot")]
    out = tmp_path_factory.mktemp("trl")
    args = GRPOConfig(output_dir=str(out), report_to="none", max_steps=2, num_generations=4, per_device_train_batch_size=4,
                      max_completion_length=10, logging_steps=1, log_completions=True, use_cpu=True, bf16=False,
                      learning_rate=5e-2, save_strategy="no", seed=0)
    trainer = _Recording(model=model, args=args, processing_class=tok, reward_funcs=_reward, train_dataset=Dataset.from_list(rows),
                         peft_config=peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    before = {k: v.detach().clone() for k, v in trainer.model.named_parameters()}
    trainer.train()
    after = dict(trainer.model.named_parameters())
    return trainer, tok, before, after, out


def _kit(batch, tok, reads):
    mask = batch["completion_mask"].bool().cpu()
    texts = tok.batch_decode(batch["completion_ids"], skip_special_tokens=True)
    inputs = CreditInputs(torch.tensor(_reward(texts), dtype=torch.float64), torch.zeros(len(texts), dtype=torch.long), mask, reads)
    return assign("skillgate", inputs), inputs


def test_trl_uses_the_kit_credit_token_by_token(run):
    trainer, tok, *_ = run
    assert len(trainer.seen) == 2
    for step, batch in enumerate(trainer.seen):
        ids = batch["completion_ids"].cpu()
        n = batch["completion_mask"].sum(dim=1).tolist()
        if step == 0:  # rows are shuffled by TRL: match each to its scripted completion
            order = [SCRIPT.index(tok.decode(ids[i, : int(n[i])]).replace("  ", " ")) for i in range(4)]
            reads = [SCRIPT_READS[j] for j in order]
        else:
            reads = [read_spans(ids[i, : int(n[i])].tolist(), tok, SLATE)[0] for i in range(4)]
        credit, inputs = _kit(batch, tok, reads)
        N = int(batch["num_items_in_batch"])
        assert N == int(inputs.response_mask.sum())
        expected = (credit.advantages * credit.weights * N).float()
        torch.testing.assert_close(batch["advantages"].cpu(), expected, rtol=1e-6, atol=1e-7)
        # On-policy first iteration the ratio is 1, so TRL's dapo loss is -sum(A') / N: the kit's -sum(weights * A).
        torch.testing.assert_close(batch["loss"].cpu().double(), -(credit.weights * credit.advantages).sum(), rtol=1e-5, atol=1e-7)

    # Step 0 by hand: u = [1, 0, 0, 0] over the 4 read actions -> the lone oracle read's name gets 1 - 1/4.
    batch = trainer.seen[0]
    texts = tok.batch_decode(batch["completion_ids"], skip_special_tokens=True)
    first = next(i for i, t in enumerate(texts) if t == SCRIPT[0].replace(" </s>", ""))
    N = 7 + 6 + 10 + 4
    adv = batch["advantages"].cpu().double()
    assert adv[first, 1].item() == pytest.approx(0.75 * LAMBDA / 4 * N, rel=1e-6)  # selector channel, 4 name tokens
    assert adv[first, 0].item() == 0 and adv[first, 2].item() == 0  # "<read>" and "</read>": in neither channel
    exec_tokens = N - (3 + 3 + 6)
    a_success = 0.5 / (torch.tensor([1.0, 0, 1, 0]).std().item() + 1e-4)
    assert adv[first, 3].item() == pytest.approx(a_success / exec_tokens * N, rel=1e-5)


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
    assert len(first) == 4 and set(first["credit"]) == {"skillgate"}
    by_text = {c: r for c, r in zip(first["completion"], first.itertuples())}
    two = by_text[SCRIPT[2].replace(" </s>", "")]
    assert list(two.read_skills) == ["alpha-sort", "beta-merge"] and list(two.read_categories) == ["oracle", "relevant"]
    assert list(two.read_tok_start) == [1, 4] and list(two.read_adv) == pytest.approx([-0.25, -0.25])
    assert two.response_tokens == 10 and 0 < two.sel_weight < 1
    assert by_text[SCRIPT[3].replace(" </s>", "")].sel_weight == 0
    # TRL's own scalar column is the broadcast outcome advantage; adv_exec is the same number.
    assert first["adv_exec"].to_numpy() == pytest.approx(first["advantage"].to_numpy(), rel=1e-5)
    assert (out / "completions" / "completions_00002.parquet").is_file()


def test_refuses_loss_types_it_cannot_match(tmp_path):
    tok = _tokenizer()
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(WORDS), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1, pad_token_id=0, eos_token_id=2))
    data = Dataset.from_list([{"prompt": "task: sort", "skill_names": [], "skill_categories": []}] * 4)
    args = GRPOConfig(output_dir=str(tmp_path), report_to="none", num_generations=4, per_device_train_batch_size=4,
                      use_cpu=True, bf16=False, loss_type="grpo")
    with pytest.raises(ValueError, match="loss_type='grpo'.*needs one of \\('dapo',\\)"):
        SkillGateGRPOTrainer(model=model, args=args, processing_class=tok, reward_funcs=_reward, train_dataset=data)


def test_the_kit_audit_reads_the_trl_run(run):
    """The completions a SkillGate TRL run logs are audited by the kit's own audit."""
    from skillgate_lib import audit, readers

    trainer, tok, *_, out = run
    prompts = ("task: sort list slate: alpha-sort alpha-sorx", "task: sort two words slate: beta-merge gamma-plot")
    tasks = readers.TaskTable([{"prompt": p, "skills": SLATE} for p in prompts])
    # The sampled second step may hold empty completions: the audit names and counts them under --skip-bad.
    result = audit.run_audit(out, fmt="trl", tasks=tasks, tokenizer=tok, split=None, n_boot=50, skip_bad=True)
    assert result.n_rows + sum(result.problems.skipped.values()) == 8  # two logged steps of 4 completions
    assert result.n_rows >= 4 and 0 < result.overall["oracle_read"] <= 1
