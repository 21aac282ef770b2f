"""SkillGate reproduction kit: selector credit starvation and the two-channel GRPO fix.

Modules (each small, each with one job):

* :mod:`skillgate_lib.theory`   closed forms for Share / Sign / Value and their Monte Carlo twin
* :mod:`skillgate_lib.skills`   SKILL.md parsing, skill libraries, 16-candidate slates
* :mod:`skillgate_lib.env`      the skill-slate task environment and its verifier
* :mod:`skillgate_lib.credit`   credit assigners (outcome, skillgate and baselines)
* :mod:`skillgate_lib.train`    SFT warm start + LoRA GRPO loop
* :mod:`skillgate_lib.logs`     the run-artifact schema, its writer and readers
* :mod:`skillgate_lib.readers`  TRL, verl, NeMo-RL and plain-table logs as that schema; bad input named
* :mod:`skillgate_lib.audit`    Share / Sign / Value by horizon from any run's artifacts
* :mod:`skillgate_lib.plots`    one figure style and one ``savefig``
"""

__version__ = "0.1.0"
