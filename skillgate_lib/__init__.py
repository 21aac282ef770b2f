"""SkillGate reproduction kit: selector credit starvation and the two-channel GRPO fix.

Modules (each small, each with one job):

* :mod:`skillgate_lib.theory`   closed forms for Share / Sign / Value and their Monte Carlo twin
* :mod:`skillgate_lib.skills`   SKILL.md parsing, skill libraries, 16-candidate slates
* :mod:`skillgate_lib.env`      the skill-slate task environment and its verifier
* :mod:`skillgate_lib.methods`  the registry of methods every part of the kit reads
* :mod:`skillgate_lib.credit`   credit assigners (outcome, skillgate and baselines)
* :mod:`skillgate_lib.train`    LoRA GRPO loop (and :mod:`~skillgate_lib.warmstart`, the SFT warm start)
* :mod:`skillgate_lib.compare`  every method x seed with one budget
* :mod:`skillgate_lib.logs`     the run-artifact schema, its writer and readers
* :mod:`skillgate_lib.results`  a comparison's runs read back, without the trainer
* :mod:`skillgate_lib.readers`  TRL, verl, NeMo-RL and plain-table logs as that schema; bad input named
* :mod:`skillgate_lib.audit`    Share / Sign / Value by horizon from any run's artifacts
* :mod:`skillgate_lib.report`   the results table and the numbers behind notebook 04
* :mod:`skillgate_lib.plots`    one figure style and one ``savefig``

The design notes are ``docs/design.md``; the README's "Layout" lists every module.
"""

__version__ = "0.1.0"
