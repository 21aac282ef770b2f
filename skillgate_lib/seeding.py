"""The one seeding helper every notebook, script and test uses."""

from __future__ import annotations

import random

import numpy as np


def seed_everything(seed: int) -> np.random.Generator:
    """Seed Python, NumPy and (if installed) PyTorch; return a fresh NumPy generator.

    CPU runs with the same seed give the same numbers. PyTorch is asked for
    deterministic kernels where they exist (``warn_only`` so that an op without a
    deterministic implementation warns instead of failing on GPU).
    """
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    try:
        import torch
    except ImportError:  # theory-only use needs no torch
        pass
    else:
        torch.manual_seed(seed)
        torch.use_deterministic_algorithms(True, warn_only=True)
    return np.random.default_rng(seed)


def stream_seed(*parts: int) -> int:
    """A 63-bit seed for the random stream identified by ``parts`` (e.g. (seed, step, purpose)).

    Every draw of training step ``s`` comes from streams seeded with ``(seed, s, ...)``, so
    a run resumed at step ``s`` draws exactly what the uninterrupted run drew.
    """
    return int(np.random.SeedSequence(list(parts)).generate_state(1, dtype=np.uint64)[0] >> 1)
