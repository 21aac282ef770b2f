"""SkillGate reproduction kit: selector credit starvation and the two-channel GRPO fix.

The library in wings along the pipeline (each module small, with one job):

* core: :mod:`~skillgate_lib.theory` (closed forms and their simulation), :mod:`~skillgate_lib.credit`
  (credit assigners), :mod:`~skillgate_lib.methods` (the registry every part reads),
  :mod:`~skillgate_lib.logs` (the run-artifact schema), :mod:`~skillgate_lib.plots`,
  :mod:`~skillgate_lib.paths`, :mod:`~skillgate_lib.seeding`, :mod:`~skillgate_lib.cli`,
  :mod:`~skillgate_lib.notebooks`
* :mod:`skillgate_lib.env`           the skill-slate environment, its skills, tokenizer and regimes
* :mod:`skillgate_lib.policy`        the model, its decoder, rollouts, gradients and warm start
* :mod:`skillgate_lib.runs`          training, evaluation, and studies of many runs
* :mod:`skillgate_lib.readers`       TRL, verl, NeMo-RL and plain-table logs as the kit's schema
* :mod:`skillgate_lib.audit`         Share / Sign / Value by horizon from any run's artifacts
* :mod:`skillgate_lib.report`        results read back without the trainer; the generated text of the docs
* :mod:`skillgate_lib.integrations`  SkillGate in TRL and verl

The design notes are ``docs/design.md``; the README's "Layout" lists every module.
"""

__version__ = "0.1.0"
