"""Every word the generated verdict uses is backed by an interval that supports it."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pandas as pd
import pytest

from skillgate_lib import paths
from skillgate_lib.report import docs, rates


def _study_row(ratio, diff):
    (r, rlo, rhi), (d, dlo, dhi) = ratio, diff
    return SimpleNamespace(ratio=r, ratio_lo=rlo, ratio_hi=rhi, diff=d, diff_lo=dlo, diff_hi=dhi)


@pytest.mark.parametrize("ratio, diff, word", [
    ((1.7, 1.4, 2.1), (0.05, 0.02, 0.07), "faster"),
    ((1.4, 1.01, 1.8), (0.02, -0.002, 0.05), "not shown faster"),   # the ratio clears 1, the paired difference not
    ((1.2, 0.8, 1.6), (0.01, -0.01, 0.03), "not shown faster"),
    ((0.6, 0.4, 0.8), (-0.02, -0.03, -0.01), "slower"),
])
def test_faster_needs_both_the_ratio_and_the_paired_difference(ratio, diff, word):
    assert rates.faster_word(_study_row(ratio, diff)) == word


def test_the_success_sentence_counts_intervals_and_says_not_shown():
    rows = pd.DataFrame({"regime": ["a", "b", "c", "d"], "diff": [-1.0, -5.0, 2.0, 3.0],
                         "lo": [-2.0, -8.0, -1.0, 1.0], "hi": [0.5, -2.0, 9.0, 5.0],
                         "searched": [True, False, False, True]})
    text = docs.success_sentence(rows)
    assert "above outcome-only's in 1 of 4 regimes (`d`)" in text and "below in 1 " in text
    assert "covers 0 in 2 (not shown either way; up to +9.0 pp)" in text
    assert "2 of them reused another regime's search" in text


def test_the_committed_verdict_never_says_level_without_its_margin_nor_no_faster():
    readme = (paths.REPO_ROOT / "README.md").read_text()
    verdict = re.search(r"<!-- generated: verdict -->\n(.*?)<!-- end generated -->", readme, re.S).group(1)
    flat = " ".join(verdict.split())
    assert not re.search(r"\blevel\b(?! within)", flat), flat
    assert "no faster" not in flat and "no more often" not in flat
    # the rule that picks the rated regimes is flagged where it leaves one out; where every regime passes it the
    # verdict says so instead
    assert "set after the first results" in flat or re.search(r"learns the choice in 30 steps in all \d+ regimes", flat)
