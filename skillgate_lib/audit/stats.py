"""The audit's statistics: weighted quantiles, a bootstrap over distinct values, a permutation trend test.

Pure NumPy on small inputs (distinct values with counts, one point per horizon bin): the
engine aggregates the log first, so these never see a row of it.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Sequence

import numpy as np
import pandas as pd


def weighted_quantiles(values: np.ndarray, counts: np.ndarray, qs: Sequence[float]) -> list[float]:
    """Quantiles (linear interpolation, as numpy's default) of a sample given as sorted distinct values with counts."""
    cum = np.cumsum(counts)
    n = int(cum[-1])
    out = []
    for q in qs:
        i = q * (n - 1)
        lo, hi = (values[np.searchsorted(cum, j, side="right")] for j in (math.floor(i), math.ceil(i)))
        out.append(float(lo + (i - math.floor(i)) * (hi - lo)))
    return out


def bootstrap_mean(values: np.ndarray, counts: np.ndarray, n_boot: int, rng: np.random.Generator,
                   level: float = 0.95) -> tuple[float, float, float]:
    """Mean of a sample given as distinct ``values`` with ``counts``, and its percentile bootstrap CI.

    Resampling n units with replacement is a multinomial draw over the distinct values,
    so this equals the ordinary bootstrap in distribution at O(n_boot x distinct) cost.
    """
    n = int(counts.sum())
    if n == 0:
        return math.nan, math.nan, math.nan
    mean = float(values @ counts / n)
    draws = rng.multinomial(n, counts / n, size=n_boot) @ values / n
    lo, hi = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return mean, float(lo), float(hi)


def t_interval(x: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """Mean of ``x`` (one value per seed, or per seed pair) and its Student-t interval.

    Over a handful of seeds a percentile bootstrap understates the interval (it cannot see
    beyond the values drawn); the t-interval widens with ``1 / sqrt(n)`` and the t quantile.
    nan bounds for fewer than two values; a zero-width interval when every value is equal.
    """
    from scipy import stats

    x = np.asarray(x, dtype=float)
    x = x[~np.isnan(x)]
    if len(x) == 0:
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if len(x) < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf((1 + level) / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return mean, mean - half, mean + half


#: The significance level of the trend test: a measure "worsens" or "improves" only where p <= ALPHA.
ALPHA = 0.05


def trend_verdict(rho: float, p_value: float, worse: str, monotone: bool = False, alpha: float = ALPHA) -> str:
    """The trend label, the one rule every printout of a trend uses: ``"no trend"`` unless the permutation
    ``p_value <= alpha`` (and rho is nonzero); else ``"worsens"`` or ``"improves"``, by the sign of ``rho``
    against ``worse`` (``"up"`` or ``"down"``, the direction in which the measure gets worse), with
    ``" monotonically"`` where ``monotone`` (every step between consecutive bins moves strictly in rho's
    direction). A nan p-value (too few points) is ``"no trend"`` too."""
    if worse not in ("up", "down"):
        raise ValueError(f"worse must be 'up' or 'down', got {worse!r}")
    if not (p_value <= alpha) or not rho or math.isnan(rho):
        return "no trend"
    word = "worsens" if (rho > 0) == (worse == "up") else "improves"
    return f"{word} monotonically" if monotone else word


def spearman_trend(x: np.ndarray, y: np.ndarray, worse: str, rng: np.random.Generator,
                   n_perm: int = 20000, alpha: float = ALPHA) -> dict[str, Any]:
    """Spearman rho of ``y`` on ``x``, a two-sided permutation p-value and its label (:func:`trend_verdict`).

    ``worse`` is ``"up"`` or ``"down"``: the direction in which the measure gets worse.
    The p-value is exact (all permutations) for up to 8 points, else Monte Carlo with
    ``n_perm`` permutations. ``monotone`` means every step between consecutive bins moves
    strictly in the direction of rho (a worsening or an improving run of steps).
    """
    ok = ~(np.isnan(x) | np.isnan(y))
    x, y = x[ok], y[ok]
    n = len(x)
    out = {"n_bins": n, "rho": math.nan, "p_value": math.nan, "monotone": False, "verdict": "too few bins"}
    if n < 3:
        return out
    rx = pd.Series(x).rank().to_numpy()
    ry = pd.Series(y).rank().to_numpy()
    if np.std(ry) == 0:
        return {**out, "rho": 0.0, "p_value": 1.0, "verdict": trend_verdict(0.0, 1.0, worse, alpha=alpha)}

    def rho(a: np.ndarray) -> np.ndarray:
        a = a - a.mean(axis=-1, keepdims=True)
        b = rx - rx.mean()
        return (a @ b) / np.sqrt((a**2).sum(-1) * (b**2).sum())

    r = float(rho(ry))
    perms = (np.array(list(itertools.permutations(range(n)))) if n <= 8
             else np.argsort(rng.random((n_perm, n)), axis=1))
    null = rho(ry[perms])
    p = float(np.mean(np.abs(null) >= abs(r) - 1e-12))
    steps = np.diff(y[np.argsort(x)])
    monotone = bool(r != 0 and np.all(np.sign(r) * steps > 0))
    return {"n_bins": n, "rho": r, "p_value": p, "monotone": monotone,
            "verdict": trend_verdict(r, p, worse, monotone, alpha)}
