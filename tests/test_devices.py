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
    with pytest.raises(ValueError, match="bf16 autocast needs a CUDA device"):
        devices.check_bf16(torch.device("cpu"), True)
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
    with pytest.raises(ValueError, match="bf16 autocast needs a CUDA device"):
        train(TrainConfig(method="outcome", steps=1, device="cpu", bf16=True, run_dir=str(tmp_path / "bf16")),
              progress=False)
