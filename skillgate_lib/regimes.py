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
(:func:`probe`) *before* any SkillGate run, and every run records the knob values it used
in ``config.json``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

from .env import SkillSlateEnv


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


def probe(regime: Regime, out_dir: str | Path, model: str = "tiny", n_groups: int = 128, group_size: int = 8,
          seed: int = 0, threads: int = 2, chunk: int = 16, progress: bool = False, device: str = "auto",
          bf16: bool = False):
    """Outcome-only GRPO's view of ``regime`` from the warm start: roll out, credit, write, audit.

    Samples ``n_groups`` training prompts x ``group_size`` rollouts from ``model`` (no update),
    assigns the ``outcome`` credit, writes a kit run directory at ``out_dir`` (``config.json``
    with the regime's knobs, ``trajectories/``) and returns its
    :class:`~skillgate_lib.audit.AuditResult` (Share, Sign, Value by horizon). The rollouts
    are drawn ``chunk`` groups at a time from one generator, so they depend on ``chunk``
    (recorded in ``config.json``).
    """
    from . import credit as credit_lib
    from . import devices, logs
    from .audit import run_audit
    from .batching import pack
    from .models import load_policy, model_fingerprint
    from .records import credit_inputs, episode_rows
    from .rollout import generate
    from .seeding import stream_seed

    torch.set_num_threads(threads)
    out_dir = Path(out_dir)
    if (out_dir / "config.json").exists():
        raise FileExistsError(f"{out_dir}: already holds a probe; choose another --out")
    env = regime.env()
    dev = devices.resolve(device)
    devices.check_bf16(dev, bf16)
    base, tokenizer = load_policy(model)
    base = base.to(dev).eval()
    writer = logs.RunWriter(out_dir)
    writer.write_config({"kind": "probe", "regime": regime.name, **regime.knobs(), "model": model,
                         "model_fingerprint": model_fingerprint(model), "credit": "outcome", "seed": seed,
                         "n_groups": n_groups, "group_size": group_size, "chunk": chunk,
                         "versions": logs.package_versions()})
    tasks = env.sample_tasks(n_groups, split="train", seed=stream_seed(seed, 0, 2))
    gen = torch.Generator().manual_seed(stream_seed(seed, 0, 4))
    chunks = range(0, n_groups, chunk)
    if progress:
        from tqdm import tqdm

        chunks = tqdm(chunks, desc=f"probe {regime.name}")
    for c, start in enumerate(chunks):
        items = []
        for g in range(start, min(n_groups, start + chunk)):
            slate = env.slate(tasks[g], seed=stream_seed(seed, 0, 3, g))
            items += [(tasks[g], slate, g)] * group_size
        with devices.autocast(dev, bf16):
            episodes = generate(base, tokenizer, env, items, regime.max_new_tokens, 1.0, gen,
                                score_rng=np.random.default_rng(stream_seed(seed, c, 5)))
        inputs = credit_inputs(episodes, pack(episodes, tokenizer.pad_token_id))
        cr = credit_lib.assign("outcome", inputs)
        writer.write_trajectories(episode_rows(episodes, c + 1, "train", "outcome", cr, cr.selector_share(inputs)),
                                  step=c + 1, split="train")
    return run_audit(out_dir)


def probe_summary(result) -> dict:
    """The numbers a regime is chosen by: Share, Sign and Value in the shortest and longest bins, and overall."""
    bins = result.bins
    first, last = bins.iloc[0], bins.iloc[-1]
    trend = result.trends.set_index("measure")
    out = {
        "n": int(result.n_rows),
        "share_median_short": float(first["share_median"]), "share_median_long": float(last["share_median"]),
        "dilution": float(result.dilution),
        "gshare_median_short": float(first["gshare_median"]), "gshare_median_long": float(last["gshare_median"]),
        "grad_dilution": float(result.grad_dilution),
        "ratio_share": float(result.overall["ratio_share"]), "ratio_gshare": float(result.overall["ratio_gshare"]),
        "sign_wrong_short": float(first["sign_wrong"]), "sign_wrong_long": float(last["sign_wrong"]),
        "value": float(result.overall["value"]), "value_lo": float(result.overall["value_lo"]),
        "value_hi": float(result.overall["value_hi"]),
        "success": float(result.overall["success"]), "oracle_read": float(result.overall["oracle_read"]),
    }
    for m in trend.index:
        out[f"trend_p/{m}"] = float(trend.loc[m, "p_value"])
    return out


def probe_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m skillgate_lib probe",
                                     description="Audit the warm start's outcome-only rollouts in a regime "
                                                 "(Share / Sign / Value by horizon), before any training.")
    parser.add_argument("--regime", default="paper", choices=list(REGIMES), help="preset (default: paper)")
    parser.add_argument("--step-failure", type=float, help="override the preset's per-step failure")
    parser.add_argument("--lookalike-agreement", type=float, help="override the preset's look-alike agreement")
    parser.add_argument("--horizons", type=int, nargs="+", help="override the preset's horizons")
    parser.add_argument("--step-echo", type=int, help="override the preset's step echo (policy tokens per step)")
    parser.add_argument("--step-note", type=int, help="override the preset's note length (free words per step line)")
    parser.add_argument("--max-new-tokens", type=int, help="override the preset's response cap")
    parser.add_argument("--groups", type=int, default=128, help="prompt groups (default: 128 x 8 = 1,024 rollouts)")
    parser.add_argument("--group-size", type=int, default=8, help="rollouts per prompt (default: 8)")
    parser.add_argument("--model", default="tiny", help="the policy (default: tiny, the RL warm start)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True, help="a new run directory for the rollouts")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    from .devices import add_device_arguments

    add_device_arguments(parser)
    args = parser.parse_args(argv)
    regime = get(args.regime)
    over = {k: getattr(args, k) for k in ("step_failure", "lookalike_agreement", "step_echo", "step_note",
                                          "max_new_tokens")
            if getattr(args, k) is not None}
    if args.horizons:
        over["horizons"] = tuple(args.horizons)
    if over:
        regime = replace(regime, name=f"{regime.name}+custom", **over)
    result = probe(regime, args.out, args.model, args.groups, args.group_size, args.seed, args.threads, progress=True,
                   device=args.device, bf16=args.bf16)
    summary = {"regime": regime.name, "model": args.model, "seed": args.seed, **regime.knobs(), **probe_summary(result)}
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        from .audit import report

        print(report(result))
    return 0


main = probe_main
