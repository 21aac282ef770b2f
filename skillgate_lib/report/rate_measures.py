"""The rate study under each of its measures, side by side: the slope of logit(validation oracle-read), the first
studies' primary measure, and the slope of logit(validation choice), the teacher-forced P(oracle | slate) that
replaced it (:data:`skillgate_lib.report.rates.MEASURES`). Where a study's runs logged both (every study planned
or re-run since the choice was logged), each arm's slopes and the speed ratio can be read under either."""

from __future__ import annotations

import pandas as pd

from skillgate_lib.audit.stats import t_interval
from skillgate_lib.report.rates import MEASURE_COLUMNS, faster_word, rate_table


def measures_side_by_side(runs: pd.DataFrame, studies: list[str]) -> pd.DataFrame:
    """Per study and arm, at the arm's chosen step size: the mean slope of each measure of :data:`MEASURES` with its
    Student-t interval over seeds (``<measure>``, ``<measure>_lo``, ``<measure>_hi``) and the validation oracle-read
    at step 0 and at the end; for studies whose runs logged both measures."""
    rows = []
    chosen = runs[runs["chosen"] & runs["study"].isin(studies)]
    for (study, method), g in chosen.groupby(["study", "method"], sort=True):
        row = {"study": study, "arm": method, "seeds": int(g["seed"].nunique()),
               "oracle_read_0": float(g["val_oracle_read_0"].mean()), "oracle_read_end": float(g["val_oracle_read_final"].mean())}
        for key, col in MEASURE_COLUMNS.items():
            row[key], row[f"{key}_lo"], row[f"{key}_hi"] = t_interval(g[col].to_numpy(dtype=float))
        rows.append(row)
    return pd.DataFrame(rows)


def display_measures(side: pd.DataFrame) -> pd.DataFrame:
    """:func:`measures_side_by_side` as text: each slope in logit per step with its interval, oracle-read in %."""
    def ci(r, key):
        return f"{getattr(r, key):+.3f} [{getattr(r, key + '_lo'):+.3f}, {getattr(r, key + '_hi'):+.3f}]"

    return pd.DataFrame([{"study": r.study, "arm": r.arm, "seeds": r.seeds,
                          "slope of logit(oracle-read)": ci(r, "oracle"), "slope of logit(choice)": ci(r, "choice"),
                          "oracle-read, step 0 -> end": f"{100 * r.oracle_read_0:.0f} -> {100 * r.oracle_read_end:.0f} %"}
                         for r in side.itertuples()]).set_index(["study", "arm"])


def logged_both(runs: pd.DataFrame) -> list[str]:
    """The studies every one of whose runs logged both measures (the choice beside the oracle-read), sorted."""
    return [study for study, g in runs.groupby("study", sort=True) if g["slope_choice"].notna().all()]


def ratios_under_each_measure(runs: pd.DataFrame, studies: list[str]) -> pd.DataFrame:
    """Per study, the speed ratio SkillGate / outcome-only (BCa interval over the seed pairs) and the paired slope
    difference (t-interval) under each measure, at the step sizes the study chose (under its plan's measure), with
    :func:`skillgate_lib.report.rates.faster_word`'s verdict under each."""
    rows = {}
    for key, col in MEASURE_COLUMNS.items():
        sub = runs[runs["study"].isin(studies)].assign(slope_primary=lambda r, c=col: r[c], measure=key)
        for r in rate_table(sub, probes_dir=None, proxy_csv=None).itertuples():
            row = rows.setdefault(r.study, {"study": r.study, "seeds": r.seeds})
            row.update({f"ratio_{key}": r.ratio_all, f"ratio_{key}_lo": r.ratio_all_lo, f"ratio_{key}_hi": r.ratio_all_hi,
                        f"diff_{key}": r.diff, f"diff_{key}_lo": r.diff_lo, f"diff_{key}_hi": r.diff_hi,
                        f"outcome_learns_{key}": r.outcome_learns, f"word_{key}": faster_word(r)})
    return pd.DataFrame(list(rows.values()))


def display_ratios(table: pd.DataFrame) -> pd.DataFrame:
    """:func:`ratios_under_each_measure` as text, one column per measure."""
    def cell(r, key):
        if not getattr(r, f"outcome_learns_{key}"):
            return "– (outcome-only does not learn)"
        return (f"{getattr(r, f'ratio_{key}'):.2f} [{getattr(r, f'ratio_{key}_lo'):.2f}, {getattr(r, f'ratio_{key}_hi'):.2f}]: "
                f"{getattr(r, f'word_{key}')}")

    return pd.DataFrame([{"study": r.study, "seeds": r.seeds, "ratio under oracle-read": cell(r, "oracle"),
                          "ratio under the choice": cell(r, "choice")} for r in table.itertuples()]).set_index("study")
