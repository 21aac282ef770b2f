"""The kit's three speed benchmarks in one go, their figures side by side with their anchors.

    python benchmarks/run_all.py [--quick]      (``make bench``)

Runs, each through its ``main(argv)`` and at a moderate size (about 5 minutes on 2 cores):

* ``bench_theory``:    Monte Carlo twin, trajectories/s            (anchor >= 10 M/s)
* ``bench_audit``:     audit of a synthetic log, trajectories/min  (anchor >= 1 M/min, peak RSS < 1 GB)
* ``bench_grpo_step``: one GRPO step, kit vs TRL's GRPOTrainer     (anchor kit/TRL throughput >= 1.5x)

Each benchmark's own report is shown as it runs; the figures of the summary table are
read back from those reports (theory, audit) and from ``build/bench/grpo_step.json``.
``--quick`` runs tiny sizes to check the wiring (its figures are not comparable with the
anchors). Exits 1 when a benchmark fails or a figure misses its anchor.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_audit  # noqa: E402
import bench_theory  # noqa: E402

from skillgate_lib import paths  # noqa: E402

GRPO_JSON = paths.BUILD_DIR / "bench" / "grpo_step.json"

#: argv of each benchmark: moderate size for ``make bench``, tiny for ``--quick``.
SIZES = {
    "moderate": {"theory": ["--n-groups", "250000", "--repeats", "5"],
                 "audit": ["--rows", "2000000", "--rows-per-step", "262144"],
                 "grpo": ["--steps", "5", "--threads", "2"]},
    "quick": {"theory": ["--n-groups", "20000", "--repeats", "2"],
              "audit": ["--rows", "100000", "--rows-per-step", "32768"],
              "grpo": ["--quick", "--threads", "1", "--out", str(GRPO_JSON.with_name("grpo_step_quick.json"))]},
}


class _Tee(io.TextIOBase):
    """Writes to the terminal and keeps a copy, so a benchmark's printed figures can be read back."""

    def __init__(self, stream):
        self.stream, self.copy = stream, io.StringIO()

    def write(self, s: str) -> int:
        self.stream.write(s)
        self.copy.write(s)
        return len(s)

    def flush(self) -> None:
        self.stream.flush()


def _run(name: str, main, argv: list[str]) -> tuple[int, str, float]:
    """Exit status, printed text and wall seconds of ``main(argv)``."""
    print(f"\n=== {name} {' '.join(argv)}", flush=True)
    tee = _Tee(sys.stdout)
    start = time.perf_counter()
    with contextlib.redirect_stdout(tee):
        rc = main(argv)
    return rc, tee.copy.getvalue(), time.perf_counter() - start


def _figure(text: str, pattern: str, bench: str) -> float:
    """The number that ``pattern`` (one group) finds in ``bench``'s report."""
    m = re.search(pattern, text)
    if m is None:
        raise ValueError(f"benchmarks/{bench}.py: its report has no line matching {pattern!r}; "
                         "run_all.py reads its figures from that line")
    return float(m.group(1).replace(",", ""))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes: checks the wiring, figures not comparable")
    args = p.parse_args(argv)
    size = SIZES["quick" if args.quick else "moderate"]
    start = time.perf_counter()

    # bench_theory and bench_grpo_step exit 1 for "below target", which the summary shows; bench_audit's
    # non-zero exit is its audit subprocess failing, after which there are no figures to read.
    _, out, t_theory = _run("bench_theory", bench_theory.main, size["theory"])
    theory_rate = _figure(out, r"trajectories/second: ([\d,]+)", "bench_theory")
    rc_audit, out, t_audit = _run("bench_audit", bench_audit.main, size["audit"])
    if rc_audit:
        print(f"benchmarks/bench_audit.py exited {rc_audit}: its audit subprocess failed (output above)")
        return rc_audit
    audit_rate = _figure(out, r"throughput: ([\d,]+) trajectories/minute", "bench_audit")
    audit_rss = _figure(out, r"peak RSS of the audit process: ([\d,]+) MiB", "bench_audit")
    # Imported only now: bench_audit's peak RSS is the ru_maxrss of a forked child, which starts from
    # this process's own resident set, and torch + transformers would add ~200 MiB to it.
    import bench_grpo_step

    grpo_argv = size["grpo"]
    _, _, t_grpo = _run("bench_grpo_step", bench_grpo_step.main, grpo_argv)
    grpo_json = Path(grpo_argv[grpo_argv.index("--out") + 1]) if "--out" in grpo_argv else GRPO_JSON
    grpo = json.loads(grpo_json.read_text())

    # (figure, measured, anchor, met, wall seconds)
    rows = [
        ("Monte Carlo twin (trajectories/s)", f"{theory_rate / 1e6:.1f} M", ">= 10 M", theory_rate >= bench_theory.TARGET,
         t_theory),
        ("audit (trajectories/min)", f"{audit_rate / 1e6:.2f} M", ">= 1 M", audit_rate >= 1e6, t_audit),
        ("audit peak RSS", f"{audit_rss:.0f} MiB", "< 1 GB", audit_rss * 2**20 < 1e9, None),
        (f"GRPO step kit/TRL ({grpo['shape']['completions_per_step']} x {grpo['shape']['new_tokens']} tok)",
         f"{grpo['ratio_kit_over_trl']:.2f}x", f">= {bench_grpo_step.TARGET}x",
         grpo["ratio_kit_over_trl"] >= bench_grpo_step.TARGET, t_grpo),
    ]
    print(f"\n=== summary{' (--quick: sizes too small to compare with the anchors)' if args.quick else ''}")
    print(f"{'figure':42} {'measured':>10} {'anchor':>9}  {'':7} {'wall s':>7}")
    for figure, measured, anchor, met, wall in rows:
        print(f"{figure:42} {measured:>10} {anchor:>9}  {'met' if met else 'NOT met':7} "
              f"{'' if wall is None else f'{wall:7.0f}'}")
    k, t = grpo["kit"], grpo["trl"]
    print(f"  GRPO detail: kit {k['median_step_s']:.2f} s/step ({k['completions_per_s']:.1f} completions/s), "
          f"TRL {t['median_step_s']:.2f} s/step ({t['completions_per_s']:.1f} completions/s), "
          f"{grpo['config']['threads']} threads, load average {grpo['loadavg_1_5_15']['before'][0]:.2f}")
    print(f"total wall time {time.perf_counter() - start:.0f}s")
    return 0 if args.quick else int(not all(met for *_, met, _ in rows))


if __name__ == "__main__":
    sys.exit(main())
