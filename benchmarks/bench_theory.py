"""Throughput of the Monte Carlo twin (:func:`skillgate_lib.theory.simulate`).

Times ``simulate`` on the default model over a horizon grid, several times, and prints
the median rate in simulated trajectories per second (target: >= 10 million on one
core; the simulation itself is single-threaded numpy). Exits 1 below the target.

    python benchmarks/bench_theory.py [--n-groups N] [--repeats R]
"""

from __future__ import annotations

import argparse
import statistics
import time

from skillgate_lib.theory import StarvationModel, simulate

TARGET = 10_000_000
HORIZONS = list(range(1, 9))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-groups", type=int, default=500_000, help="groups per horizon (default 500000)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats; the median is reported (default 5)")
    args = parser.parse_args(argv)
    model = StarvationModel()
    trajectories = args.n_groups * model.group_size * len(HORIZONS)
    simulate(model, HORIZONS[:1], n_groups=1_000, seed=0)  # warm-up: imports, first allocations
    times = []
    for repeat in range(args.repeats):
        start = time.perf_counter()
        simulate(model, HORIZONS, n_groups=args.n_groups, seed=repeat)
        times.append(time.perf_counter() - start)
    rate = trajectories / statistics.median(times)
    print(f"theory.simulate: {trajectories:,} trajectories (G={model.group_size}, {len(HORIZONS)} horizons) "
          f"x {args.repeats} repeats, median {statistics.median(times):.3f} s")
    print(f"trajectories/second: {rate:,.0f} (target {TARGET:,}: {'met' if rate >= TARGET else 'NOT met'})")
    return 0 if rate >= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
