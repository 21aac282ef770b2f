"""A figure shows inline as it was saved: ``savefig`` (PNG at 150 dpi, then PDF) leaves its size and axes alone.

A legend wider than its panel once made constrained layout shrink the panels of figure 1 to
slivers on the redraw after ``savefig``, so the notebook showed a squashed figure while the PNG
on disk was fine.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from skillgate_lib import audit, paths, plots  # noqa: E402
from skillgate_lib.report import rates  # noqa: E402


def _layout(fig):
    fig.canvas.draw()
    return fig.get_size_inches().copy(), np.array([a.get_position().bounds for a in fig.axes])


def _check_unchanged_by_savefig(fig, tmp_path, name):
    size, boxes = _layout(fig)
    assert (boxes[:, 2] > 0.1).all() and (boxes[:, 3] > 0.1).all(), f"{name}: a panel is a sliver before saving"
    plots.savefig(name, fig, out_dir=tmp_path)
    size2, boxes2 = _layout(fig)
    assert np.allclose(size, size2), name
    # panel sizes keep to 1 % of the figure; positions may settle by a few % (an equal-aspect panel re-centres)
    assert np.allclose(boxes[:, 2:], boxes2[:, 2:], atol=0.01), f"{name}: panels resized after savefig\n{boxes}\n{boxes2}"
    assert np.allclose(boxes[:, :2], boxes2[:, :2], atol=0.03), f"{name}: panels moved after savefig\n{boxes}\n{boxes2}"


@pytest.fixture(scope="module")
def audited():
    return audit.run_audit(paths.DATA_DIR / "runs" / "audit" / "paper_echo_f30-outcome", split="train", n_boot=100,
                           seed=0)


@pytest.mark.parametrize("name", ["audit_summary", "audit_share", "audit_sign", "audit_value", "audit_reads"])
def test_the_audit_figures_are_the_same_inline_and_saved(audited, tmp_path, name):
    fig, _ = audit.figures(audited)[name]
    _check_unchanged_by_savefig(fig, tmp_path, name)


def test_the_rate_figure_is_the_same_inline_and_saved(tmp_path):
    table = rates.rate_table(rates.all_runs())
    _check_unchanged_by_savefig(rates.rate_figure(table), tmp_path, "rate_vs_dose")


def test_figure_7_is_the_same_inline_and_saved(tmp_path):
    from skillgate_lib.report import study, study_plots

    curves = study.validation_curves(paths.DATA_DIR / "runs" / "study" / "paper_note8")
    fig = study_plots.validation_curves_figure(curves[curves["seed"].isin([0, 1])])
    _check_unchanged_by_savefig(fig, tmp_path, "fig7_validation_curves")
