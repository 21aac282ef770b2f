"""The run-artifact writer and the kit reader round-trip and reject bad rows."""

from __future__ import annotations

import json

import pytest

from skillgate_lib import logs


def _row(**over):
    row = dict(step=1, split="train", group_id="g0", rollout=0, task_id="t0", domain="ledger", horizon=3,
               response_tokens=20, reward=1.0, success=True, read_skills=["a"], read_categories=["oracle"],
               read_tok_start=[1], read_tok_end=[2], adv_exec=0.5, read_adv=[0.5], sel_weight=0.05,
               credit="outcome")
    row.update(over)
    return row


def test_round_trip(tmp_path):
    w = logs.RunWriter(tmp_path / "run")
    w.write_config({"seed": 3})
    w.log_metrics({"step": 1, "loss": 0.1})
    w.log_metrics({"step": 2, "loss": float("nan")})
    w.write_trajectories([_row(), _row(rollout=1, read_skills=[], read_categories=[], read_tok_start=[],
                                       read_tok_end=[], read_adv=[], sel_weight=0.0)], step=1, split="train")
    df = logs.read_run(tmp_path / "run")
    assert len(df) == 2 and df.loc[0, "read_skills"] == ["a"] and df.loc[1, "read_skills"] == []
    assert logs.read_config(tmp_path / "run")["versions"]["torch"]
    m = logs.read_metrics(tmp_path / "run")
    assert m["loss"].isna().tolist() == [False, True]
    w.truncate_metrics(after_step=1)
    assert logs.read_metrics(tmp_path / "run")["step"].tolist() == [1]


@pytest.mark.parametrize(
    "over, field",
    [
        (dict(read_adv=[]), "read_adv"),
        (dict(read_categories=["oracel"]), "read_categories"),
        (dict(read_tok_start=[3], read_tok_end=[3]), "read_tok_start"),
        (dict(sel_weight=1.5), "sel_weight"),
        (dict(response_tokens=0), "response_tokens"),
    ],
)
def test_bad_rows_name_the_field(tmp_path, over, field):
    with pytest.raises(logs.ArtifactError, match=field):
        logs.RunWriter(tmp_path).write_trajectories([_row(**over)], step=1, split="train")


def test_corrupt_metrics_line_is_named(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1}) + "\n{oops\n")
    with pytest.raises(logs.ArtifactError, match="line 2"):
        logs.read_metrics(tmp_path)
