"""Experiment trackers beside ``metrics.jsonl``: TensorBoard, and W&B or trackio where installed.

``metrics.jsonl`` stays the run's record (analysis reads only it); a :class:`Tracker`
mirrors each metrics row to the dashboards engine users expect, and
:class:`TrackedRunWriter` is a :class:`~skillgate_lib.logs.RunWriter` that does so on
every ``log_metrics``. One row is one
``log_metrics`` call of :class:`skillgate_lib.logs.RunWriter`: its ``step``, its ``split``
(a row without one is ``train``) and numeric fields, written as ``<split>/<field>`` at
that step (a field already named ``<split>/...`` as it is); text, lists and non-finite numbers are left to the JSONL file.

==============  ================================================  ===========================
``report_to``   writes                                            needs
==============  ================================================  ===========================
``tensorboard`` ``<run_dir>/tensorboard/`` event files            ``tensorboard`` (``scale``)
``wandb``       an offline run under ``<run_dir>/wandb/``         ``wandb`` (``WANDB_MODE``
                                                                  overrides ``offline``)
``trackio``     a local trackio project ``skillgate``             ``trackio``
==============  ================================================  ===========================
"""

from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from skillgate_lib.logs import RunWriter

BACKENDS = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio"}
"""``report_to`` name -> the package it needs."""


def scalars(row: Mapping[str, Any]) -> dict[str, float]:
    """A metrics row's finite numbers as ``<split>/<field>`` (``step`` and ``split`` themselves excluded).

    A field already named under its split (the kit's trainer logs ``eval/success`` in an ``eval``
    row) keeps its name: the tag is ``eval/success``, never ``eval/eval/success``.
    """
    split = row.get("split") or "train"
    out = {}
    for key, value in row.items():
        if key in ("step", "split") or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if math.isfinite(value):
            out[key if key.startswith(f"{split}/") else f"{split}/{key}"] = float(value)
    return out


class Tracker:
    """Mirror metrics rows to the trackers named in ``report_to`` (empty or ``("none",)``: none).

    ``run_dir``: the run directory (trackers write under it); ``config``: the run's settings,
    given to W&B / trackio as the run config. An unknown name, or a tracker whose package is
    missing, is an error naming what to install.
    """

    def __init__(self, run_dir: str | Path, report_to: Sequence[str] = (), config: Mapping[str, Any] | None = None):
        self.run_dir = Path(run_dir)
        names = [n for n in report_to if n != "none"]
        unknown = [n for n in names if n not in BACKENDS]
        if unknown:
            raise ValueError(f"report_to {unknown[0]!r}: expected some of {', '.join(BACKENDS)} (or none)")
        missing = [n for n in names if importlib.util.find_spec(BACKENDS[n]) is None]
        if missing:
            raise ModuleNotFoundError(f"report_to {missing[0]!r} needs the {BACKENDS[missing[0]]} package: "
                                      f"pip install {BACKENDS[missing[0]]} (tensorboard is in the scale extra)")
        self._writers: list[Any] = []
        if "tensorboard" in names:
            from torch.utils.tensorboard import SummaryWriter

            self._writers.append(SummaryWriter(log_dir=str(self.run_dir / "tensorboard")))
        for name in ("wandb", "trackio"):
            if name in names:
                module = importlib.import_module(name)
                kwargs = {"dir": str(self.run_dir), "mode": os.environ.get("WANDB_MODE", "offline")} if name == "wandb" else {}
                module.init(project="skillgate", name=self.run_dir.name, config=dict(config or {}), **kwargs)
                self._writers.append(module)

    def log(self, row: Mapping[str, Any]) -> None:
        """Mirror one metrics row (needs ``step``)."""
        values, step = scalars(row), int(row["step"])
        for w in self._writers:
            if hasattr(w, "add_scalar"):
                for key, value in values.items():
                    w.add_scalar(key, value, global_step=step)
                w.flush()
            else:
                w.log(values, step=step)

    def close(self) -> None:
        for w in self._writers:
            w.close() if hasattr(w, "add_scalar") else w.finish()
        self._writers = []


class TrackedRunWriter(RunWriter):
    """A :class:`~skillgate_lib.logs.RunWriter` whose metrics rows also go to the trackers in ``report_to``.

    A resumed run re-logs the steps after its checkpoint: ``metrics.jsonl`` is truncated
    first, a tracker keeps both points.
    """

    def __init__(self, run_dir: str | Path, report_to: Sequence[str] = (), config: Mapping[str, Any] | None = None):
        super().__init__(run_dir)
        self.tracker = Tracker(run_dir, report_to, config)

    def log_metrics(self, row: Mapping[str, Any]) -> None:
        super().log_metrics(row)
        self.tracker.log(row)
