"""The probe: outcome-only GRPO's view of a regime from a warm start, audited before any training.

A regime (:mod:`skillgate_lib.env.regimes`) is chosen from this audit of the RL warm start's
own rollouts (Share, Sign and Value by horizon), before any SkillGate run in it.

Command line::

    python -m skillgate_lib probe --regime paper_note8 --model tiny-note8 --out build/probes/note8 --json
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from skillgate_lib import credit as credit_lib
from skillgate_lib import logs
from skillgate_lib.audit import report, run_audit
from skillgate_lib.env.chat import rendered
from skillgate_lib.env.regimes import REGIMES, Regime, get
from skillgate_lib.policy import devices
from skillgate_lib.policy.batching import pack
from skillgate_lib.policy.models import is_embedded, load_policy, model_fingerprint
from skillgate_lib.policy.rollout import generate
from skillgate_lib.runs.records import credit_inputs, episode_rows
from skillgate_lib.seeding import stream_seed


def probe(regime: Regime, out_dir: str | Path, model: str = "tiny", n_groups: int = 128, group_size: int = 8,
          seed: int = 0, threads: int = 2, chunk: int = 16, progress: bool = False, device: str = "auto",
          bf16: bool | None = None):
    """Outcome-only GRPO's view of ``regime`` from the warm start: roll out, credit, write, audit.

    Samples ``n_groups`` training prompts x ``group_size`` rollouts from ``model`` (no update),
    assigns the ``outcome`` credit, writes a kit run directory at ``out_dir`` (``config.json``
    with the regime's knobs, ``trajectories/``) and returns its
    :class:`~skillgate_lib.audit.AuditResult` (Share, Sign, Value by horizon). The rollouts
    are drawn ``chunk`` groups at a time from one generator, so they depend on ``chunk``
    (recorded in ``config.json``).
    """
    torch.set_num_threads(threads)
    out_dir = Path(out_dir)
    if (out_dir / "config.json").exists():
        raise FileExistsError(f"{out_dir}: already holds a probe; choose another --out")
    dev = devices.resolve(device)
    bf16 = devices.resolve_bf16(bf16, dev, is_embedded(model))
    devices.check_bf16(dev, bf16)
    if progress:
        print(devices.precision_line(dev, bf16), flush=True)
    base, tokenizer = load_policy(model)
    env = rendered(regime.env(), tokenizer)  # the chat rendering for a model with a chat template
    base = base.to(dev).eval()
    writer = logs.RunWriter(out_dir)
    writer.write_config({"kind": "probe", "regime": regime.name, **regime.knobs(), "model": model,
                         "model_fingerprint": model_fingerprint(model), "credit": "outcome", "seed": seed, "bf16": bf16,
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
    devices.add_device_arguments(parser)
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
    bf16 = json.loads((Path(args.out) / "config.json").read_text())["bf16"]  # as resolved
    summary = {"regime": regime.name, "model": args.model, "seed": args.seed, "bf16": bf16, **regime.knobs(),
               **probe_summary(result)}
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print(report(result))
    return 0


main = probe_main
