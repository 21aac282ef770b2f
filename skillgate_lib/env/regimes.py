"""Environment regimes: named settings of the knobs that decide whether the selector starves.

Selector credit starvation is a property of the regime, not of the method. The theory
(:mod:`skillgate_lib.theory`) says outcome-only GRPO's selector signal is about
``Value x Share`` with wrong-signed credit eating into it; three knobs of the embedded
environment move those measures without touching what the policy has to learn:

=======================  ================================================================
knob                     what it moves
=======================  ================================================================
``step_failure``         execution noise not caused by selection: each step fails with this
                         probability, in training *and* evaluation. Oracle reads fail too,
                         so their outcome advantage turns negative (Sign grows with H).
``lookalike_agreement``  success without the oracle: two variants of a family agree on this
                         fraction of keys, so a misleading read succeeds while its chain stays
                         on shared keys (about ``agreement ** H``). Value shrinks.
``horizons``             execution length per read: more step lines after the read, so the
                         name's share of the trajectory's tokens (Share) falls.
``step_echo``            policy tokens per step line: each line restates the task (less its
                         cue) this many times (9 tokens each), as an agent's steps carry
                         restated context and call syntax; Share falls about 1 / H faster.
                         The policy is sure of these tokens: they dilute the loss weight,
                         not the gradient.
``step_note``            free words per step line (``; w1 .. wF``, uniform over 32 words in the
                         demonstrations, ignored by the verifier): tokens the policy is unsure
                         of, as an agent's free text, so the Gradient Share falls with H too.
=======================  ================================================================

A regime is chosen from the audit of the RL warm start's own outcome-only rollouts
(:mod:`skillgate_lib.runs.probe`) *before* any SkillGate run, and every run records the knob values it used
in ``config.json``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from skillgate_lib.env.episode import SkillSlateEnv


@dataclass(frozen=True)
class Regime:
    """One setting of the environment's knobs (see the module docstring)."""

    name: str
    step_failure: float = 0.0
    """Injected per-step failure probability, in training and evaluation alike."""
    lookalike_agreement: float = 0.0
    """Expected fraction of keys on which two variants of a family (a look-alike and the oracle) agree."""
    horizons: tuple[int, ...] = tuple(range(1, 9))
    """Horizons (step lines after the read) tasks are drawn from, uniformly."""
    step_echo: int = 0
    """Times each step line restates the task after its lookup (9 policy tokens each; see :class:`SkillSlateEnv`)."""
    step_note: int = 0
    """Free words that end each step line (``; w1 .. wF``; see :class:`SkillSlateEnv`)."""
    max_new_tokens: int = 160
    """Cap on response tokens (policy + inserted bodies) that fits the longest horizon."""
    note: str = ""

    def env(self, **overrides) -> SkillSlateEnv:
        """The environment of this regime; ``overrides`` go to :class:`SkillSlateEnv` (e.g. ``show_slate``)."""
        return SkillSlateEnv(step_failure=self.step_failure, lookalike_agreement=self.lookalike_agreement,
                             horizons=self.horizons, step_echo=self.step_echo, step_note=self.step_note, **overrides)

    def knobs(self) -> dict:
        """The knob values, as recorded in a run's ``config.json``."""
        return {k: v for k, v in asdict(self).items() if k not in ("name", "note")}


#: The named presets. ``easy`` is the environment the kit started with.
REGIMES: dict[str, Regime] = {
    r.name: r
    for r in (
        Regime("easy", note="no injected noise, look-alikes disagree on every key, H = 1..8"),
        Regime("noisy", step_failure=0.15, note="easy plus 15 % per-step failure"),
        Regime("paper", step_failure=0.15, lookalike_agreement=0.3,
               note="noisy plus look-alikes that agree with the oracle on 30 % of keys: the warm start's audit "
                    "gives Value +8 pp and about 1 in 4 short-horizon read advantages wrong-signed; Share is "
                    "not the paper's (episodes of H <= 8 are short)"),
        Regime("paper_long", step_failure=0.15, lookalike_agreement=0.3, horizons=tuple(range(1, 17)),
               max_new_tokens=224,
               note="paper with horizons 1..16, for Share; train with --model tiny-long (the H = 1..16 warm "
                    "start: tiny and tiny-base succeed 0 % beyond H = 8)"),
        Regime("paper_echo", step_failure=0.15, lookalike_agreement=0.3, step_echo=4, max_new_tokens=448,
               note="paper with step lines that restate the task 4 times (41 policy tokens a step): the name's "
                    "share of the loss falls to the paper's order; train with --model tiny-echo"),
        Regime("paper_echo_f30", step_failure=0.3, lookalike_agreement=0.3, step_echo=4, max_new_tokens=448,
               note="paper_echo with 30 % per-step failure, for the one-read warm start (--model tiny-echo-one, "
                    "the oracle read in about 2 of 3 trials): its audit shows the paper's Share, a wrong-signed "
                    "fraction that rises with H and a moderate Value"),
        Regime("paper_note8", step_failure=0.3, lookalike_agreement=0.3, step_note=8, max_new_tokens=192,
               note="paper_echo_f30's failure and look-alikes on the short step lines, each ending with a free note "
                    "of 8 words (14 policy tokens a step) that the warm start is unsure of: the name's share of the "
                    "gradient falls with H, not only its share of the loss weight (--model tiny-note8)"),
        Regime("paper_note4", step_failure=0.3, lookalike_agreement=0.3, step_note=4, max_new_tokens=160,
               note="paper_note8 with notes of 4 words (10 policy tokens a step; --model tiny-note4)"),
        Regime("paper_note8_h68", step_failure=0.15, lookalike_agreement=0.3, horizons=(6, 7, 8), step_note=8,
               max_new_tokens=192,
               note="paper_note8 with long episodes only (H = 6..8; failure 0.15, as paper_echo_h68, so that enough "
                    "groups are mixed): the name's share of the trajectory and of the update at its lowest of the note "
                    "regimes, chosen to move the dose for the lookahead's preregistered test (--model tiny-note8)"),
        Regime("paper_f30", step_failure=0.3, lookalike_agreement=0.3,
               note="paper with 30 % per-step failure: the regime chosen for the pretrained warm start "
                    "(--model smollm2-sft, the chat rendering) from its probes by a rule fixed before them "
                    "(data/runs/diagnosis/probes/smollm2-choice.md)"),
        Regime("paper_echo_h68", step_failure=0.15, lookalike_agreement=0.3, horizons=(6, 7, 8), step_echo=4,
               max_new_tokens=448,
               note="paper_echo with long episodes only (H = 6..8), for --model tiny-echo-one: whether the "
                    "choice is learnt without short episodes (failure 0.15: at 0.3 only 3 % of the warm start's "
                    "rollouts succeed, too few mixed groups to train on)"),
    )
}


def get(name: str) -> Regime:
    """The preset ``name``; a clear error listing the presets otherwise."""
    try:
        return REGIMES[name]
    except KeyError:
        raise ValueError(f"unknown regime {name!r}; choose one of: {', '.join(REGIMES)}") from None
