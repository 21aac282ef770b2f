"""The theory overlay: :class:`skillgate_lib.theory.StarvationModel` fitted to an audited log, and its curves."""

from __future__ import annotations

import numpy as np
import pandas as pd

from skillgate_lib import theory
from skillgate_lib.audit.engine import Engine


def fit_theory(eng: Engine) -> tuple[theory.StarvationModel | None, str]:
    """The model fitted to the log's oracle reads, horizons and successes, and a one-line note (why not, if None)."""
    if not eng.categorised:
        return None, "no theory overlay: the model is fitted to oracle reads, which need skill categories"
    if eng.horizon_kind != "steps":
        return None, "no theory overlay: the log has no step horizon (the model is in steps)"
    counts, lengths = eng.fit_inputs()
    if counts.empty or counts["c"].sum() == 0 or pd.isna(lengths["k_read"]):
        return None, "no theory overlay: the log has no read to fit (a policy that stopped reading, say)"
    # The likelihood depends on the data through these counts only, so scaling them down to
    # at most 2M rollouts keeps the fit (to rounding) and bounds memory.
    c = counts["c"].to_numpy()
    c = np.maximum(1, np.round(c * min(1.0, 2e6 / c.sum()))).astype(int)
    k = max(1, int(round(lengths["k_read"] or 1)))
    slope = lengths["slope"] if pd.notna(lengths["slope"]) else 0.0
    icpt = lengths["icpt"] if pd.notna(lengths["icpt"]) else k
    try:
        model = theory.fit_model(
            np.repeat(counts["o"].to_numpy(bool), c), np.repeat(counts["h"].to_numpy(np.int64), c),
            np.repeat(counts["s"].to_numpy(int), c).astype(bool),
            group_size=max(2, int(lengths["group_size"])), selector_tokens=k,
            base_tokens=max(0, int(round(icpt - k))), tokens_per_step=max(0, int(round(slope))))
    except ValueError as err:
        return None, f"no theory overlay: {err}"
    return model, (f"fitted theory: p_oracle={model.p_oracle:.3f} q_step={model.q_step:.3f} s_wrong={model.s_wrong:.3f} "
                   f"G={model.group_size} k={model.selector_tokens} L(H)={model.selector_tokens + model.base_tokens}"
                   f"+{model.tokens_per_step}H")


def theory_curves(model: theory.StarvationModel, h_min: float, h_max: float, n: int = 50) -> pd.DataFrame:
    """The fitted model's predictions on ``n`` horizons from ``h_min`` to ``h_max`` (the audit's overlay)."""
    grid = np.linspace(h_min, h_max, n)
    return pd.DataFrame({"horizon": grid, "share": model.share(grid), "sign_error": model.sign_error(grid),
                         "value": model.value(grid), "zero_credit": model.zero_credit(grid),
                         "oracle_read": np.full_like(grid, model.p_oracle), "success": model.success(grid)})
