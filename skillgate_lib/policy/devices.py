"""Where the policy runs: ``--device auto|cpu|cuda`` and the optional bf16 autocast.

bf16 autocast runs the matmuls in bf16 and keeps the parameters (LoRA weights included), the
optimizer state, the loss and the log-probabilities in fp32 (autocast upcasts ``log_softmax``).
On the CPU it is allowed only where the CPU multiplies bf16 natively (the ``amx_bf16`` or
``avx512_bf16`` flag): elsewhere bf16 is emulated and slower than fp32. It pays at a pretrained
model's shapes (wide matmuls); the embedded tiny model is bound by per-call work and stays fp32.
The trainer samples its rollouts under the same autocast as its update, so the probabilities the
update starts from are those the tokens were drawn from, up to rounding; each step logs the
difference (``logp_gap``, the mean |log p_update - log p_sampler| over the policy tokens).

Sampling stays on the CPU's random stream whatever the device: the next-token probabilities
are moved to the CPU and drawn from the run's seeded ``torch.Generator`` there
(:func:`skillgate_lib.policy.rollout.generate`), so a seed names the same draws on every device, and
runs differ between devices only where the logits round differently.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

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


#: The CPU flags that mean native bf16 matmuls (Intel AMX, AVX-512 BF16).
NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")


def native_bf16_cpu(cpuinfo: str | Path = "/proc/cpuinfo") -> str | None:
    """The flag by which this CPU multiplies bf16 natively (:data:`NATIVE_BF16_FLAGS`), or None (also where
    ``cpuinfo`` cannot be read)."""
    try:
        flags = set(Path(cpuinfo).read_text().split())
    except OSError:
        return None
    return next((f for f in NATIVE_BF16_FLAGS if f in flags), None)


def bf16_pays(device: torch.device) -> bool:
    """Whether bf16 autocast speeds a wide model up on ``device``: a CUDA device with bf16, or a CPU with native
    bf16 matmuls (:data:`NATIVE_BF16_FLAGS`)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and native_bf16_cpu() is not None


def resolve_bf16(bf16: bool | None, device: torch.device | str, embedded: bool) -> bool:
    """The precision a run uses: ``--bf16`` / ``--no-bf16`` as given; unset (None), bf16 autocast for a pretrained
    model where it pays (:func:`bf16_pays`) and fp32 for the embedded tiny model (``embedded``), whose matmuls are
    too narrow for bf16 to pay and whose committed numbers are fp32."""
    if bf16 is not None:
        return bool(bf16)
    return not embedded and bf16_pays(resolve(device) if isinstance(device, str) else device)


def check_bf16(device: torch.device, bf16: bool) -> None:
    """Refuse bf16 autocast where it would not pay: on a CPU without native bf16 matmuls (emulated bf16 is slower
    than fp32), and on a device that is neither CPU nor CUDA."""
    if not bf16:
        return
    if device.type == "cpu" and native_bf16_cpu() is None:
        raise ValueError(f"bf16 autocast on {device}: this CPU has no native bf16 matmuls (none of the flags "
                         f"{', '.join(NATIVE_BF16_FLAGS)}), so bf16 would run slower than fp32; drop --bf16")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"bf16 autocast needs a CPU with native bf16 matmuls or a CUDA device; the run resolves to {device}")


def autocast(device: torch.device, bf16: bool):
    """A bf16 autocast context on ``device`` (CPU or CUDA) when ``bf16``, else a no-op (fp32 everywhere)."""
    if bf16 and device.type in ("cpu", "cuda"):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def frozen_weights_in_bf16(model) -> int:
    """Store ``model``'s frozen linear weights in bf16, once: what bf16 autocast casts them to on every forward
    (and again for the backward), so the numbers are the same bit for bit; it halves their memory and saves little
    time (a SmolLM2 update of 8 rows: 6.9 -> 6.6 s, ``benchmarks/bench_update_smollm2.py``). Trainable weights (LoRA), norms, biases and the input
    embeddings (which SmolLM2 ties to its head) stay fp32. Returns how many weights were cast.

    Only for a model that runs under :func:`autocast` from then on: a bf16 weight in a plain fp32 forward is an
    error, not a silent change."""
    embeddings = model.get_input_embeddings().weight
    cast = 0
    for module in model.modules():
        w = getattr(module, "weight", None)
        if (isinstance(module, torch.nn.Linear) and not w.requires_grad and w is not embeddings
                and w.dtype == torch.float32):
            module.weight.data = w.data.to(torch.bfloat16)
            cast += 1
    return cast


def precision_line(device: torch.device, bf16: bool) -> str:
    """Which precision a run computes in, as one line for its log."""
    if not bf16:
        return f"precision: fp32 on {device}"
    native = f", native bf16 matmuls ({native_bf16_cpu()})" if device.type == "cpu" else ""
    return (f"precision: bf16 autocast on {device}{native}; parameters, LoRA weights, optimizer state, loss and "
            "log-probabilities in fp32")


def add_device_arguments(parser) -> None:
    """``--device`` and ``--bf16`` on an argparse parser (the dataclass commands get them as fields)."""
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda (default: auto)")
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                        help="bf16 autocast of the forward passes (CUDA, or a CPU with native bf16 matmuls); "
                        "default: on for a pretrained model where bf16 pays, off for the embedded tiny model")


def keep_freed_memory() -> bool:
    """Ask glibc's allocator to keep freed memory for reuse instead of handing it back to the system at once.

    A pretrained model's update frees and reallocates gigabytes of activations every step; by
    default glibc returns large freed blocks to the kernel, and each step then pays page faults to
    zero them again (a LoRA warm start of SmolLM2 on this kind of machine spent two thirds of its CPU
    time in the kernel, about 25 s a step, against about 16 s with the settings below). Raises the
    trim threshold to 16 GiB, pads each heap growth by 1 GiB and serves blocks up to 32 MiB (the
    allocator's most) from the heap. Returns whether glibc took every setting (False elsewhere).
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
    return all(mallopt(k, v) == 1 for k, v in ((m_trim_threshold, 16 << 30), (m_top_pad, 1 << 30),
                                                 (m_mmap_threshold, 32 << 20)))
