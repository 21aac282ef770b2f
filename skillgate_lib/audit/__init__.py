"""Audit a GRPO run's logs for selector credit starvation: Share, Sign, Value by horizon.

Usage::

    python -m skillgate_lib audit PATH [--format auto|kit|trl|verl|nemo|table] [--tasks META]
                                       [--skip-bad] [--out DIR] [--split train|eval|all] ...

``PATH`` is a kit run directory, a TRL ``output_dir`` (or its ``completions/``), a verl
``rollout_data_dir``, a NeMo-RL log directory holding ``train_data_step<N>.jsonl``, or a
plain Parquet/JSONL table (file or directory) in the trajectory schema of
:mod:`skillgate_lib.logs`. External logs are first turned into that table by
:mod:`skillgate_lib.readers` (one step file at a time, staged as Parquet in a temporary
directory); Parquet parts are checked file by file before DuckDB scans them. The input
is only ever read: nothing is written under PATH, and ``--out`` may not lie inside it.

Bad input (a truncated or corrupt file, an empty one, a stray file, a column missing or
of the wrong type, a corrupt line, a bad value) stops the audit with an error naming the
file, the line or row and the field, and what was expected; ``--skip-bad`` skips it and
the report counts what was skipped by reason. Without skill categories (an external log
read without ``--tasks``) the audit reports Share, read counts and advantage signs, and
says once that Sign and Value need ``--tasks``.

**Engine: DuckDB** (:mod:`~skillgate_lib.audit.engine`, which says why): every aggregate
below is one vectorised query over the staged Parquet parts, out of core.

Measures, per horizon bin (horizon = logged steps H when every row has one, else response
tokens; bins are the distinct values when there are at most ``n_bins`` of them, else
quantile bins):

* **Share** ``sel_weight`` as logged (kit, NeMo-RL), else ``k / L`` (k = selector tokens,
  L = response tokens): median, IQR, mean; the dilution ratio = median of the shortest bin
  / median of the longest;
* **Gradient Share** ``grad_weight_sel / grad_weight_all`` where the log holds them (kit runs, from the
  sampling logits; :mod:`skillgate_lib.policy.gradients`): the name tokens' share of the summed logit-gradient
  norms, i.e. of what the update sees rather than of the loss weight; median and IQR by bin, its
  dilution, and the predicted selector-signal ratio SkillGate / outcome-only
  ``(lambda / (1 + lambda)) / (Value x Share)`` from either Share;
* **Sign** over read actions, using each read's applied advantage ``read_adv``: fraction
  negative, fraction zero, and fraction wrong-signed among nonzero (an oracle read with
  A < 0 or a non-oracle read with A > 0);
* **Value** within each prompt group (step, split, group_id) that holds both a trajectory
  that read the oracle and one that read only other skills: success rate of the first
  minus the second; averaged over groups, with a percentile bootstrap over groups. The
  bootstrap resamples groups exactly, as a multinomial over the distinct group
  differences (few, since successes are 0/1 and groups small), so it costs O(distinct)
  not O(groups) per replicate;
* **reads**: oracle-read rate and misleading-read rate (fraction of trials reading at
  least one such skill), reads per trial, success rate.

Each measure gets a Spearman trend against the bins' mean horizon with an exact
permutation p-value (Monte Carlo beyond 8 bins) and a verdict
(:func:`~skillgate_lib.audit.stats.trend_verdict`, the one rule every printout uses):
"no trend" unless p <= alpha (default 0.05), else "worsens" or "improves", "monotonically"
where every bin moves that way. The theory model (:func:`skillgate_lib.theory.fit_model`) is fitted to the
log's oracle reads, horizons and successes and its curves overlaid.

The package, one job per module: :mod:`~skillgate_lib.audit.engine` (staging, checks,
DuckDB), :mod:`~skillgate_lib.audit.stats` (quantiles, bootstrap, trend test),
:mod:`~skillgate_lib.audit.fit` (the theory overlay), :mod:`~skillgate_lib.audit.measures`
(:func:`run_audit`, :class:`AuditResult`), :mod:`~skillgate_lib.audit.figures`,
:mod:`~skillgate_lib.audit.synthetic` (a synthetic log from the theory model),
:mod:`~skillgate_lib.audit.printout` (the text report) and :mod:`~skillgate_lib.audit.cli`
(the command line).
"""

from skillgate_lib.audit.cli import categories_note, main, report
from skillgate_lib.audit.engine import FORMATS, Engine, Unreadable, open_log
from skillgate_lib.audit.figures import figures, shares_figure
from skillgate_lib.audit.fit import fit_theory, theory_curves
from skillgate_lib.audit.measures import BY_CATEGORY, TRENDS, AuditResult, run_audit, side_by_side
from skillgate_lib.audit.stats import (ALPHA, bootstrap_mean, spearman_trend, t_interval, trend_verdict,
                                        weighted_quantiles)
from skillgate_lib.audit.synthetic import write_synthetic_log
from skillgate_lib.readers import detect_format

__all__ = ["ALPHA", "AuditResult", "BY_CATEGORY", "Engine", "FORMATS", "TRENDS", "Unreadable", "bootstrap_mean",
           "categories_note", "detect_format", "figures", "fit_theory", "main", "open_log", "report", "run_audit",
           "shares_figure", "side_by_side", "spearman_trend", "t_interval", "theory_curves", "trend_verdict",
           "weighted_quantiles", "write_synthetic_log"]
