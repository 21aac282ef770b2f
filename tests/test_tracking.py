"""skillgate_lib.runs.tracking: metrics rows mirrored to TensorBoard, as ``<split>/<field>`` at the row's step."""

from __future__ import annotations

import importlib.util

import pytest

from skillgate_lib.runs import tracking


def test_scalars_keep_finite_numbers_under_their_split():
    row = {"step": 3, "split": "eval", "reward": 0.5, "n": 4, "ok": True, "name": "x", "lost": float("nan"), "xs": [1]}
    assert tracking.scalars(row) == {"eval/reward": 0.5, "eval/n": 4.0}
    assert tracking.scalars({"step": 1, "loss": 2}) == {"train/loss": 2.0}


def test_fields_named_under_their_split_are_not_prefixed_twice():
    """The kit's trainer logs ``train/success`` and ``eval/success``: the tags are those names, not ``train/train/...``."""
    row = {"step": 5, "split": "eval", "eval/success": 0.5, "eval/oracle_read": 0.25, "train/loss": 1.0}
    assert tracking.scalars(row) == {"eval/success": 0.5, "eval/oracle_read": 0.25, "eval/train/loss": 1.0}
    assert tracking.scalars({"step": 1, "train/success": 1}) == {"train/success": 1.0}


def test_unknown_or_missing_tracker_is_a_clear_error(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="report_to 'mlflow': expected some of tensorboard, wandb, trackio"):
        tracking.Tracker(tmp_path, ["mlflow"])
    monkeypatch.setattr(tracking.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match="report_to 'wandb' needs the wandb package: pip install wandb"):
        tracking.Tracker(tmp_path, ["wandb"])
    tracking.Tracker(tmp_path, ["none"]).log({"step": 0, "reward": 1.0})  # no tracker: nothing to do


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None, reason="tensorboard not installed (scale extra)")
def test_tensorboard_receives_each_row(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    t = tracking.Tracker(tmp_path, ["tensorboard"])
    for step, r in ((0, 0.25), (1, 0.5)):
        t.log({"step": step, "split": "train", "reward": r})
    t.log({"step": 1, "split": "eval", "success": 0.75})
    t.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == ["eval/success", "train/reward"]
    assert [(e.step, e.value) for e in events.Scalars("train/reward")] == [(0, 0.25), (1, 0.5)]


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None, reason="tensorboard not installed (scale extra)")
def test_tracked_run_writer_logs_both(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from skillgate_lib import logs

    writer = tracking.TrackedRunWriter(tmp_path, ["tensorboard"])
    writer.log_metrics({"step": 2, "split": "train", "reward": 0.5})
    writer.tracker.close()
    assert logs.read_metrics(tmp_path)["reward"].tolist() == [0.5]
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/reward")] == [(2, 0.5)]
