"""Reads written as native JSON tool calls: located in the JSON, served by name (case and separators ignored), credited.

The TRL test trains a tiny random-weight chat model made here: a character-level tokenizer
whose chat template renders tool calls as Qwen's does (``<tool_call>{json}</tool_call>``), and
the matching ``response_template`` TRL parses calls with. Nothing is downloaded.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest
import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

from skillgate_lib.credit import CreditInputs, assign
from skillgate_lib.integrations import (
    JsonReadFormat,
    ReadFormat,
    SkillIndex,
    SkillNameCollision,
    find_reads,
    read_spans,
    skill_key,
)

SPECIAL = ["<pad>", "</s>", "<|user|>", "<|assistant|>", "<|tool|>"]
CALL_TAGS = ["<tool_call>", "</tool_call>"]  # added tokens, not special: decoded text keeps them, as Qwen's does
CHARS = [chr(c) for c in range(32, 127)] + ["\n"]
SLATE = {"alpha-sort": "oracle", "alpha-sorx": "misleading", "beta-merge": "relevant", "gamma-plot": "irrelevant"}
TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'user' -%}<|user|>{{ m.content }}"
    "{%- elif m.role == 'assistant' -%}<|assistant|>{{ m.content or '' }}"
    "{%- for call in m.tool_calls or [] -%}"
    "<tool_call>{{ {'name': call.function.name, 'arguments': call.function.arguments} | tojson }}</tool_call>"
    "{%- endfor -%}</s>"
    "{%- elif m.role == 'tool' -%}<|tool|>{{ m.content }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>{%- endif -%}"
)
RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|assistant|>",
    "fields": {
        "tool_calls": {"open": "<tool_call>", "close_pattern": r"</tool_call>\s*", "repeats": True, "content": "json",
                       "transform": {"type": "function", "function": "{content}"}},
        "content": {"close_pattern": r"</s>\s*", "content": "text"},
    },
}


def chat_tokenizer():
    """One token per character, plus the chat markers; a chat template that renders JSON tool calls."""
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({c: i for i, c in enumerate(["<unk>", *CHARS])}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", pad_token="<pad>", eos_token="</s>",
                                  additional_special_tokens=SPECIAL[2:])
    tok.add_tokens(CALL_TAGS)
    tok.chat_template = TEMPLATE
    tok.response_template = RESPONSE_TEMPLATE
    return tok


def _call(skill: str) -> str:
    return "<tool_call>" + json.dumps({"name": "read", "arguments": {"skill": skill}}) + "</tool_call>"


def _ids(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


# ------------------------------------------------------------------ locating the name inside the JSON


def test_json_reads_are_found_with_the_name_tokens_inside_the_json():
    tok = chat_tokenizer()
    openai = {"type": "function", "function": {"name": "read", "arguments": json.dumps({"skill": "Beta_Merge"})}}
    text = ("plan " + _call("Alpha Sort") + " then <tool_call>" + json.dumps(openai) + "</tool_call>"
            + '<tool_call>{"name": "search", "arguments": {"skill": "alpha-sort"}}</tool_call>'  # another tool
            + "<tool_call>{not json</tool_call>" + _call("gamma-plot"))  # malformed: a call naming no skill
    ids = _ids(tok, text)
    found = find_reads(ids, tok, JsonReadFormat())
    assert [r.name for r in found] == ["Alpha Sort", "Beta_Merge", "gamma-plot"]
    decoded = [tok.decode(ids[r.name_start: r.name_end]) for r in found]
    assert decoded == ["Alpha Sort", "Beta_Merge", "gamma-plot"]  # exactly the value's characters
    assert tok.decode(ids[found[0].call_start: found[0].call_end]) == _call("Alpha Sort")
    assert found[1].name_start == len(_ids(tok, text[: text.index("Beta_Merge")]))  # inside the string-encoded arguments
    spans, names = read_spans(ids, tok, SLATE, JsonReadFormat())
    assert names == ["alpha-sort", "beta-merge", "gamma-plot"] and [s.category for s in spans] == ["oracle", "relevant",
                                                                                                  "irrelevant"]
    bare = '{"name": "read", "parameters": {"skill": "ALPHA-SORX"}} and {"x": 1}'  # Llama 3's bare JSON
    assert [(r.name, tok.decode(_ids(tok, bare)[r.name_start: r.name_end]))
            for r in find_reads(_ids(tok, bare), tok, JsonReadFormat(open_tag=""))] == [("ALPHA-SORX", "ALPHA-SORX")]
    assert find_reads(ids, tok, ReadFormat()) == []  # the kit's syntax sees none of them


def test_escaped_names_are_located_in_the_raw_text():
    """A name with escapes (\\u00e9, as json.dumps writes it), in an object and in OpenAI's string-encoded arguments."""
    fmt = JsonReadFormat()
    for arguments in ({"skill": "caf\u00e9 list"}, json.dumps({"skill": "caf\u00e9 list"})):
        text = "<tool_call>" + json.dumps({"name": "read", "arguments": arguments}) + "</tool_call>"
        (call,) = fmt.calls(text)
        assert call.name == "caf\u00e9 list"
        raw = text[call.name_start: call.name_end]
        assert json.loads('"' + (raw if isinstance(arguments, dict) else json.loads('"' + raw + '"')) + '"') == call.name


# ------------------------------------------------------------------ names: case- and separator-insensitive


def test_names_match_whatever_the_case_and_separators():
    assert skill_key("Excel Report_Builder") == skill_key("excel-report-builder") == "excel-report-builder"
    index = SkillIndex(["Excel-Report-Builder", "pdf-tools"])
    assert index.stored("excel report builder") == "Excel-Report-Builder" and index.stored("PDF_Tools") == "pdf-tools"
    assert index.stored("pdf tool") is None and index.canonical_words("PDF  tools") == "pdf tools"


def test_a_library_with_two_names_of_one_key_is_refused_naming_both_files(tmp_path):
    library = {"pdf tools": SimpleNamespace(path=tmp_path / "a" / "SKILL.md"),
               "pdf-tools": SimpleNamespace(path=tmp_path / "b" / "SKILL.md")}
    with pytest.raises(SkillNameCollision, match=rf"{tmp_path / 'a' / 'SKILL.md'} and {tmp_path / 'b' / 'SKILL.md'}"
                                                 r".*'pdf-tools'"):
        SkillIndex.of_library(library)
    with pytest.raises(SkillNameCollision, match="slate: skills 'Alpha-Sort' and 'alpha-sort'"):
        read_spans([], chat_tokenizer(), {"Alpha-Sort": "oracle", "alpha-sort": "misleading"})
    from skillgate_lib.env.skills import load_library

    SkillIndex.of_library(load_library())  # the kit's own library has no two names of one key


@pytest.mark.parametrize("slate, written", [({"pdf tools": "oracle", "pdf-tools": "misleading"}, ("pdf tools", "pdf-tools")),
                                            ({"PDF Tools": "oracle", "pdf-tools": "misleading"}, ("PDF Tools", "pdf-tools")),
                                            ({"pdf_tools": "oracle", "Pdf Tools": "relevant"}, ("pdf_tools", "Pdf Tools"))])
def test_a_slate_with_two_names_of_one_key_is_refused_naming_both_as_written(slate, written):
    """Names that normalise to one key are refused before any merging, and the error quotes what the user wrote."""
    tok = chat_tokenizer()
    ids = _ids(tok, _call("pdf tools"))
    first, second = (repr(w) for w in written)
    with pytest.raises(SkillNameCollision, match=f"slate: skills {first} and {second} both normalise to the key 'pdf-tools'"):
        read_spans(ids, tok, slate)
    from skillgate_lib.integrations import slate_categories

    with pytest.raises(SkillNameCollision, match=f"{first} and {second}"):
        slate_categories(list(slate), list(slate.values()))
    with pytest.raises(SkillNameCollision, match="'pdf-tools' is listed twice"):
        slate_categories(["pdf-tools", "pdf-tools"], ["oracle", "oracle"])
    assert [s.category for s in read_spans(ids, tok, {"PDF Tools": "oracle"})[0]] == ["oracle"]  # one name: fine


# ------------------------------------------------------------------ TRL: a chat model trains with JSON tool calls

# Three prompt groups of four. Each rollout's first turn is scripted: a read (or none); the environment answers
# with the skill's body; the second turn answers "ok" after the oracle's body, "no" otherwise (reward 1 / 0).
#   group 0: oracle (written "Alpha Sort"), misleading, oracle (written "ALPHA_SORT"), no read: rewards [1, 0, 1, 0]
#   group 1: every rollout reads the misleading skill: rewards all 0, filtered (dynamic sampling)
#   group 2: relevant, oracle, off-slate name, irrelevant: rewards [0, 1, 0, 0]
# (OpenAI's string-encoded arguments, and calls TRL fails to execute, are trained in failing_run below.)
FIRST_TURNS = [_call("Alpha Sort"), _call("alpha sorx"), _call("ALPHA_SORT"), "no",
               _call("alpha-sorx"), _call("Alpha Sorx"), _call("alpha_sorx"), _call("ALPHA SORX"),
               _call("beta merge"), _call("Alpha-Sort"), _call("delta wave"), _call("gamma-plot")]
BODIES = {"alpha-sort": "use ok", "alpha-sorx": "use no", "beta-merge": "use no", "gamma-plot": "use no"}
PROMPTS = ("sort a list", "merge two lists", "plot a curve")
ORACLE_ROWS = (0, 2, 9)


class SlateReads:
    """The test's environment: ``read(skill)`` returns the body of the slate skill the name resolves to."""

    def __init__(self):
        self.index = SkillIndex(SLATE)

    def reset(self, **_):
        return None

    def read(self, skill: str) -> str:
        """Read a skill's instructions.

        Args:
            skill: The skill's name.
        """
        name = self.index.stored(skill)
        return BODIES[name] if name else "no such skill"


def _answer(completions, **_):
    return [1.0 if c[-1].get("content", "").strip() == "ok" else 0.0 for c in completions]


def _trainer_class():
    from skillgate_lib.integrations.trl import SkillGateGRPOTrainer

    class Scripted(SkillGateGRPOTrainer):
        """Scripts step 0's turns (first turns from FIRST_TURNS; after a body, "ok" for the oracle's); records batches."""

        generated: list[dict] = []

        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
            if self.state.global_step != 0:
                return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)
            tok, turns = self.processing_class, []
            for i, ids in enumerate(prompt_ids):
                text = tok.decode(ids)
                after_body = text.rsplit("<|tool|>", 1)[-1] if "<|tool|>" in text else None
                script = FIRST_TURNS[i] if after_body is None else ("ok" if after_body.startswith("use ok") else "no")
                turns.append(_ids(tok, script) + [tok.eos_token_id])
            return turns, None

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            self.generated.append({k: output[k].detach().cpu().clone() for k in
                                   ("completion_ids", "completion_mask", "tool_mask", "advantages", "num_items_in_batch")})
            return output

    return Scripted



def _model_and_rows(tok, prompts):
    """A tiny random GQA Llama for ``tok`` and one dataset row per prompt, each with the slate :data:`SLATE`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id))
    rows = [{"prompt": [{"role": "user", "content": p}], "skill_names": list(SLATE),
             "skill_categories": list(SLATE.values())} for p in prompts]
    return model, rows

def _lora_run(out, max_steps: int, environment=SlateReads, with_dataset: bool = True):
    """The scripted trainer on a tiny chat model (LoRA on q and v) with no read_format, trained: the trainer, its
    tokenizer and the LoRA B weights before training. Without the dataset, the environment owns the data."""
    pytest.importorskip("trl")
    peft = pytest.importorskip("peft")
    from datasets import Dataset
    from trl import GRPOConfig

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    torch.manual_seed(0)
    tok = chat_tokenizer()
    model, rows = _model_and_rows(tok, PROMPTS)
    args = GRPOConfig(output_dir=str(out), report_to="none", max_steps=max_steps, num_generations=4,
                      per_device_train_batch_size=len(FIRST_TURNS), max_completion_length=120, logging_steps=1,
                      use_cpu=True, bf16=False, learning_rate=5e-2, save_strategy="no", seed=0)
    data = {"train_dataset": Dataset.from_list(rows)} if with_dataset else {}
    # No read_format: the default finds JSON tool calls as well as the kit's <read> tags.
    trainer = _trainer_class()(model=model, args=args, processing_class=tok, reward_funcs=_answer,
                               environment_factory=environment, **data,
                               peft_config=peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                           task_type="CAUSAL_LM"))
    before = {k: v.detach().clone() for k, v in trainer.model.named_parameters() if "lora_B" in k}
    trainer.train()
    return trainer, tok, before


@pytest.fixture(scope="module")
def json_run(tmp_path_factory):
    return _lora_run(tmp_path_factory.mktemp("trl_json"), max_steps=2)


def test_trl_trains_with_json_tool_call_reads_and_credits_their_name_tokens(json_run):
    """With the trainer's default read format: JSON tool-call reads are found, credited, and counted per step."""
    trainer, tok, before = json_run
    assert trainer.state.global_step == 2 and len(trainer.generated) == 2
    assert trainer.state.log_history[0]["reads/parsed"] == 11.0  # every scripted first turn but "no"
    assert trainer.state.log_history[0]["reads/failed"] == 0 and trainer.state.log_history[0]["reads/unlocated"] == 0
    batch = trainer.generated[0]
    n = batch["completion_mask"].sum(dim=1).tolist()
    texts = [tok.decode(ids[:k].tolist(), skip_special_tokens=True) for ids, k in zip(batch["completion_ids"], n)]
    # The tool's reply follows each call as the tool turn, kept out of the loss by tool_mask.
    assert all(("use ok" in t) == (i in ORACLE_ROWS) for i, t in enumerate(texts)), list(enumerate(texts))
    assert "no such skill" in texts[10] and texts[3] == "no"
    tool = batch["tool_mask"]
    assert all(tok.decode([t for t, m in zip(ids[:k].tolist(), tool[i, :k].tolist()) if not m], skip_special_tokens=True)
               .startswith("use") for i, (ids, k) in enumerate(zip(batch["completion_ids"], n)) if i not in (3, 10))
    # The name span, by hand: one token per character of the name as written inside the JSON.
    reads, spans_by_hand = [], []
    for i, (ids, k) in enumerate(zip(batch["completion_ids"], n)):
        spans, _ = read_spans(ids[:k].tolist(), tok, SLATE, JsonReadFormat())
        reads.append(spans)
        if FIRST_TURNS[i] != "no":
            call = FIRST_TURNS[i]
            skill = json.loads(call[len("<tool_call>"): -len("</tool_call>")])["arguments"]["skill"]
            start = call.index(skill) - len("<tool_call>") + 1  # one token per character, the tag one token
            spans_by_hand.append((start, start + len(skill)))
    assert [(s.name_start, s.name_end) for r in reads for s in r] == spans_by_hand
    assert [[s.category for s in r] for r in reads] == [
        ["oracle"], ["misleading"], ["oracle"], [], ["misleading"] * 1, ["misleading"], ["misleading"], ["misleading"],
        ["relevant"], ["oracle"], ["invalid"], ["irrelevant"]]
    # TRL's advantages are the kit's credit, folded for the dapo loss, on exactly these spans.
    rewards = torch.tensor([1.0 if i in ORACLE_ROWS else 0.0 for i in range(len(FIRST_TURNS))], dtype=torch.float64)
    mask = (batch["completion_mask"] * tool).bool()
    credit = assign("skillgate", CreditInputs(rewards, torch.arange(len(FIRST_TURNS)) // 4, mask, reads))
    N = int(batch["num_items_in_batch"])
    torch.testing.assert_close(batch["advantages"], (credit.advantages * credit.weights * N).float(), rtol=1e-6, atol=1e-7)
    adv = batch["advantages"]
    for i in ORACLE_ROWS:  # a successful oracle read: positive advantage on every name token, none around it
        s = reads[i][0]
        assert torch.all(adv[i, s.name_start: s.name_end] > 0), i
        assert adv[i, s.call_start].item() == 0 and adv[i, s.name_end].item() == 0
    for i in (1, 8, 11):  # reads that failed in a kept group: negative
        s = reads[i][0]
        assert torch.all(adv[i, s.name_start: s.name_end] < 0), i
    assert torch.all(adv[4:8] == 0)  # group 1: filtered
    # u = 1 for an oracle read that succeeded, centred per group: group 0's mean is 2/3, group 2's 1/4 (its
    # off-slate read, served an error, is credited like any other read of its group).
    assert credit.read_adv[0] == pytest.approx([1 / 3]) and credit.read_adv[1] == pytest.approx([-2 / 3])
    assert credit.read_adv[9] == pytest.approx([0.75]) and credit.read_adv[10] == pytest.approx([-0.25])
    moved = [k for k, v in trainer.model.named_parameters() if k in before and not torch.equal(before[k], v)]
    assert moved  # the LoRA weights took an optimizer step


def test_reads_of_any_spelling_are_served_the_same_body():
    env = SlateReads()
    assert env.read("ALPHA_sort") == env.read("alpha sort") == "use ok" and env.read("alpha") == "no such skill"


# ------------------------------------------------------------------ failed calls and string-encoded arguments


def _openai_call(skill: str) -> str:
    """A call with OpenAI's string-encoded arguments: ``"arguments": "{\\"skill\\": ...}"``."""
    return "<tool_call>" + json.dumps({"name": "read", "arguments": json.dumps({"skill": skill})}) + "</tool_call>"


def _raw_call(arguments) -> str:
    return "<tool_call>" + json.dumps({"name": "read", "arguments": arguments}) + "</tool_call>"


# Two groups of four. String-encoded arguments are served like an object; a call TRL cannot execute (an unknown
# argument, arguments that are no JSON object) is answered with TRL's error: no body, so the episode fails.
#   group 0: oracle (string-encoded, served: 1), misleading (0), oracle with an unknown argument (failed: 0), none (0)
#   group 1: oracle (1), undecodable arguments (failed, names no skill: 0), oracle (string-encoded: 1),
#            misleading with an unknown argument (failed: 0)
FAILING_TURNS = [_openai_call("Alpha Sort"), _call("alpha sorx"), _raw_call({"skill": "alpha sort", "page": 2}), "no",
                 _call("alpha-sort"), _raw_call("{not json"), _openai_call("ALPHA_SORT"),
                 _raw_call({"skill": "alpha sorx", "page": 1})]
FAILED_ROWS = (2, 7)
SERVED_ORACLE_ROWS = (0, 4, 6)


@pytest.fixture(scope="module")
def failing_run(tmp_path_factory):
    pytest.importorskip("trl")
    peft = pytest.importorskip("peft")
    from datasets import Dataset
    from trl import GRPOConfig

    global FIRST_TURNS
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    torch.manual_seed(0)
    tok = chat_tokenizer()
    model, rows = _model_and_rows(tok, PROMPTS[:2])
    out = tmp_path_factory.mktemp("trl_failing")
    args = GRPOConfig(output_dir=str(out), report_to="none", max_steps=1, num_generations=4,
                      per_device_train_batch_size=len(FAILING_TURNS), max_completion_length=160, logging_steps=1,
                      log_completions=True, num_completions_to_print=0, use_cpu=True, bf16=False, learning_rate=5e-2,
                      save_strategy="no", seed=0)
    saved, FIRST_TURNS = FIRST_TURNS, FAILING_TURNS  # the scripted trainer reads the module's FIRST_TURNS
    try:
        trainer = _trainer_class()(model=model, args=args, processing_class=tok, reward_funcs=_answer,
                                   train_dataset=Dataset.from_list(rows), environment_factory=SlateReads,
                                   peft_config=peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                               task_type="CAUSAL_LM"))
        trainer.generated = []
        trainer.train()
    finally:
        FIRST_TURNS = saved
    return trainer, tok, out


def test_string_encoded_arguments_are_served_and_failed_calls_get_no_selector_credit(failing_run):
    import pandas as pd

    trainer, tok, out = failing_run
    batch = trainer.generated[0]
    n = batch["completion_mask"].sum(dim=1).tolist()
    texts = [tok.decode(ids[:k].tolist(), skip_special_tokens=True) for ids, k in zip(batch["completion_ids"], n)]
    # OpenAI's string-encoded arguments reach the read tool: the oracle's body is inserted and the episode succeeds.
    assert [i for i, t in enumerate(texts) if "use ok" in t] == list(SERVED_ORACLE_ROWS), texts
    assert all("{'error': " in texts[i] for i in (*FAILED_ROWS, 5)), texts  # TRL's reply to a call that raised
    # The failed reads are located, but left out of the credit: the advantages are the kit's credit without them.
    reads, failed = [], []
    for i, (ids, k) in enumerate(zip(batch["completion_ids"], n)):
        spans, _ = read_spans(ids[:k].tolist(), tok, SLATE)
        failed.append(len(spans) if i in FAILED_ROWS else 0)
        reads.append([] if i in FAILED_ROWS else spans)
    assert failed == [0, 0, 1, 0, 0, 0, 0, 1]
    rewards = torch.tensor([1.0 if i in SERVED_ORACLE_ROWS else 0.0 for i in range(len(FAILING_TURNS))], dtype=torch.float64)
    credit = assign("skillgate", CreditInputs(rewards, torch.arange(len(FAILING_TURNS)) // 4,
                                              (batch["completion_mask"] * batch["tool_mask"]).bool(), reads))
    N = int(batch["num_items_in_batch"])
    torch.testing.assert_close(batch["advantages"], (credit.advantages * credit.weights * N).float(), rtol=1e-6, atol=1e-7)
    # A failed oracle read's name tokens carry the execution channel's advantage (its row failed: negative), not an
    # oracle read's positive selector advantage.
    (lost,) = find_reads(batch["completion_ids"][2, : n[2]].tolist(), tok)
    assert torch.all(batch["advantages"][2, lost.name_start: lost.name_end] < 0)
    assert credit.weights[2, lost.name_start] == credit.weights[3, 0]  # the execution channel's weight
    # Counted and logged: per step and per completion.
    log = trainer.state.log_history[0]
    assert log["reads/failed"] == 3.0 and log["reads/parsed"] == 6.0 and log["reads/unlocated"] == 0
    logged = pd.read_parquet(out / "completions" / "completions_00001.parquet")
    by_text = {t: list(f) for t, f in zip(logged["completion"], logged["failed_reads"])}
    assert [by_text[texts[i]] for i in range(len(texts))] == [[], [], ["alpha sort"], [], [], [], [], ["alpha sorx"]]
    assert all("alpha-sort" not in list(s) for s, f in zip(logged["read_skills"], logged["failed_reads"]) if list(f))


def test_the_read_tool_and_transcript_take_string_encoded_arguments():
    """The kit environment's read tool and the reward's transcript: OpenAI's string-encoded arguments as an object."""
    from skillgate_lib.env import SkillSlateEnv, display_name
    from skillgate_lib.integrations.trl import env_dataset, transcript

    env = SkillSlateEnv()
    dataset, reward = env_dataset(env, n_tasks=1, seed=0, tools=True)
    row = dataset[0]
    tool = reward.environment()
    tool.reset(**row)
    oracle = display_name(row["oracle"])
    body = tool.read(json.dumps({"skill": oracle.upper()}))  # the whole arguments, string-encoded
    assert body.startswith("<body>") and tool.read(oracle) == body
    messages = [{"role": "assistant", "content": "",
                 "tool_calls": [{"type": "function", "function": {"name": "read", "arguments": json.dumps({"skill": oracle})}}]},
                {"role": "tool", "name": "read", "content": body}]
    assert transcript(messages) == f"<read> {oracle} </read> {body}"
    broken = [{"role": "assistant", "content": "", "tool_calls": [{"type": "function",
                                                                 "function": {"name": "read", "arguments": "{oops"}}]}]
    assert transcript(broken) == json.dumps({"name": "read", "arguments": "{oops"})  # no read: its JSON, no crash
    assert reward(prompts=[row["prompt"]], completions=[messages], task_id=[row["task_id"]]) in ([0.0], [1.0])


def test_the_trainer_refuses_a_read_format_that_locates_no_executed_read(tmp_path):
    """TRL executes JSON read calls, but ReadFormat (the kit's tags only) locates none: an error naming read_format."""
    pytest.importorskip("trl")
    peft = pytest.importorskip("peft")
    from datasets import Dataset
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl import GRPOConfig

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    tok = chat_tokenizer()
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id))
    rows = [{"prompt": [{"role": "user", "content": p}], "skill_names": list(SLATE),
             "skill_categories": list(SLATE.values())} for p in PROMPTS]
    args = GRPOConfig(output_dir=str(tmp_path), report_to="none", max_steps=1, num_generations=4,
                      per_device_train_batch_size=len(FIRST_TURNS), max_completion_length=120, use_cpu=True, bf16=False,
                      save_strategy="no", seed=0)
    trainer = _trainer_class()(model=model, args=args, processing_class=tok, reward_funcs=_answer,
                               train_dataset=Dataset.from_list(rows), environment_factory=SlateReads,
                               read_format=ReadFormat(),
                               peft_config=peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    trainer.generated = []
    with pytest.raises(ValueError, match=r"executed 11 read calls in the first generation batch, but read_format=ReadFormat"
                                         r".*located none.*Pass read_format="):
        trainer.train()


class PromptingReads(SlateReads):
    """An environment that owns the data: ``reset()`` returns the prompt, and TRL builds a prompt-only dataset itself."""

    def reset(self, **_):
        return "sort a list"


def test_environment_owned_data_trains_on_the_outcome_channel(tmp_path):
    """No train_dataset: TRL's own placeholder rows have no slate, so every read is off-slate and carries no selector
    signal; the rows are counted, the batch is the kit's credit of those reads, and the step updates the LoRA weights."""
    trainer, tok, before = _lora_run(tmp_path, max_steps=1, environment=PromptingReads, with_dataset=False)
    log = trainer.state.log_history[0]
    assert log["rows/no_slate"] == 12.0 and log["reads/parsed"] == 11.0 and log["credit/update_skipped"] == 0
    batch = trainer.generated[0]
    n = batch["completion_mask"].sum(dim=1).tolist()
    reads = [read_spans(ids[:k].tolist(), tok, {})[0] for ids, k in zip(batch["completion_ids"], n)]
    assert {s.category for r in reads for s in r} == {"invalid"} and sum(map(len, reads)) == 11
    rewards = torch.tensor([1.0 if i in ORACLE_ROWS else 0.0 for i in range(len(FIRST_TURNS))], dtype=torch.float64)
    mask = (batch["completion_mask"] * batch["tool_mask"]).bool()
    credit = assign("skillgate", CreditInputs(rewards, torch.arange(len(FIRST_TURNS)) // 4, mask, reads))
    assert all(a == 0 for row in credit.read_adv for a in row)  # no selector signal
    N = int(batch["num_items_in_batch"])
    torch.testing.assert_close(batch["advantages"], (credit.advantages * credit.weights * N).float(), rtol=1e-6, atol=1e-7)
    assert [k for k, v in trainer.model.named_parameters() if k in before and not torch.equal(before[k], v)]
