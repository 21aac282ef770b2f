"""The measured blocks of ``benchmarks/README.md``, rendered from the committed records in ``benchmarks/records/``.

    python benchmarks/readme_records.py          # rewrite the blocks from the records
    python benchmarks/readme_records.py --check  # exit 1 when the README does not say what the records hold

A block sits between ``<!-- generated: NAME -->`` and ``<!-- end generated -->``; ``NAME`` is
a record's file name without ``.json``, rendered by the function of :data:`BLOCKS`. Every
number in a block comes from its record, so a re-measurement is a new record and a rerun of
this script, never a hand edit.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECORDS = HERE / "records"
README = HERE / "README.md"
_BLOCK = re.compile(r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)


def _load(r: list[float]) -> str:
    return f"{r[0]:.1f}"


def study_block(r: dict) -> str:
    """``bench_study.py``: runs per hour trained together against alone, and the step times behind them."""
    alone, together = r["arm_times"]["alone"], r["arm_times"]["together"]
    g = r["runs_per_group"]
    return (
        f"`python benchmarks/bench_study.py --steps {r['steps']} --runs {r['runs']} --repeats {r['repeats']}` "
        f"({r['runs']} runs of the `{r['regime']}` study's search: {', '.join(r['methods'])}; "
        f"{r['settings']['prompts_per_step']} x {r['settings']['group_size']} rollouts, "
        f"{r['settings']['eval_tasks']} validation tasks at the start and the end; {r['workers']} workers x "
        f"{r['threads_per_worker']} thread on {r['cpu_count']} cores; load average {_load(r['load_average_before'])} "
        f"before, {_load(r['load_average_after'])} after, from other jobs):\n\n"
        f"| arm | median wall s | runs per hour | median step s | median generation s |\n|---|---|---|---|---|\n"
        f"| alone (`--together 1`) | {statistics.median(r['wall_s']['alone']):.1f} | {r['runs_per_hour']['alone']:.0f} | "
        f"{alone['median_step_s']:.2f} | {alone['median_generate_s']:.2f} |\n"
        f"| together ({g} runs a group) | {statistics.median(r['wall_s']['together']):.1f} | {r['runs_per_hour']['together']:.0f} | "
        f"{together['median_step_s']:.2f} ({together['median_step_s'] / g:.2f} a run) | "
        f"{together['median_generate_s']:.2f} ({together['median_generate_s'] / g:.2f} a run) |\n\n"
        f"Ratio together / alone: **{r['ratio_together_over_alone']:.2f}x** (target {r['target']:g}x). Largest "
        f"difference between the two arms' metrics (every logged number but the times): {r['max_metric_difference']:.2g}.\n"
    )


def grpo_step_160_block(r: dict) -> str:
    """``bench_grpo_step.py --new-tokens 160``: the kit against TRL per completion and per token, and what bounds it."""
    kit, trl = r["kit"], r["trl"]
    c = r["config"]
    loads = ", ".join(f"{k} {_load(v)}" for k, v in r["loadavg_1_5_15"].items())
    n = r["shape"]["completions_per_step"]
    per_token = {side: {part: 1e6 * s[f"median_{part}_s"] / (n * s["mean_response_tokens"]) for part in ("generate", "update")}
                 for side, s in (("kit", kit), ("trl", trl))}
    return (
        f"`python benchmarks/bench_grpo_step.py --new-tokens {c['new_tokens']} --threads {c['threads']}"
        f"{' --force-length' if c['force_length'] else ''}` ({r['shape']['prompts']} prompts x {r['shape']['group']}, "
        f"{c['steps']} timed steps a side after a warm-up, medians; {c['threads']} torch thread; load average {loads}):\n\n"
        f"| side | s a step | generation s | update s | completions/s | response tokens/s | mean response tokens |\n"
        f"|---|---|---|---|---|---|---|\n"
        + "".join(f"| {name} | {s['median_step_s']:.2f} | {s['median_generate_s']:.2f} | {s['median_update_s']:.2f} | "
                  f"{s['completions_per_s']:.1f} | {s['response_tokens_per_s']:.0f} | {s['mean_response_tokens']:.1f} |\n"
                  for name, s in (("kit", kit), ("TRL", trl)))
        + f"\nkit / TRL: **{r['ratio_kit_over_trl']:.2f}x** per completion, **{r['ratio_tokens_per_s']:.2f}x** per "
        f"response token (target {r['token_target']:g}x), {r['ratio_policy_tokens_per_s']:.2f}x per policy token "
        f"({100 * kit['mean_env_token_fraction']:.0f} % of the kit's response tokens are inserted by the environment). "
        f"Per response token the kit's generation takes {per_token['kit']['generate']:.0f} us against TRL's "
        f"{per_token['trl']['generate']:.0f} ({per_token['trl']['generate'] / per_token['kit']['generate']:.2f}x; "
        f"{kit['ms_per_decode_forward']:.1f} ms a decode forward, {kit['median_decode_forwards']:.0f} a step) and its "
        f"update {per_token['kit']['update']:.0f} us against {per_token['trl']['update']:.0f} "
        f"({per_token['trl']['update'] / per_token['kit']['update']:.2f}x; {r['kit_update_gflop']:.1f} GFLOP at "
        f"{100 * r['kit_update_mfu']:.0f} % of the measured {r['matmul_peak_gflops']:.0f} GFLOP/s fp32 matmul peak).\n"
    )


def grpo_step_paired_block(r: dict) -> str:
    """``bench_grpo_step.py`` with the sides alternating: the paired per-step ratios kit/TRL, each side's medians,
    and what bounds the kit's decode forward and update."""
    kit, trl, c, paired = r["kit"], r["trl"], r["config"], r["paired"]
    n = r["shape"]["completions_per_step"]
    flags = "".join(f" --{k.replace('_', '-')} {c[k]}" for k in ("prompts", "group", "steps", "threads", "new_tokens"))
    flags += "".join(f" --{k.replace('_', '-')}" for k in ("force_length", "bf16") if c[k])
    tok, comp = paired["per_response_token"], paired["per_completion"]
    return (
        f"`python benchmarks/bench_grpo_step.py --model {c['model']}{flags}` ({r['model']}; {r['shape']['prompts']} prompts x "
        f"{r['shape']['group']} = {n} rollouts of up to {r['shape']['new_tokens']} tokens, {r['precision']}, "
        f"{c['threads']} torch threads; the sides alternate step by step, {c['steps']} timed pairs after a warm-up pair; "
        f"load average {_load(r['loadavg_1_5_15']['before'])} before, {_load(r['loadavg_1_5_15']['after'])} after):\n\n"
        f"| side | s a step | generation s | update s | response tokens/s | mean response tokens |\n|---|---|---|---|---|---|\n"
        + "".join(f"| {name} | {s['median_step_s']:.1f} | {s['median_generate_s']:.1f} | {s['median_update_s']:.1f} | "
                  f"{s['response_tokens_per_s']:.0f} | {s['mean_response_tokens']:.0f} |\n" for name, s in (("kit", kit), ("TRL", trl)))
        + f"\nkit / TRL, median of the paired per-step ratios: **{tok['median']:.2f}x per response token** (range "
        f"{tok['min']:.2f}-{tok['max']:.2f}), {comp['median']:.2f}x per rollout (range {comp['min']:.2f}-{comp['max']:.2f}). "
        f"What bounds the kit: a decode forward takes {kit['ms_per_decode_forward']:.0f} ms, of which reading the "
        f"{r['decode_weight_mib']:.0f} MiB of weights at the measured {r['read_bandwidth_gbs']:.1f} GB/s accounts for "
        f"{100 * r['decode_weight_floor_fraction']:.0f} %; the update runs {r['kit_update_gflop']:.0f} GFLOP at "
        f"{100 * r['kit_update_mfu']:.0f} % of the measured {r['matmul_peak_gflops']:.0f} GFLOP/s {r['precision']} matmul peak.\n"
    )


def device_block(r: dict) -> str:
    """``bench_device.py``: GRPO step times of real training runs on one device, each configuration with and without bf16."""
    rows = "\n".join(
        f"| `{x['config']}` | {x['prompts_per_step']} x {x['group_size']} | {'bf16' if x['bf16'] else 'fp32'} | "
        f"{x['median_step_s']:.2f} | {x['median_generate_s']:.2f} | {x['rollouts_per_s']:.1f} |" for x in r["runs"])
    return (f"`python benchmarks/bench_device.py --device cuda --bf16 --steps {r['runs'][0]['steps']}` on one "
            f"{r['device_name']} (torch {r['torch']}, Python {r['python']}); medians over steps 2-{r['runs'][0]['steps']}:\n\n"
            "| configuration | prompts x rollouts | precision | step s | of which generation s | rollouts / s |\n"
            "|---|---|---|---:|---:|---:|\n" + rows + "\n")


def together_smollm2_block(r: dict) -> str:
    """``bench_together_smollm2.py``: SmolLM2 rollouts of several runs in one batch (``MultiLlama``) against one run after another."""
    load = (f"load average {_load(r['load_average_before'])} before, {_load(r['load_average_after'])} after"
            if "load_average_before" in r else "load average not recorded; the machine's other job paused")
    rows = "\n".join(f"| {side} | {', '.join(f'{t:.1f}' for t in r['seconds'][side])} | {r['median_s'][side]:.1f} | "
                     f"{r['tokens_per_s'][side]:.0f} |" for side in ("alone", "together"))
    return (f"`python benchmarks/bench_together_smollm2.py --runs {r['runs']} --prompts {r['prompts']} --group {r['group']} "
            f"--repeats {r['repeats']} --threads {r['threads']}` ({r['runs']} runs of `{r['model']}` in `{r['regime']}`, "
            f"{r['prompts']} x {r['group']} rollouts each, bf16 autocast, {r['threads']} torch threads, the sides "
            f"alternating; {load}):\n\n"
            "| side | seconds per repeat | median s | response tokens / s |\n|---|---|---:|---:|\n" + rows + "\n\n"
            f"Decoded together, the runs' rollouts come at **{r['ratio_tokens_per_s']:.2f}x** the rate of one run after "
            "another.\n")


def decode_commits_block(r: dict) -> str:
    """``bench_decode_commits.py``: SmolLM2 rollouts with a base commit's decode path and with a change's, alternating."""
    seconds = {side: ", ".join(f"{d['seconds']:.1f}" for d in r["draws"][side]) for side in ("base", "new")}
    rows = "\n".join(f"| {side} | {seconds[side]} | {r['median_s'][side]:.1f} |" for side in ("base", "new"))
    same = ("every draw drew the same tokens (one digest of all rollouts)" if r["same_tokens"] else
            "**the draws differ** in their tokens")
    return (f"`python benchmarks/bench_decode_commits.py --base {r['base'][:7]} --prompts {r['prompts']} --group {r['group']} "
            f"--repeats {r['repeats']} --threads {r['threads']}` (`{r['model']}` in `{r['regime']}`, {r['prompts']} x "
            f"{r['group']} rollouts, bf16 autocast, {r['threads']} torch threads, a fresh process a draw, the sides "
            f"alternating; load average {_load(r['load_average_before'])} before, {_load(r['load_average_after'])} after; "
            f"the change: {r['change']}):\n\n"
            "| side | seconds per draw | median s |\n|---|---|---:|\n" + rows + "\n\n"
            f"Base / change: **{r['ratio_base_over_new']:.2f}x**; {same}.\n")


BLOCKS = {"device_cuda_h200": device_block, "decode_gqa_chunks": decode_commits_block, "study": study_block, "study_steps20": study_block, "grpo_step_160": grpo_step_160_block,
          "grpo_step_smollm2": grpo_step_paired_block, "together_smollm2": together_smollm2_block}


def render(text: str) -> str:
    """``text`` with every generated block rewritten from its record; an unknown block or missing record is an error."""
    def fill(m: re.Match) -> str:
        name = m["name"]
        if name not in BLOCKS:
            raise ValueError(f"{README}: block {name!r} has no renderer; known: {', '.join(BLOCKS)}")
        path = RECORDS / f"{name}.json"
        if not path.exists():
            raise FileNotFoundError(f"{path}: the record of README block {name!r} is missing")
        return m.group(1) + BLOCKS[name](json.loads(path.read_text())) + m.group(4)

    return _BLOCK.sub(fill, text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 when the README's blocks differ from the records")
    args = p.parse_args(argv)
    text = README.read_text()
    new = render(text)
    if args.check:
        if new != text:
            print(f"{README}: generated blocks are stale; run python benchmarks/readme_records.py", file=sys.stderr)
            return 1
        return 0
    README.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
