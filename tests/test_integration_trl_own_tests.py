"""scripts/trl_own_tests.py: its stand-in tokenizer keeps the real ids TRL's tests write, and its table reads junit reports."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import repo_scripts


@pytest.fixture(scope="module")
def own():
    return repo_scripts.load("scripts/trl_own_tests.py")


def test_the_stand_in_tokenizer_has_qwen_ids_and_trl_chat_template(own):
    pytest.importorskip("trl")
    templates = Path(importlib.util.find_spec("trl").submodule_search_locations[0]) / "chat_templates"
    merges = own.train_merges(["Beautiful is better than ugly.", "Explicit is better than implicit."], size=300)
    tok = own.build_tokenizer("qwen2.5", merges, templates)
    assert len(tok) == 151669 and tok.eos_token_id == 151645 and tok.pad_token_id == 151643
    assert tok.convert_ids_to_tokens([0, 151644, 151657]) == ["!", "<|im_start|>", "<tool_call>"]
    assert tok.chat_template == (templates / "qwen2_5.jinja").read_text(encoding="utf-8")
    text = tok.apply_chat_template([{"role": "user", "content": "Beautiful is better"}], tokenize=False,
                                   add_generation_prompt=True)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text and 151644 in ids and max(ids) < len(tok)


def test_outcomes_and_the_table_compare_only_tests_both_runs_reached(own, tmp_path):
    refusal = f"ValueError: GRPOConfig.loss_type='grpo': {own.REFUSAL} ('dapo',): why"
    grpo_xml = tmp_path / "grpo.xml"
    grpo_xml.write_text(
        '<testsuites><testsuite>'
        '<testcase classname="tests.test_grpo_trainer.TestGRPOTrainer" name="test_a"/>'
        '<testcase classname="tests.test_grpo_trainer.TestGRPOTrainer" name="test_b"/>'
        '<testcase classname="tests.test_grpo_trainer.TestGRPOTrainer" name="test_c"><skipped type="pytest.skip" '
        'message="needs vllm"/></testcase>'
        '</testsuite></testsuites>')
    kit_xml = tmp_path / "kit.xml"
    kit_xml.write_text(
        '<testsuites><testsuite>'
        '<testcase classname="tests.test_grpo_trainer.TestGRPOTrainer" name="test_a"/>'
        f'<testcase classname="tests.test_grpo_trainer.TestGRPOTrainer" name="test_b"><failure message="{refusal}"/>'
        '</testcase><testcase time="0.001" /></testsuite></testsuites>')  # the entry a Ctrl-C leaves: no test
    grpo, kit = own.outcomes(grpo_xml), own.outcomes(kit_xml)
    assert len(kit) == 2
    assert grpo["TestGRPOTrainer::test_c"] == ("skipped", "needs vllm")
    assert kit["TestGRPOTrainer::test_b"] == ("failed", refusal)
    table = own.table(grpo, kit)
    assert table.startswith("2 tests run under both trainers (1 reached by one run only, left out).")
    assert "| passed | 2 | 1 |" in table and "| failed | 0 | 1 |" in table
    assert "1 tests differ; 1 of them are the kit's documented refusals" in table
    assert f"| TestGRPOTrainer::test_b | passed | failed | refusal: {refusal} |" in table


def test_merged_reports_take_each_test_from_the_latest_run_that_reached_it(own, tmp_path):
    case = '<testcase classname="tests.test_grpo_trainer.TestGRPOTrainer" name="{}">{}</testcase>'
    for run, cases in (("first", [("test_a", ""), ("test_b", '<failure message="KeyboardInterrupt"/>')]),
                       ("resumed", [("test_b", ""), ("test_c", '<skipped type="pytest.skip" message="needs vllm"/>')])):
        (tmp_path / run).mkdir()
        (tmp_path / run / "grpo.xml").write_text(
            "<testsuites><testsuite>" + "".join(case.format(n, body) for n, body in cases) + "</testsuite></testsuites>")
    out = own.merged([tmp_path / "first", tmp_path / "resumed"], "grpo")
    assert out == {"TestGRPOTrainer::test_a": ("passed", ""), "TestGRPOTrainer::test_b": ("passed", ""),
                   "TestGRPOTrainer::test_c": ("skipped", "needs vllm")}
    with pytest.raises(SystemExit, match="skillgate.xml does not exist"):
        own.merged([tmp_path / "first"], "skillgate")
