"""The regime choice from probes (report/regime_choice.py): each rule of the committed plan, and bad input named."""

from __future__ import annotations

import json

import pytest

from skillgate_lib.report import regime_choice as rc


def _probe(tmp_path, name, **over):
    r = {"regime": "paper", "step_failure": 0.15, "horizons": [1, 8], "success": 0.25, "value": 0.1, "value_lo": 0.05,
         "value_hi": 0.15, "gshare_median_long": 0.01, "sign_wrong_long": 0.3, **over}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(r))
    return path


def test_the_most_starved_eligible_probe_is_chosen_and_a_near_tie_goes_to_the_wronger_sign(tmp_path):
    paths = [_probe(tmp_path, "a", gshare_median_long=0.010, sign_wrong_long=0.2),
             _probe(tmp_path, "b", gshare_median_long=0.0105, sign_wrong_long=0.4),  # within 10 %: tied, wronger
             _probe(tmp_path, "c", gshare_median_long=0.002, value_lo=-0.01),  # the choice does not matter
             _probe(tmp_path, "d", gshare_median_long=0.001, success=0.02)]  # groups do not mix
    chosen, table = rc.judge(rc.load(paths))
    assert chosen == "b" and table["chosen"].sum() == 1
    assert list(table["eligible"]) == [True, True, False, False]
    paths[1] = _probe(tmp_path, "b", gshare_median_long=0.012, sign_wrong_long=0.4)  # no longer tied
    assert rc.judge(rc.load(paths))[0] == "a"


def test_none_is_chosen_when_no_probe_passes_and_the_file_says_so(tmp_path):
    paths = [_probe(tmp_path, "a", value_lo=0.0), _probe(tmp_path, "b", success=0.9)]
    out = tmp_path / "choice.md"
    assert rc.main(["--probes", *map(str, paths), "--write", str(out)]) == 0
    text = out.read_text()
    assert "None chosen" in text and "| `a` |" in text and "1. the choice must matter" in text


def test_a_file_that_is_not_a_probe_summary_is_named(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"success": 0.2}))
    with pytest.raises(ValueError, match="bad.json: field 'value_lo' missing"):
        rc.load([bad])
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ValueError, match="broken.json: not a probe summary"):
        rc.load([tmp_path / "broken.json"])
