"""Install the git filter that strips notebook outputs as git reads a notebook (``make install`` runs it).

The pre-commit hook (``.pre-commit-config.yaml``) strips outputs from what is committed; the lab's
autosave still writes outputs into the working tree, so without a filter ``git status`` shows an
opened notebook as modified. ``.gitattributes`` (committed) routes ``*.ipynb`` through the filter
``nbstripout``; this script defines that filter in the clone's ``.git/config`` with the hook's own
arguments, so git sees exactly what the hook would commit. A clone without it behaves as before.

    python scripts/git_filter.py            # define the filter for this clone
    python scripts/git_filter.py --print    # show the command it sets
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def hook_arguments(config: Path = ROOT / ".pre-commit-config.yaml") -> list[str]:
    """The nbstripout hook's arguments in ``config`` (after the program name)."""
    repos = yaml.safe_load(config.read_text())["repos"]
    (hook,) = [h for repo in repos for h in repo["hooks"] if h["id"] == "nbstripout"]
    program, *args = shlex.split(hook["entry"])
    if program != "nbstripout":
        raise ValueError(f"{config}: the nbstripout hook runs {program!r}, expected nbstripout")
    return args


def clean_command(python: str = sys.executable) -> str:
    return shlex.join([python, "-m", "nbstripout", *hook_arguments()])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--print", action="store_true", help="print the clean command, configure nothing")
    args = p.parse_args(argv)
    command = clean_command()
    if args.print:
        print(command)
        return 0
    settings = {"filter.nbstripout.clean": command, "filter.nbstripout.smudge": "cat",
                "filter.nbstripout.required": "true", "diff.ipynb.textconv": f"{command} -t"}
    for key, value in settings.items():
        subprocess.run(["git", "-C", str(ROOT), "config", key, value], check=True)
    print(f"git filter nbstripout: {command}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
