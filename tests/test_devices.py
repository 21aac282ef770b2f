"""``--device auto|cpu|cuda`` and bf16: the plumbing, on the CPU (the GPU path is a benchmark record)."""

from __future__ import annotations

import json

import pytest
import torch

from skillgate_lib.policy import devices
from skillgate_lib.runs.train import TrainConfig, train


def test_auto_resolves_to_what_is_there_and_bad_specs_are_named():
    assert devices.resolve("cpu") == torch.device("cpu")
    assert devices.resolve("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="device must be one of auto, cpu, cuda"):
        devices.resolve("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device is visible"):
            devices.resolve("cuda")
    devices.check_bf16(torch.device("cpu"), False)
    with devices.autocast(torch.device("cpu"), False):  # fp32: a no-op context
        assert torch.ones(1).dtype == torch.float32


def test_a_cpu_run_is_the_same_run_whether_the_device_is_named_or_auto(tmp_path):
    """On a CPU-only machine ``--device cpu`` and ``auto`` give the same numbers, and the device is recorded."""
    if torch.cuda.is_available():
        pytest.skip("auto resolves to CUDA here")
    rows = []
    for spec in ("cpu", "auto"):
        cfg = TrainConfig(method="outcome", regime="paper", steps=2, prompts_per_step=2, group_size=4, eval_every=2,
                          eval_tasks=8, threads=1, device=spec, run_dir=str(tmp_path / spec))
        m = train(cfg, progress=False)
        rows.append(m.drop(columns=[c for c in m.columns if c.startswith("time/")]))
        assert json.loads((tmp_path / spec / "config.json").read_text())["device"] == spec
    assert rows[0].equals(rows[1])


def test_bf16_on_a_cpu_needs_native_bf16_matmuls(tmp_path, monkeypatch):
    """Emulated bf16 is slower than fp32: a CPU without the amx_bf16 / avx512_bf16 flag refuses it, naming why."""
    flags = tmp_path / "cpuinfo"
    flags.write_text("flags : fpu sse2 avx2\n")
    assert devices.native_bf16_cpu(flags) is None and devices.native_bf16_cpu(tmp_path / "missing") is None
    flags.write_text("flags : fpu avx512f avx512_bf16 amx_tile amx_bf16\n")
    assert devices.native_bf16_cpu(flags) == "amx_bf16"
    monkeypatch.setattr(devices, "native_bf16_cpu", lambda cpuinfo="/proc/cpuinfo": None)
    with pytest.raises(ValueError, match="no native bf16 matmuls"):
        devices.check_bf16(torch.device("cpu"), True)
    with pytest.raises(ValueError, match="no native bf16 matmuls"):
        train(TrainConfig(method="outcome", steps=1, device="cpu", bf16=True, run_dir=str(tmp_path / "bf16")),
              progress=False)
    monkeypatch.setattr(devices, "native_bf16_cpu", lambda cpuinfo="/proc/cpuinfo": "amx_bf16")
    devices.check_bf16(torch.device("cpu"), True)
    assert "bf16 autocast on cpu, native bf16 matmuls (amx_bf16)" in devices.precision_line(torch.device("cpu"), True)
    assert devices.precision_line(torch.device("cpu"), False) == "precision: fp32 on cpu"


def test_bf16_autocast_matches_fp32_on_a_tiny_gqa_llama_and_keeps_fp32_where_it_must():
    """bf16 autocast on the CPU against fp32, on a random Llama with grouped-query attention (4 heads, 2 KV heads),
    LoRA on its projections: token log-probabilities agree within 0.01 nats on average and 0.02 at worst (measured
    here: 0.0005 and 0.002); the log-probabilities, the loss, the LoRA weights and their gradients stay fp32."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))
    model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
    for name, p in model.named_parameters():
        if "lora_B" in name:  # a LoRA that is not zero, so that it takes part
            torch.nn.init.normal_(p, std=0.02)
    ids = torch.randint(0, 96, (3, 24))

    def logprobs():
        logits = model(input_ids=ids).logits[:, :-1]
        return torch.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:, None])[..., 0]

    fp32 = logprobs().detach()
    with devices.autocast(torch.device("cpu"), True):
        lp = logprobs()
        loss = -lp.mean()
    gap = (lp.detach() - fp32).abs()
    assert 0 < gap.mean() < 0.01 and gap.max() < 0.02, (gap.mean(), gap.max())  # > 0: the matmuls did run in bf16
    assert lp.dtype == torch.float32 and loss.dtype == torch.float32
    loss.backward()
    lora = [p for n, p in model.named_parameters() if "lora_" in n]
    assert lora and all(p.dtype == torch.float32 and p.grad is not None and p.grad.dtype == torch.float32 for p in lora)


def test_the_default_precision_is_bf16_only_for_a_pretrained_model_where_it_pays(tmp_path, monkeypatch):
    """Unset ``--bf16``: bf16 autocast for a pretrained model on a CPU with native bf16 matmuls, fp32 for the embedded
    tiny model and on a CPU without them; ``--bf16`` / ``--no-bf16`` win; a TrainConfig records the resolved value."""
    from skillgate_lib.cli import add_fields
    from skillgate_lib.policy.models import is_embedded

    cpu = torch.device("cpu")
    assert is_embedded("tiny") and is_embedded("tiny-note8") and is_embedded(None)
    assert not is_embedded("smollm2-135m") and not is_embedded("smollm2-sft")
    (tmp_path / "small").mkdir(), (tmp_path / "wide").mkdir()
    (tmp_path / "small" / "config.json").write_text(json.dumps({"hidden_size": 64}))
    (tmp_path / "wide" / "config.json").write_text(json.dumps({"hidden_size": 576}))
    assert is_embedded(str(tmp_path / "small")) and not is_embedded(str(tmp_path / "wide"))
    for native, want in (("amx_bf16", True), (None, False)):
        monkeypatch.setattr(devices, "native_bf16_cpu", lambda cpuinfo="/proc/cpuinfo", native=native: native)
        assert devices.resolve_bf16(None, cpu, embedded=False) is want
        assert devices.resolve_bf16(None, cpu, embedded=True) is False
        assert devices.resolve_bf16(True, cpu, embedded=True) is True and devices.resolve_bf16(False, cpu, False) is False
        assert TrainConfig(model="smollm2-sft", device="cpu").bf16 is want
        assert TrainConfig(model="tiny-note8", device="cpu").bf16 is False
    parser = __import__("argparse").ArgumentParser()
    add_fields(parser, TrainConfig)
    assert parser.parse_args([]).bf16 is None
    assert parser.parse_args(["--bf16"]).bf16 is True and parser.parse_args(["--no-bf16"]).bf16 is False
