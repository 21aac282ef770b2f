"""Audit throughput and peak memory on a synthetic kit-format log of any size.

    python benchmarks/bench_audit.py [--rows 4000000] [--rows-per-step 262144] [--threads 2] [--keep DIR]

Generates a SYNTHETIC run (``skillgate_lib.audit.write_synthetic_log``: reads and rewards
drawn from the theory model's process, written one Parquet part per step), then audits
it in a fresh subprocess (``python -m skillgate_lib audit DIR --no-figures``) so the peak
resident set measured (``ru_maxrss`` of the child) is the audit's alone, not the
generator's. Prints trajectories per minute and peak RSS; the target is >= 1 million
trajectories per minute on 2 cores with < 1 GB resident.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from skillgate_lib import audit, theory


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=4_000_000, help="trajectories to generate (default 4M)")
    p.add_argument("--rows-per-step", type=int, default=262_144, help="rows per Parquet part")
    p.add_argument("--threads", type=int, default=2, help="DuckDB threads (default 2)")
    p.add_argument("--memory-limit", default="512MB")
    p.add_argument("--keep", type=Path, help="generate into (and keep) this directory")
    args = p.parse_args(argv)
    tmp = None if args.keep else tempfile.TemporaryDirectory(prefix="bench-audit-")
    run_dir = args.keep or Path(tmp.name) / "synthetic-run"
    t0 = time.perf_counter()
    model = theory.StarvationModel(p_oracle=0.4, q_step=0.93, s_wrong=0.3)
    audit.write_synthetic_log(run_dir, args.rows, model, rows_per_step=args.rows_per_step, extra_read=0.2, seed=0,
                              note="SYNTHETIC benchmark log")
    size = sum(f.stat().st_size for f in (run_dir / "trajectories").glob("*.parquet"))
    print(f"generated {args.rows:,} synthetic trajectories ({size / 2**20:.0f} MiB Parquet) "
          f"in {time.perf_counter() - t0:.1f}s", flush=True)
    cmd = [sys.executable, "-m", "skillgate_lib", "audit", str(run_dir), "--no-figures",
           "--threads", str(args.threads), "--memory-limit", args.memory_limit]
    t1 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t1
    if proc.returncode:
        print(proc.stdout, proc.stderr, sep="\n")
        return proc.returncode
    rss_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # Linux: KiB
    print(proc.stdout.split("\n\n")[0])
    print(f"audit wall time {wall:.1f}s (process start and imports included) on {args.threads} threads")
    print(f"throughput: {args.rows / wall * 60:,.0f} trajectories/minute")
    print(f"peak RSS of the audit process: {rss_mib:.0f} MiB")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
