"""A pretrained tokenizer that splits ``</read>`` gets it as one token (examples/verl/add_read_tokens.py), so verl stops after a read."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
import verl_light

verl_light.stub_ray_if_absent()  # verl without Ray: the stand-in of tests/verl_light.py
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "verl" / "add_read_tokens.py"


def test_add_read_tokens_makes_the_close_tag_one_token_and_reads_stay_found(tmp_path, caplog):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("verl.tools.base_tool")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from skillgate_lib.integrations import find_reads
    from skillgate_lib.integrations.verl_tool import close_tag_stop_ids

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    core = Tokenizer(models.BPE({c: i for i, c in enumerate(sorted(alphabet))}, []))  # bytes only: "</read>" is 7 tokens
    core.pre_tokenizer, core.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|end|>", pad_token="<|end|>")
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=len(tok), hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id))
    before, out = tmp_path / "before", tmp_path / "after"
    model.save_pretrained(before)
    tok.save_pretrained(before)
    assert close_tag_stop_ids(tok) == [] and "does not stop after a read" in caplog.text

    runpy.run_path(str(EXAMPLE), run_name="example")["main"]([str(before), str(out)])
    tok2 = transformers.AutoTokenizer.from_pretrained(out)
    model2 = transformers.AutoModelForCausalLM.from_pretrained(out)
    open_id, close_id = tok2.convert_tokens_to_ids(["<read>", "</read>"])
    assert close_tag_stop_ids(tok2) == [close_id] and len(tok2) == len(tok) + 2
    assert model2.get_input_embeddings().num_embeddings == len(tok2)
    assert model2.get_output_embeddings().weight.shape[0] == len(tok2)
    ids = tok2.encode("use <read> alpha sort </read> then", add_special_tokens=False)
    assert ids.count(open_id) == 1 and ids.count(close_id) == 1
    (read,) = find_reads(ids, tok2)
    assert read.name == "alpha sort" and ids[read.call_end - 1] == close_id
    assert tok2.decode(ids[read.name_start:read.name_end]).strip() == "alpha sort"
