"""Choosing a regime from probes alone, by the rule a plan committed before the probes ran.

The rule (``data/runs/diagnosis/probes/smollm2-plan.md``), on each candidate's probe summary (``probe --json``):

1. the choice must matter: Value's 95 % interval above 0 (``value_lo > 0``);
2. outcome-only GRPO must see mixed groups: success in the probe's rollouts in [5 %, 60 %];
3. among the candidates that pass both, the most starved: the smallest median Gradient Share of the name at the
   longest horizon (``gshare_median_long``); within 10 % of it (relative), the larger wrong-signed fraction at the
   longest horizon (``sign_wrong_long``) wins;
4. none passing: none chosen.

``python -m skillgate_lib.report.regime_choice --probes a.json b.json ... --write choice.md`` writes the choice
with its table; without ``--write`` it prints it.
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

import pandas as pd

from skillgate_lib.report.markdown import markdown_table

SUCCESS_RANGE = (0.05, 0.60)
TIE = 0.10
"""Relative margin within which two Gradient Shares count as tied (rule 3)."""


def load(paths: list[str | Path]) -> pd.DataFrame:
    """One row per probe summary, indexed by the file's stem."""
    rows = {}
    for path in map(Path, paths):
        try:
            rows[path.stem] = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"{path}: not a probe summary ({err})") from err
        missing = [k for k in ("value_lo", "success", "gshare_median_long", "sign_wrong_long") if k not in rows[path.stem]]
        if missing:
            raise ValueError(f"{path}: field {missing[0]!r} missing; write it with python -m skillgate_lib probe --json")
    return pd.DataFrame.from_dict(rows, orient="index")


def judge(probes: pd.DataFrame) -> tuple[str | None, pd.DataFrame]:
    """The chosen probe's name (None when no candidate passes rules 1 and 2) and a table of every rule's verdict."""
    t = probes.copy()
    t["value_above_0"] = t["value_lo"] > 0
    t["mixed_groups"] = t["success"].between(*SUCCESS_RANGE)
    t["eligible"] = t["value_above_0"] & t["mixed_groups"]
    chosen = None
    if t["eligible"].any():
        eligible = t[t["eligible"]]
        best = eligible["gshare_median_long"].min()
        tied = eligible[eligible["gshare_median_long"] <= best * (1 + TIE)]
        chosen = str(tied["sign_wrong_long"].idxmax())
    t["chosen"] = t.index == chosen
    return chosen, t


def choice_markdown(chosen: str | None, table: pd.DataFrame) -> str:
    """The choice in words and its table (markdown)."""
    def yes(b: bool) -> str:
        return "yes" if b else "no"

    rows = [[f"`{name}`", f"`{r['regime']}`", f"{r['step_failure']:g}", f"{min(r['horizons'])}-{max(r['horizons'])}",
             f"{100 * r['success']:.1f} %", f"{100 * r['value']:+.1f} [{100 * r['value_lo']:+.1f}, {100 * r['value_hi']:+.1f}]",
             f"{100 * r['gshare_median_long']:.2f} %", f"{100 * r['sign_wrong_long']:.1f} %",
             yes(r["value_above_0"]), yes(r["mixed_groups"]), "**yes**" if r["chosen"] else "no"]
            for name, r in table.iterrows()]
    head = (f"Chosen: `{chosen}`." if chosen else
            "None chosen: no candidate passes rules 1 and 2, so no rate study runs from this warm start.")
    return head + "\n\n" + markdown_table(
        ["probe", "regime", "failure", "H", "success", "Value pp [95 % CI]", "Gradient Share, longest H",
         "wrong-signed, longest H", "1: Value > 0", "2: success 5-60 %", "chosen"], rows, "lllrrrrrlll")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m skillgate_lib.report.regime_choice", description=__doc__.splitlines()[0])
    p.add_argument("--probes", nargs="+", required=True, help="the candidates' probe summaries (probe --json)")
    p.add_argument("--write", type=Path, help="write the choice here (markdown) instead of printing it")
    p.add_argument("--title", default="Regime choice", help="the written file's heading")
    args = p.parse_args(argv)
    chosen, table = judge(load(args.probes))
    text = choice_markdown(chosen, table)
    if args.write is None:
        print(text)
    else:
        rule = "\n\n".join(__doc__.split("\n\n")[1:3])  # the rule, as the module states it
        title = "" if args.title == p.get_default("title") else f" --title {shlex.quote(args.title)}"
        args.write.write_text(f"# {args.title}\n\nWritten by `python -m skillgate_lib.report.regime_choice --probes "
                              f"{' '.join(args.probes)}{title} --write {args.write}` from the committed probe "
                              "summaries.\n\n"
                              f"{rule}\n\n{text}\n")
        print(f"wrote {args.write}: {chosen or 'none chosen'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
