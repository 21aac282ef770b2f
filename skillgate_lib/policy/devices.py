"""Where the policy runs: ``--device auto|cpu|cuda`` and the optional bf16 autocast on CUDA.

Sampling stays on the CPU's random stream whatever the device: the next-token probabilities
are moved to the CPU and drawn from the run's seeded ``torch.Generator`` there
(:func:`skillgate_lib.policy.rollout.generate`), so a seed names the same draws on every device, and
runs differ between devices only where the logits round differently.
"""

from __future__ import annotations

import contextlib

import torch

DEVICES = ("auto", "cpu", "cuda")


def resolve(spec: str = "auto") -> torch.device:
    """The device ``spec`` names: ``auto`` is CUDA when a GPU is visible, else the CPU."""
    if spec not in DEVICES and not spec.startswith("cuda:"):
        raise ValueError(f"device must be one of {', '.join(DEVICES)} (or cuda:N), got {spec!r}")
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {spec!r}: no CUDA device is visible to this torch build ({torch.__version__}); "
                         "use --device cpu, or install a CUDA build of PyTorch (README, 'Installing for a GPU')")
    return torch.device(spec)


def check_bf16(device: torch.device, bf16: bool) -> None:
    """bf16 autocast is a CUDA option: refuse it on the CPU instead of silently running fp32."""
    if bf16 and device.type != "cuda":
        raise ValueError(f"bf16 autocast needs a CUDA device; the run resolves to {device}")


def autocast(device: torch.device, bf16: bool):
    """A bf16 autocast context on CUDA when ``bf16``, else a no-op (fp32 everywhere)."""
    if bf16 and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def add_device_arguments(parser) -> None:
    """``--device`` and ``--bf16`` on an argparse parser (the dataclass commands get them as fields)."""
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda (default: auto)")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast of the forward passes (CUDA only)")
