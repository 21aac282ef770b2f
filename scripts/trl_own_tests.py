"""TRL's own GRPOTrainer tests, run against TRL's ``GRPOTrainer`` and against the kit's ``SkillGateGRPOTrainer``.

Usage::

    python scripts/trl_own_tests.py TRL_CHECKOUT [--work build/trl_own_tests] [-k EXPR] [--trainer both] [--merge DIR]

``TRL_CHECKOUT`` is a clone of TRL's repository (any commit; its ``tests/test_grpo_trainer.py`` is run
as it is, against the *installed* ``trl`` package, so a checkout newer than the installed release has
tests of features that release lacks: they fail under both trainers and the table shows them so).

No network is used. The Hub ids the tests load are replaced by local stand-ins built here under
``WORK/standins`` and found because pytest runs with that folder as its working directory
(``from_pretrained("trl-internal-testing/...")`` and ``load_dataset(...)`` take an existing
relative folder before the Hub):

* the ``zen`` dataset: TRL's own ``scripts/generate_zen_dataset.py`` with its ``push_to_hub``
  writing parquet files and the card's ``configs`` locally;
* tiny random-weight models (the sizes of TRL's ``scripts/generate_tiny_models``: hidden 8,
  2 layers) for :data:`STANDINS`, each with a byte-level BPE tokenizer trained here on the
  zen text, laid out with the real model's vocabulary size and special-token ids (some tests
  write ``<|im_end|>`` as 151645), and TRL's own copy of the family's chat template
  (``trl/chat_templates``), so TRL recognises it for tool-call parsing. Hub ids without a
  stand-in (VLMs, Gemma, GPT-OSS, ...) fail to load under both trainers.

The kit's run substitutes the trainer through this file used as a pytest plugin
(``-p trl_own_tests``): ``trl.GRPOTrainer`` becomes :class:`KitTrainer`, which is
``SkillGateGRPOTrainer`` with the kit's defaults (``credit="skillgate"``); TRL's datasets carry
no slate columns, so every row has an empty slate and trains on the outcome channel. The table
lists every test whose outcome differs between the two trainers, with the first line of the
kit's error; refusals the kit documents (``docs/integrations.md``) are marked as such. A run stopped
with Ctrl-C still writes its report, and ``--table`` then compares the tests both runs reached.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TRAINER_ENV = "SKILLGATE_TRL_OWN_TESTS_TRAINER"
SRC_ENV = "SKILLGATE_TRL_OWN_TESTS_SRC"
"""Environment variable holding the TRL checkout, for the plugin."""
"""Environment variable the plugin reads: ``grpo`` (TRL's trainer, untouched) or ``skillgate``."""
TEST_FILE = "tests/test_grpo_trainer.py"
REFUSAL = "SkillGateGRPOTrainer needs one of"
"""The start of the kit's error for a GRPOConfig it refuses (skillgate_lib.integrations.trl)."""

QWEN_SPECIALS = {
    151643: ("<|endoftext|>", True), 151644: ("<|im_start|>", True), 151645: ("<|im_end|>", True),
    151646: ("<|object_ref_start|>", True), 151647: ("<|object_ref_end|>", True), 151648: ("<|box_start|>", True),
    151649: ("<|box_end|>", True), 151650: ("<|quad_start|>", True), 151651: ("<|quad_end|>", True),
    151652: ("<|vision_start|>", True), 151653: ("<|vision_end|>", True), 151654: ("<|vision_pad|>", True),
    151655: ("<|image_pad|>", True), 151656: ("<|video_pad|>", True), 151657: ("<tool_call>", False),
    151658: ("</tool_call>", False), 151659: ("<|fim_prefix|>", False), 151660: ("<|fim_middle|>", False),
    151661: ("<|fim_suffix|>", False), 151662: ("<|fim_pad|>", False), 151663: ("<|repo_name|>", False),
    151664: ("<|file_sep|>", False), 151665: ("<tool_response>", False), 151666: ("</tool_response>", False),
    151667: ("<think>", False), 151668: ("</think>", False),
}
"""Qwen2.5 / Qwen3 added tokens at their real ids (token, special)."""
LLAMA_SPECIALS = {128000 + k: (f"<|reserved_special_token_{k}|>", True) for k in range(256)}
LLAMA_SPECIALS.update({128000: ("<|begin_of_text|>", True), 128001: ("<|end_of_text|>", True),
                       128004: ("<|finetune_right_pad_id|>", True), 128006: ("<|start_header_id|>", True),
                       128007: ("<|end_header_id|>", True), 128008: ("<|eom_id|>", True), 128009: ("<|eot_id|>", True),
                       128010: ("<|python_tag|>", True)})
"""Llama 3.2's 256 special tokens at their real ids."""

FAMILIES = {
    # family: (first special id, specials, template file, bos, eos, pad)
    "qwen2.5": (151643, QWEN_SPECIALS, "qwen2_5.jinja", None, "<|im_end|>", "<|endoftext|>"),
    "qwen3": (151643, QWEN_SPECIALS, "qwen3.jinja", None, "<|im_end|>", "<|endoftext|>"),
    "llama3.2": (128000, LLAMA_SPECIALS, "llama3_2.jinja", "<|begin_of_text|>", "<|eot_id|>", "<|finetune_right_pad_id|>"),
}
STANDINS = {
    # Hub id (under trl-internal-testing/): (config class, model class, family, extra config)
    "tiny-Qwen2ForCausalLM-2.5": ("Qwen2Config", "Qwen2ForCausalLM", "qwen2.5", {}),
    "tiny-Qwen2ForSequenceClassification-2.5": ("Qwen2Config", "Qwen2ForSequenceClassification", "qwen2.5", {"num_labels": 1}),
    "tiny-Qwen3ForCausalLM": ("Qwen3Config", "Qwen3ForCausalLM", "qwen3", {}),
    "tiny-Qwen3ForSequenceClassification": ("Qwen3Config", "Qwen3ForSequenceClassification", "qwen3", {"num_labels": 1}),
    "tiny-Qwen3MoeForCausalLM": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", "qwen3",
                                 {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
                                  "output_router_logits": True}),
    "tiny-LlamaForCausalLM-3.2": ("LlamaConfig", "LlamaForCausalLM", "llama3.2", {}),
    "tiny-LlamaForSequenceClassification-3.2": ("LlamaConfig", "LlamaForSequenceClassification", "llama3.2", {"num_labels": 1}),
}
"""The Hub models given a local stand-in: TRL's tiny sizes (hidden 8, 4 heads, 2 KV heads, 2 layers, MLP 32), float32."""


# ---------------------------------------------------------------- the plugin (``-p trl_own_tests``)

def pytest_load_initial_conftests(early_config, parser, args) -> None:
    """Import the installed ``trl`` before TRL's conftest puts the checkout first on ``sys.path`` (its ``trl/``
    would shadow the installed release); under ``SKILLGATE_TRL_OWN_TESTS_TRAINER=skillgate``, ``trl.GRPOTrainer``
    is then the kit's trainer for every test."""
    import trl

    for name in shimmed_availability(Path(os.environ[SRC_ENV])):
        print(f"trl_own_tests: the installed trl lacks trl.import_utils.{name}, which TRL's tests import; "
              "it is given one that checks the package is importable")
    if os.environ.get(TRAINER_ENV, "grpo") == "skillgate":
        from skillgate_lib.integrations.trl import SkillGateGRPOTrainer

        trl.GRPOTrainer = SkillGateGRPOTrainer


def shimmed_availability(trl_src: Path) -> list[str]:
    """Give ``trl.import_utils`` each ``is_<package>_available`` that the checkout's ``tests/testing_utils.py`` imports
    and the installed release lacks (a checkout newer than the release); returns their names."""
    import ast
    import importlib

    import_utils = importlib.import_module("trl.import_utils")
    tree = ast.parse((trl_src / "tests" / "testing_utils.py").read_text())
    wanted = [a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module == "trl.import_utils"
              for a in node.names]
    added = []
    for name in wanted:
        package = name.removeprefix("is_").removesuffix("_available")
        if not hasattr(import_utils, name) and name != package:
            setattr(import_utils, name, lambda package=package: importlib.util.find_spec(package) is not None)
            added.append(name)
    return added


# ---------------------------------------------------------------- stand-ins

def bytes_to_unicode() -> list[str]:
    """GPT-2's byte -> printable character table, in its order (id 0 is ``!``, as in Qwen's and Llama 3's vocabularies)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def train_merges(corpus: list[str], size: int = 2000) -> list[tuple[str, str]]:
    """Byte-level BPE merges learned on ``corpus`` (the zen text and the chat templates)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                        show_progress=False))
    merges = json.loads(tok.to_str())["model"]["merges"]
    return [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in merges]


def build_tokenizer(family: str, merges: list[tuple[str, str]], templates: Path):
    """A fast tokenizer with ``family``'s vocabulary size, special-token ids and TRL's chat template."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    first_special, specials, template, bos, eos, pad = FAMILIES[family]
    vocab: dict[str, int] = {}
    for ch in bytes_to_unicode():
        vocab[ch] = len(vocab)
    kept = []
    for a, b in merges:
        if a in vocab and b in vocab and a + b not in vocab:
            vocab[a + b] = len(vocab)
            kept.append([a, b])
    k = 0
    while len(vocab) < first_special:  # the rest of the real vocabulary: unused, unreachable words
        vocab.setdefault(f"<unused_{k}>", len(vocab))
        k += 1
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True}
    spec = {
        "version": "1.0", "truncation": None, "padding": None, "normalizer": None, "post_processor": None,
        "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": s} for i, (t, s) in sorted(specials.items())],
        "pre_tokenizer": byte_level, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": kept},
    }
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)),
                                        bos_token=bos, eos_token=eos, pad_token=pad)
    tokenizer.chat_template = (templates / template).read_text(encoding="utf-8")
    return tokenizer


def build_zen(trl_src: Path, out: Path) -> None:
    """TRL's ``scripts/generate_zen_dataset.py``, its pushes written as parquet under ``out`` with the card's configs."""
    from datasets import Dataset, DatasetDict

    configs: dict[str, list[str]] = {}

    def save(self, repo_id, config_name="default", **_):
        splits = self if isinstance(self, DatasetDict) else {"train": self}
        for split, ds in splits.items():
            ds.to_parquet(str(out / config_name / f"{split}-00000-of-00001.parquet"))
        configs[config_name] = list(splits)

    spec = importlib.util.spec_from_file_location("generate_zen_dataset", trl_src / "scripts" / "generate_zen_dataset.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    originals = Dataset.push_to_hub, DatasetDict.push_to_hub
    Dataset.push_to_hub = DatasetDict.push_to_hub = save
    try:
        module.main(test_size=0.1, push_to_hub=True, repo_id="trl-internal-testing/zen")
    finally:
        Dataset.push_to_hub, DatasetDict.push_to_hub = originals
    card = ["---", "configs:"]
    for name, splits in configs.items():
        card += [f"- config_name: {name}", "  data_files:"]
        card += [f"  - split: {s}\n    path: {name}/{s}-*" for s in splits]
    (out / "README.md").write_text("\n".join(card + ["---", ""]))


def build_standins(trl_src: Path, work: Path) -> Path:
    """Build (once) the stand-ins under ``work/standins``; returns that folder."""
    import torch
    import transformers

    root = work / "standins"
    org = root / "trl-internal-testing"
    if (org / ".complete").exists():
        return root
    org.mkdir(parents=True, exist_ok=True)
    build_zen(trl_src, org / "zen")
    import pandas as pd

    corpus = [str(v) for f in sorted((org / "zen").rglob("*.parquet")) for col in pd.read_parquet(f).to_dict("list").values()
              for v in col]
    templates = Path(importlib.util.find_spec("trl").submodule_search_locations[0]) / "chat_templates"
    corpus += [t.read_text(encoding="utf-8") for t in sorted(templates.glob("*.jinja"))]
    merges = train_merges(corpus)
    torch.manual_seed(0)
    for name, (config_cls, model_cls, family, extra) in STANDINS.items():
        tokenizer = build_tokenizer(family, merges, templates)
        config = getattr(transformers, config_cls)(
            vocab_size=len(tokenizer), hidden_size=8, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
            intermediate_size=32, head_dim=2, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id, **extra)
        model = getattr(transformers, model_cls)(config)  # float32: bfloat16 matmuls are several times slower on CPU
        model.save_pretrained(org / name)
        tokenizer.save_pretrained(org / name)
    (org / ".complete").write_text("")
    return root


# ---------------------------------------------------------------- running and the table

def run_pytest(trl_src: Path, standins: Path, trainer: str, report: Path, extra: list[str]) -> float:
    """TRL's test file under ``trainer`` (``grpo`` / ``skillgate``), CPU only, junit XML to ``report``; returns wall seconds."""
    env = {**os.environ, TRAINER_ENV: trainer, SRC_ENV: str(trl_src), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "pytest", str(trl_src / TEST_FILE), "-q", "-p", "trl_own_tests", "-p", "no:cacheprovider",
           "--rootdir", str(trl_src), "-m", "not slow", f"--junitxml={report}", "-o", "junit_family=xunit1", *extra]
    start = time.monotonic()
    subprocess.run(cmd, cwd=standins, env=env, check=False)
    return time.monotonic() - start


def outcomes(report: Path) -> dict[str, tuple[str, str]]:
    """Test id -> (``passed`` / ``failed`` / ``skipped`` / ``xfailed``, first line of the message) from a junit XML."""
    out = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        if case.get("name") is None:  # the empty entry pytest writes for a run stopped with Ctrl-C: no test
            continue
        test_id = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        status, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                status, message = "failed", child.get("message") or ""
            elif child.tag == "skipped":
                kind = child.get("type", "")
                status, message = ("xfailed" if "xfail" in kind else "skipped"), child.get("message") or ""
        out[test_id] = (status, message.strip().splitlines()[0] if message.strip() else "")
    return out


def table(grpo: dict[str, tuple[str, str]], kit: dict[str, tuple[str, str]]) -> str:
    """The pass table over the tests both runs reached: outcome counts per trainer, then each test whose outcome
    differs, the kit's documented refusals marked, and the causes of the failures both trainers share."""
    both = set(grpo) & set(kit)
    lines = [f"{len(both)} tests run under both trainers ({len(set(grpo) ^ set(kit))} reached by one run only, left out).",
             "", "| outcome | GRPOTrainer | SkillGateGRPOTrainer |", "|---|---:|---:|"]
    for status in ("passed", "failed", "skipped", "xfailed"):
        lines.append(f"| {status} | {sum(grpo[t][0] == status for t in both)} | {sum(kit[t][0] == status for t in both)} |")
    differ = sorted(t for t in both if grpo[t][0] != kit[t][0])
    refused = [t for t in differ if REFUSAL in kit[t][1]]
    lines += ["", f"{len(differ)} tests differ; {len(refused)} of them are the kit's documented refusals "
                  "(docs/integrations.md, 'Refused at construction'):",
              "", "| test | GRPOTrainer | SkillGateGRPOTrainer | kit's message |", "|---|---|---|---|"]
    for t in differ:
        mark = "refusal: " if t in refused else ""
        lines.append(f"| {t} | {grpo[t][0]} | {kit[t][0]} | {mark}{kit[t][1][:140]} |")
    causes = collections.Counter(grpo[t][1].split(":")[0][:60] for t in both if grpo[t][0] == kit[t][0] == "failed")
    lines += ["", "Failures under both trainers, by the first words of the error (a Hub id without a stand-in, a "
                  "feature of a newer TRL than the installed one):", ""]
    lines += [f"- {n} x {c}" for c, n in causes.most_common()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trl_src", type=Path, help="a checkout of TRL's repository (holds tests/test_grpo_trainer.py)")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "trl_own_tests", help="stand-ins and reports")
    parser.add_argument("--trainer", choices=("both", "grpo", "skillgate"), default="both")
    parser.add_argument("-k", default=None, help="pytest -k expression (a subset of the tests)")
    parser.add_argument("--table", action="store_true", help="only print the table of the reports already in --work")
    parser.add_argument("--merge", type=Path, action="append", default=[], metavar="DIR",
                        help="the reports of an earlier run (DIR/grpo.xml, DIR/skillgate.xml) merged under --work's: a test "
                             "takes its outcome from --work's report where that holds it (repeatable; for a run resumed "
                             "with -k on the tests an earlier run did not reach)")
    args = parser.parse_args(argv)
    trl_src = args.trl_src.resolve()
    if not (trl_src / TEST_FILE).is_file():
        parser.error(f"trl_src: {trl_src / TEST_FILE} does not exist; pass the root of a TRL checkout")
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    if importlib.util.find_spec("jmespath") is None and not args.table:
        print("warning: jmespath is not installed, so TRL skips its tool and environment tests under both trainers "
              "(pip install jmespath)", file=sys.stderr, flush=True)
    standins = build_standins(trl_src, work)
    extra = ["-k", args.k] if args.k else []
    trainers = () if args.table else ("grpo", "skillgate") if args.trainer == "both" else (args.trainer,)
    for trainer in trainers:
        seconds = run_pytest(trl_src, standins, trainer, work / f"{trainer}.xml", extra)
        print(f"{trainer}: {seconds:.0f} s", flush=True)
    if all((work / f"{t}.xml").exists() for t in ("grpo", "skillgate")):
        import trl

        print(f"\nTRL checkout: {trl_src} ({commit_of(trl_src)}); installed trl {trl.__version__}\n")
        print(table(*(merged([*args.merge, work], t) for t in ("grpo", "skillgate"))))
    return 0


def merged(dirs: list[Path], trainer: str) -> dict[str, tuple[str, str]]:
    """The outcomes of ``trainer`` over the reports in ``dirs``, a later folder's outcome replacing an earlier one's."""
    out: dict[str, tuple[str, str]] = {}
    for d in dirs:
        report = Path(d) / f"{trainer}.xml"
        if not report.exists():
            raise SystemExit(f"--merge: {report} does not exist")
        out.update(outcomes(report))
    return out


def commit_of(path: Path) -> str:
    """The checkout's commit (``git rev-parse HEAD``), or what ``TRL_COMMIT`` says for an exported tree."""
    done = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else os.environ.get("TRL_COMMIT", "commit unknown (not a git checkout)")


if __name__ == "__main__":
    sys.exit(main())
