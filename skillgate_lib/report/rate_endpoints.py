"""Where the rate study's two arms end: SkillGate minus outcome-only after the last step, paired by seed.

The rate study's primary measure is a speed (:mod:`skillgate_lib.report.rates`); a faster arm can still end
level. Per study, at each arm's chosen step size, the paired differences (SkillGate - outcome-only, the same
seed) after the last step, with Student-t intervals over the seed pairs, in percentage points: validation
success, oracle-read and, where the runs logged it, the choice (the last evaluation, 256 validation
instances), and success and oracle-read on the test set (512 instances, ``test.json``). An interval that
covers 0 is "not shown" to differ.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from skillgate_lib.audit.stats import t_interval
from skillgate_lib.report.rates import paired_arms

#: Run-table column -> what it measures, in the order they are shown.
ENDPOINTS = {"val_success_final": "validation success", "val_oracle_read_final": "validation oracle-read",
             "val_choice_final": "validation choice", "test_success": "test success",
             "test_oracle_read": "test oracle-read"}


def endpoint_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per study and endpoint: the seed pairs, each arm's mean and the paired difference with its
    t-interval (all in percentage points); endpoints a study did not log are left out."""
    rows = []
    for study, g, o, s in paired_arms(runs):
        for col, label in ENDPOINTS.items():
            if col not in g or o[col].isna().any() or s[col].isna().any():
                continue
            d, lo, hi = t_interval(100 * (s[col].to_numpy() - o[col].to_numpy()))
            rows.append({"study": study, "endpoint": label, "seeds": len(o), "outcome": 100 * o[col].mean(),
                         "skillgate": 100 * s[col].mean(), "diff": d, "diff_lo": lo, "diff_hi": hi,
                         "shown": "SkillGate higher" if lo > 0 else "SkillGate lower" if hi < 0 else "not shown"})
    return pd.DataFrame(rows)


def display_endpoints(table: pd.DataFrame, endpoints: tuple[str, ...] = ("validation success", "test success",
                                                                           "test oracle-read")) -> pd.DataFrame:
    """Studies as rows, one column per endpoint: the paired difference and its interval, as text."""
    t = table[table["endpoint"].isin(endpoints)]
    text = t.assign(cell=[f"{r.diff:+.1f} [{r.diff_lo:+.1f}, {r.diff_hi:+.1f}]" if math.isfinite(r.diff_lo) else "–"
                          for r in t.itertuples()])
    out = text.pivot(index="study", columns="endpoint", values="cell")
    return out[[e for e in endpoints if e in out.columns]].rename(columns=lambda e: f"{e}, pp (SkillGate - outcome)")


def count_shown(table: pd.DataFrame, endpoint: str) -> dict[str, int]:
    """How many studies' intervals for ``endpoint`` lie above 0, below 0, or cover it."""
    t = table[table["endpoint"] == endpoint]
    return {word: int(np.sum(t["shown"] == word)) for word in ("SkillGate higher", "SkillGate lower", "not shown")}


def endpoint_sentence(table: pd.DataFrame) -> str:
    """The test-set endpoints in words: per endpoint, in how many studies SkillGate ends higher, lower, or not
    shown to differ, with the range of the paired differences."""
    parts = []
    for endpoint in ("test success", "test oracle-read"):
        t = table[table["endpoint"] == endpoint]
        if t.empty:
            continue
        n = count_shown(table, endpoint)
        parts.append(f"in {endpoint} SkillGate ends higher in {n['SkillGate higher']}, lower in {n['SkillGate lower']} "
                     f"and not shown to differ in {n['not shown']} of {len(t)} studies (paired differences "
                     f"{t['diff'].min():+.1f} to {t['diff'].max():+.1f} pp)")
    return ("After the last step, on the test set: " + "; ".join(parts) + ".") if parts else "No study has test records."
