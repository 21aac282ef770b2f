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
