"""Write the kit's environment as verl RL parquet files (train and val) for ``skillgate_grpo.sh``.

    python examples/verl/make_data.py --regime easy --n-train 20000 --n-val 512

``--out`` defaults to ``data/verl`` of the repository this script is in (an absolute path, whatever the
working directory), which is where ``skillgate_grpo.sh`` looks for ``train.parquet`` and ``val.parquet``.

Each row carries its task, slate and regime in ``extra_info`` (and again in
``extra_info.tools_kwargs.read.create_kwargs``, for the read tool of verl's tool agent loop);
the reward function is ``skillgate_lib/integrations/verl_data.py:compute_score``, which scores
each episode in the row's regime.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from skillgate_lib.env import regimes
from skillgate_lib.integrations.verl_data import verl_rows

DEFAULT_OUT = Path(__file__).resolve().parents[2] / "data" / "verl"
"""Where the data go by default, and where ``skillgate_grpo.sh`` reads them: ``<repository>/data/verl``."""


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT,
                   help=f"folder for train.parquet and val.parquet (default: {DEFAULT_OUT})")
    p.add_argument("--regime", default="easy", choices=list(regimes.REGIMES),
                   help="environment preset of skillgate_lib.env.regimes (step failure, look-alikes, horizons)")
    p.add_argument("--n-train", type=int, default=20_000, help="training tasks")
    p.add_argument("--n-val", type=int, default=512, help="held-out (eval split) tasks")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, n, split in (("train", args.n_train, "train"), ("val", args.n_val, "eval")):
        path = args.out / f"{name}.parquet"
        pd.DataFrame(verl_rows(args.regime, n, seed=args.seed, split=split)).to_parquet(path)
        print(f"{path}: {n} rows ({args.regime})")


if __name__ == "__main__":
    main()
