"""The generated text of README.md and docs/results.md: every number a committed file holds.

The README's verdict and the tables of docs/results.md are written from committed files
(``figures/*.csv``, which ``make figures`` draws from ``data/runs/``, and ``data/runs/``
itself), never typed: each sits between ``<!-- generated: NAME -->`` and
``<!-- end generated -->``, and ``make figures`` rewrites every one of them::

    python -m skillgate_lib.report.docs README.md docs/results.md           # rewrite stale blocks
    python -m skillgate_lib.report.docs --check README.md docs/results.md   # exit 1 when one is stale
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pandas as pd

from skillgate_lib import paths
from skillgate_lib.report.markdown import interval_cell, interval_pp, leading_number, markdown_table

_BLOCK = re.compile(r"(<!-- generated: (?P<name>[a-z0-9_]+) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)

#: The regimes compared outside the powered study: diagnosis folder -> (regime, warm start, committed audit run).
DIAGNOSED = {"paper_echo": ("paper_echo", "tiny-echo", "paper_echo-outcome"),
             "paper_echo_f30": ("paper_echo_f30", "tiny-echo-one", "paper_echo_f30-outcome"),
             "paper_echo_h68": ("paper_echo_h68", "tiny-echo-one", None)}

#: Conditions of the `paper` diagnosis (data/runs/diagnosis/summary.csv) in the order the record reads them.
DIAGNOSIS_CONDITIONS = {
    "outcome": "outcome-only GRPO (reference protocol)", "outcome_nofilter": "outcome-only, no dynamic sampling",
    "skillgate": "SkillGate as the reference defines it (lambda 0.2, active-read sharing, filter)",
    "skillgate_nofilter": "SkillGate without the filter", "tokenmean": "SkillGate, token-mean selector, no filter",
    "lambda0.5": "SkillGate, lambda 0.5", "lambda1": "SkillGate, lambda 1", "lambda2": "SkillGate, lambda 2",
    "selector_only": "selector channel alone (lambda 1)", "selector_only_nofilter": "selector channel alone, no filter",
    "selection_bc": "selection BC (supervised fine-tune of the read call)"}


def diagnosis_table(summary_csv: Path, conditions: dict[str, str] | None = None) -> str:
    """A diagnosis ``summary.csv`` as Markdown: its cells as the script wrote them (a mean and its 95 % interval)."""
    df = pd.read_csv(summary_csv, dtype=str, keep_default_na=False).set_index("condition")
    order = [c for c in (conditions or {}) if c in df.index] + [c for c in df.index if c not in (conditions or {})]
    return markdown_table(["condition", *df.columns], [[(conditions or {}).get(c, f"`{c}`"), *(v if "nan" not in v else "–" for v in df.loc[c])] for c in order],
                     "l" + "r" * len(df.columns))


def _outcome_oracle_read_path(regime_dir: Path) -> tuple[float, float]:
    """Outcome-only's held-out oracle-read (eval split, mean over seeds) at its first and last evaluation, in %."""
    from skillgate_lib.report import study as study_report

    curves = study_report.validation_curves(regime_dir)
    mean = curves[curves["chosen"] & (curves["method"] == "outcome")].groupby("step")["oracle_read"].mean() * 100
    return float(mean.iloc[0]), float(mean.iloc[-1])


def starvation_against_gain(figures_dir: Path, data_dir: Path) -> str:
    """Every regime with an outcome-only vs SkillGate comparison: the audited starvation of outcome-only's
    training logs, outcome-only's held-out oracle-read from step 0 to the end, SkillGate minus outcome-only."""
    from skillgate_lib.audit import run_audit

    rows = []
    dose = pd.read_csv(figures_dir / "fig5_dose_response.csv")
    for _, r in dose.iterrows():
        start, end = _outcome_oracle_read_path(data_dir / "runs" / "study" / r["regime"])
        model = json.loads((next((data_dir / "runs" / "study" / r["regime"]).glob("outcome-*/config.json"))).read_text())["model"]
        rows.append([f"`{r['regime']}` (`{model}`)", int(r["seeds"]), "its outcome runs (mean)", f"{100 * r['audit_value']:+.1f}",
                     f"{100 * r['audit_sign_wrong']:.1f} %", f"{100 * r['audit_share_median']:.2f} %",
                     f"{start:.0f} % -> {end:.0f} %", interval_pp(r["oracle_read_diff"], r["oracle_read_lo"], r["oracle_read_hi"]),
                     interval_pp(r["success_diff"], r["success_lo"], r["success_hi"])])
    for folder, (regime, model, audit_run) in DIAGNOSED.items():
        d = data_dir / "runs" / "diagnosis" / folder
        summary = pd.read_csv(d / "summary.csv", dtype=str, keep_default_na=False).set_index("condition")
        curves = pd.read_csv(d / "oracle_read_curves.csv")
        audited = ["–"] * 4
        if audit_run is not None:
            ov = run_audit(data_dir / "runs" / "audit" / audit_run, split="train", n_boot=1000, seed=0).overall
            audited = [f"`{audit_run}` (40 steps)", f"{100 * ov['value']:+.1f}", f"{100 * ov['sign_wrong']:.1f} %",
                       f"{100 * ov['share_median']:.2f} %"]
        sg = summary.loc["skillgate"]
        rows.append([f"`{regime}` (`{model}`)", summary.loc["outcome", "seeds"], *audited,
                     f"{100 * curves['outcome'].iloc[0]:.0f} % -> {100 * curves['outcome'].iloc[-1]:.0f} %",
                     sg["oracle_read - outcome (pp)"], sg["success - outcome (pp)"]])
    return markdown_table(["regime (warm start)", "seeds", "audited in", "Value pp", "wrong-signed reads", "median Share",
                      "outcome-only oracle-read, start -> end", "SkillGate minus outcome: oracle-read pp", "success pp"],
                     rows, "lrlrrrrrr")


def dose_response_table(figures_dir: Path) -> str:
    """Figure 5's numbers (``fig5_dose_response.csv``) as Markdown."""
    dose = pd.read_csv(figures_dir / "fig5_dose_response.csv")
    rows = [[f"`{r['regime']}`", int(r["seeds"]), f"{100 * r['audit_value']:+.1f} pp", f"{100 * r['audit_sign_wrong']:.1f} %",
             f"{100 * r['audit_zero_credit']:.0f} %", f"{100 * r['audit_share_median']:.1f} %", f"{100 * r['audit_signal']:.1f}",
             f"{r['success_outcome']:.1f} % / {r['oracle_read_outcome']:.1f} %",
             interval_pp(r["oracle_read_diff"], r["oracle_read_lo"], r["oracle_read_hi"]), interval_pp(r["success_diff"], r["success_lo"], r["success_hi"])]
            for _, r in dose.iterrows()]
    return markdown_table(["regime", "seeds", "audited Value", "wrong-signed reads", "reads with zero credit", "median Share",
                      "Value x Share (x 100)", "outcome success / oracle-read", "SkillGate minus outcome: oracle-read pp",
                      "success pp"], rows, "lrrrrrrrrr")


#: The study behind the README's headline table (``figures/results_table.*``): the paper's table in the regime
#: where the audit finds starvation. The ``paper`` study is the second table (``figures/results_table_paper.*``).
HEADLINE_STUDY = "paper_note8"


def _direction(d: pd.Series, measure: str, more: str, less: str, same: str) -> str:
    """``more`` when ``d``'s interval for ``measure`` lies above 0, ``less`` when below, ``same`` when it covers 0."""
    return more if d[f"{measure}_lo"] > 0 else less if d[f"{measure}_hi"] < 0 else same


def _pp(d: pd.Series, measure: str) -> str:
    return interval_pp(d[measure], d[f"{measure}_lo"], d[f"{measure}_hi"])


def _margin(d: pd.Series, measure: str) -> float:
    """The largest difference an interval covering 0 still admits, either way (pp)."""
    return max(abs(d[f"{measure}_lo"]), abs(d[f"{measure}_hi"]))


def headline_sentence(figures_dir: Path, data_dir: Path) -> str:
    """The verdict's first sentences: whether table 1 (``results_table.csv`` and ``_paired.csv``, the
    :data:`HEADLINE_STUDY`) reproduces the paper's headline (SkillGate above outcome-only GRPO in both success and
    oracle-read, intervals above 0), and how the two compare there in success, the choice and its speed. "Level"
    comes with the margin its intervals allow."""
    table = pd.read_csv(figures_dir / "results_table.csv").set_index("method")
    d = pd.read_csv(figures_dir / "results_table_paired.csv").set_index("baseline").loc["outcome"]
    regime = json.loads((data_dir / "runs" / "study" / HEADLINE_STUDY / "plan.json").read_text())["regime"]
    reproduced = d["success_lo"] > 0 and d["oracle_read_lo"] > 0
    speed = _direction(d, "speed", "faster than", "slower than", "not shown faster than")
    sg, oc = table.loc["skillgate"], table.loc["outcome"]
    moved = _supplement_choice(data_dir, "skillgate")
    text = (f"**The paper's headline table is {'' if reproduced else 'not '}reproduced at kit scale.** In `{regime}`"
            + (f" (SkillGate at lambda {moved:g}, from a search below table 1's edge added after its results)"
               if moved is not None else "") + ", "
            f"where the audit finds starvation, SkillGate learns the choice {speed} outcome-only GRPO (choice speed "
            f"(on-policy) {sg['speed']:.3f} vs {oc['speed']:.3f} logit/step, paired "
            f"{interval_pp(d['speed'], d['speed_lo'], d['speed_hi'], '{:+.3f}')})")
    if d["oracle_read_lo"] <= 0 <= d["oracle_read_hi"] and d["success_lo"] <= 0 <= d["success_hi"]:
        text += (f" but the two end level within {_margin(d, 'oracle_read'):.1f} pp in oracle-read and "
                 f"{_margin(d, 'success'):.1f} pp in success ({int(d['seeds'])} paired seeds, test set).")
    else:
        words = ("it ends above it", "it ends below it", "it is not shown to differ")
        text += (f"; in oracle-read {_direction(d, 'oracle_read', *words)} ({_pp(d, 'oracle_read')} pp), in success "
                 f"{_direction(d, 'success', *words)} ({_pp(d, 'success')} pp; {int(d['seeds'])} paired seeds, "
                 "test set).")
    return text


def _supplement_choice(data_dir: Path, method: str) -> float | None:
    """The value a supplement of the headline study chose for ``method`` where that supplement re-searched it
    (:data:`skillgate_lib.report.study.SUPPLEMENTS`: its rows then stand in table 1), else None."""
    from skillgate_lib.report.study import SUPPLEMENTS

    value = None
    for name in SUPPLEMENTS.get(HEADLINE_STUDY, ()):
        path = data_dir / "runs" / "study" / name / "selection.json"
        if path.exists() and method in (sel := json.loads(path.read_text())):
            value = float(sel[method]["value"])
    return value


def success_by_regime(figures_dir: Path, data_dir: Path) -> pd.DataFrame:
    """SkillGate minus outcome-only in test success (pp) in every regime compared: table 1's study, the dose
    response's regimes (figure 5) and the diagnosis comparisons, with the interval each was reported with and
    whether the regime had a search of its own (a study plan with more than one value for an arm, or a diagnosis
    folder with a ``search.csv``) or reused another's choice."""
    rows = []
    note8 = pd.read_csv(figures_dir / "results_table_paired.csv").set_index("baseline").loc["outcome"]
    rows.append({"regime": HEADLINE_STUDY, "diff": note8["success"], "lo": note8["success_lo"],
                 "hi": note8["success_hi"], "searched": True})
    for _, r in pd.read_csv(figures_dir / "fig5_dose_response.csv").iterrows():
        plan = json.loads((data_dir / "runs" / "study" / r["regime"] / "plan.json").read_text())
        rows.append({"regime": r["regime"], "diff": r["success_diff"], "lo": r["success_lo"], "hi": r["success_hi"],
                     "searched": any(len(a["values"]) > 1 for a in plan["arms"])})
    for folder in DIAGNOSED:
        d = data_dir / "runs" / "diagnosis" / folder
        cell = pd.read_csv(d / "summary.csv", dtype=str).set_index("condition").loc["skillgate", "success - outcome (pp)"]
        diff, lo, hi = interval_cell(cell)
        rows.append({"regime": folder, "diff": diff, "lo": lo, "hi": hi,
                     "searched": (d / "search.csv").exists()})
    return pd.DataFrame(rows)


def success_sentence(by_regime: pd.DataFrame) -> str:
    """How many regimes' success intervals lie above 0, below it, or cover it, and how many had no search of their
    own."""
    above, below = by_regime[by_regime["lo"] > 0], by_regime[by_regime["hi"] < 0]
    covers = by_regime[(by_regime["lo"] <= 0) & (by_regime["hi"] >= 0)]
    n = len(by_regime)

    def names(rows):
        return ", ".join(f"`{r}`" for r in rows["regime"])

    text = (f"its success interval lies above outcome-only's in {len(above)} of {n} regimes"
            + (f" ({names(above)})" if len(above) else "")
            + f", below in {len(below)} and covers 0 in {len(covers)}")
    if len(covers):
        text += f" (not shown either way; up to {covers['hi'].max():+.1f} pp)"
    unsearched = int((~by_regime["searched"]).sum())
    return text + f"; {unsearched} of them reused another regime's search"


def search_caveat(study_dir: Path, method: str = "skillgate") -> str:
    """What a study's search left open for ``method``: a knob it did not search, a choice at an edge of its grid."""
    plan = json.loads((study_dir / "plan.json").read_text())
    arm = next(a for a in plan["arms"] if a["method"] == method)
    value = json.loads((study_dir / "selection.json").read_text())[method]["value"]
    knob = {"selector_coef": "lambda", "lr": "learning rate"}
    out = []
    if len(arm["values"]) > 1 and value in (min(arm["values"]), max(arm["values"])):
        out.append(f"{knob.get(arm['knob'], arm['knob'])} {value:g} at the edge of its grid")
    searched = {arm["knob"], *(k for k, _ in arm.get("also", []))}
    out += [f"{knob[k]} not searched" for k in knob if k not in searched]
    return ", ".join(out)


VERDICT_LINES = 16  # the most lines the README verdict may take: one screen, with the pretrained study's sentence


def verdict(figures_dir: Path, data_dir: Path) -> str:
    """The README verdict, every number read from ``figures/``, ``data/runs/study/``, ``data/runs/diagnosis/`` and
    ``data/runs/speed/``; each of its words ("faster", "more", "level", "not shown") is backed by an interval."""
    import textwrap

    from skillgate_lib.report import lookahead, rates

    paper = pd.read_csv(figures_dir / "results_table_paper_paired.csv").set_index("baseline").loc["outcome"]
    choice = _direction(paper, "oracle_read", "more often", "less often", "not shown more often")
    table, fit, _ = _rate_tables(data_dir)
    caveat = search_caveat(data_dir / "runs" / "study" / "paper")
    text = (headline_sentence(figures_dir, data_dir)
            + f" In `paper` it reads the right skill {choice} ({_pp(paper, 'oracle_read')} pp"
              f"{'; its ' + caveat if caveat else ''}). "
            + success_sentence(success_by_regime(figures_dir, data_dir))[0].upper()
            + success_sentence(success_by_regime(figures_dir, data_dir))[1:] + ". "
            + rates.verdict_sentence(table, fit)
            + (" " + look if (look := lookahead.lookahead_sentence(table, data_dir / "runs" / "predict",
                                                                   data_dir / "runs" / "speed")) else "")
            + (" " + own if (own := _pretrained_sentence(table, data_dir)) else ""))
    keep = re.sub(r"\[[^\]]*\]", lambda m: m.group(0).replace(" ", "\0"), text)  # no line break inside an interval
    return textwrap.fill(keep, width=112, break_on_hyphens=False, break_long_words=False).replace("\0", " ") + "\n"


def _pretrained_sentence(table: pd.DataFrame, data_dir: Path) -> str:
    """The verdict's sentence on each pretrained model's rate study (:func:`skillgate_lib.report.pretrained.study_sentence`);
    empty while none has run."""
    from skillgate_lib.report import lookahead, pretrained, rate_endpoints, rates

    if "pretrained" not in table or not table["pretrained"].any():
        return ""
    speed = data_dir / "runs" / "speed"
    ends = rate_endpoints.endpoint_table(pd.concat([rates.run_table(speed / s)
                                                    for s in table.loc[table["pretrained"], "study"]]))
    return pretrained.study_sentence(table, ends, lookahead.preregistered(table, data_dir / "runs" / "predict", speed))


def _same_setting_runs(study_dir: Path, other_dir: Path, method: str) -> tuple[int, int]:
    """Of ``method``'s test records in ``study_dir`` that have a run in ``other_dir`` with the same seed and the same
    settings (learning rate, lambda), how many equal its record to the last digit, and how many have one."""
    from skillgate_lib.report import study as study_report

    def keyed(d: Path) -> dict:
        t = study_report.test_results(d)
        t = t[t["method"] == method]
        cols = [c for c in t.columns if c.startswith("test/")]
        out = {}
        for _, r in t.iterrows():
            cfg = json.loads((Path(r["run_dir"]) / "config.json").read_text())
            out[(int(cfg["seed"]), float(cfg["lr"]), float(cfg.get("selector_coef", 0)))] = r[cols].tolist()
        return out

    ours, theirs = keyed(study_dir), keyed(other_dir)
    shared = [k for k in ours if k in theirs]
    return sum(1 for k in shared if theirs[k] == ours[k]), len(shared)


def supplement(data_dir: Path, study: str, knob_label: str = "learning rate") -> str:
    """A supplement to table 1 that searched beyond an arm's edge choice: its search, each arm's test-set row at the
    choice, and how many of its seed runs repeat table 1's run of the same seed and settings to the last digit of
    the test record."""
    from skillgate_lib.report import study as study_report

    root = data_dir / "runs" / "study"
    tests = study_report.test_results(root / study)
    selection = json.loads((root / study / "selection.json").read_text())
    rows = study_report.summary_table(tests)
    rows = rows[rows["method"].isin(selection)]
    lines = [study_report.search_markdown(root / study)]
    for method, entry in selection.items():
        by_point = ", ".join(f"{float(k):.3g}: {100 * v:.1f} %"
                             for k, v in sorted(entry["val_success"].items(), key=lambda kv: -float(kv[0])))
        lines.append(f"Validation success of `{method}` by {knob_label}: {by_point}.\n")
    lines.append(study_report.table_markdown(rows))
    for method in selection:
        same, n = _same_setting_runs(root / study, root / HEADLINE_STUDY, method)
        lines.append(f"`{method}`: {same} of {n} test records equal those of table 1's run with the same seed and "
                     "settings.\n" if n else f"`{method}`: table 1's study has no run at the setting chosen here; "
                     "its rows in table 1 are these.\n")
    return "\n".join(lines)


def _rate_tables(data_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame, object]:
    """The rate study's table (every study), the closed forms' fit (the tiny model's AdamW studies,
    :func:`skillgate_lib.report.rates.embedded_studies`), and the module."""
    from skillgate_lib.report import rates

    table = rates.rate_table(rates.all_runs(data_dir / "runs" / "speed"), data_dir / "runs" / "diagnosis" / "probes",
                             data_dir / "runs" / "diagnosis" / "gradient_proxy" / "summary.csv")
    tiny = rates.embedded_studies(table)  # the closed forms are scored over the regimes the sentences count
    return table, rates.predictor_fit(tiny[tiny["optimizer"] == "adamw"]), rates


def _rates(data_dir: Path) -> tuple[str, str, str]:
    """The rate study's table, predictor fit and summary as Markdown."""
    table, fit, rates = _rate_tables(data_dir)
    return rates.rate_markdown(table), rates.fit_markdown(fit), rates.rate_summary(table, fit)


def _rate_measures(data_dir: Path) -> str:
    """Both measures' slopes, side by side, in the studies whose runs logged both (the re-run ``easy`` and ``paper``)."""
    from skillgate_lib.report import rate_measures, rates

    runs = rates.all_runs(data_dir / "runs" / "speed")
    both = [s for s in ("easy", "paper") if s in set(runs["study"])]
    return _study_markdown(rate_measures.display_measures(rate_measures.measures_side_by_side(runs, both)), "lllrrr")


def _study_markdown(shown, align: str) -> str:
    """A displayed table indexed by study (and arm) as Markdown, the study names as code."""
    from skillgate_lib.report.markdown import markdown_table

    flat = shown.reset_index()
    return markdown_table(list(flat.columns), [[f"`{v}`" if k == "study" else str(v) for k, v in r.items()]
                                               for r in flat.to_dict("records")], align)


def _ratios_under_each_measure(data_dir: Path) -> str:
    """The speed ratio under each measure in every study whose runs logged both (:mod:`skillgate_lib.report.rate_measures`)."""
    from skillgate_lib.report import rate_measures, rates

    runs = rates.all_runs(data_dir / "runs" / "speed")
    ratios = rate_measures.ratios_under_each_measure(runs, rate_measures.logged_both(runs))
    return _study_markdown(rate_measures.display_ratios(ratios), "lrll")


def _lookahead(data_dir: Path) -> str:
    """The lookahead's predictions against the rate study (:mod:`skillgate_lib.report.lookahead`)."""
    from skillgate_lib.report import lookahead

    return lookahead.markdown(_rate_tables(data_dir)[0], data_dir / "runs" / "predict")


def _warmstart_readme(model_dir: Path) -> str:
    """A LoRA warm start's command, wall time, per-token accuracy and gates (:mod:`skillgate_lib.policy.lora_warmstart`)."""
    from skillgate_lib.policy.lora_warmstart import readme_text

    return readme_text(model_dir, title=False)


def _smollm2_choice(probes_dir: Path) -> str:
    """SmolLM2's regime, chosen from its committed probes by the plan's rule (:mod:`skillgate_lib.report.regime_choice`)."""
    from skillgate_lib.report import regime_choice

    found = sorted(probes_dir.glob("smollm2-*.json"))
    if not found:
        return "No SmolLM2 probe is committed yet."
    return regime_choice.choice_markdown(*regime_choice.judge(regime_choice.load(found)))


def generated_blocks(figures_dir: Path = paths.FIGURES_DIR, data_dir: Path = paths.DATA_DIR) -> dict:
    """Every generated block by name: a function of no argument that returns its Markdown."""
    from skillgate_lib.report import gradients as gradient_report
    from skillgate_lib.report import study as study_report

    diagnosis = data_dir / "runs" / "diagnosis"
    return {
        "verdict": lambda: verdict(figures_dir, data_dir),
        "study_table": lambda: (figures_dir / "results_table.md").read_text(),
        "study_table_paper": lambda: (figures_dir / "results_table_paper.md").read_text(),
        "study_search": lambda: study_report.search_markdown(data_dir / "runs" / "study" / HEADLINE_STUDY),
        "study_edge": lambda: supplement(data_dir, HEADLINE_STUDY + "-edge"),
        "study_lambda": lambda: supplement(data_dir, HEADLINE_STUDY + "-lambda", "lambda"),
        "study_curves": lambda: study_report.curves_markdown(data_dir / "runs" / "study" / HEADLINE_STUDY),
        "quick_table": lambda: (figures_dir / "results_table_quick.md").read_text(),
        "dose_response": lambda: dose_response_table(figures_dir),
        "starvation_against_gain": lambda: starvation_against_gain(figures_dir, data_dir),
        "gradient_share": lambda: gradient_report.gradient_share_table(data_dir),
        "gradient_proxy": lambda: gradient_report.gradient_proxy_table(data_dir),
        "probes": lambda: gradient_report.probes_table(data_dir),
        "rate_study": lambda: _rates(data_dir)[0],
        "rate_fit": lambda: _rates(data_dir)[1],
        "rate_summary": lambda: _rates(data_dir)[2],
        "rate_lookahead": lambda: _lookahead(data_dir),
        "rate_measures": lambda: _rate_measures(data_dir),
        "rate_under_each_measure": lambda: _ratios_under_each_measure(data_dir),
        "smollm2_warmstart": lambda: _warmstart_readme(data_dir / "models" / "smollm2-sft"),
        "smollm2_choice": lambda: _smollm2_choice(diagnosis / "probes"),
        "diagnosis_paper": lambda: diagnosis_table(diagnosis / "summary.csv", DIAGNOSIS_CONDITIONS),
        **{f"diagnosis_{d.replace('-', '_')}": (lambda d=d: diagnosis_table(diagnosis / d / "summary.csv"))
           for d in ("read-stop", *DIAGNOSED)},
    }


def refresh_document(path: Path, blocks: dict | None = None) -> tuple[str, str]:
    """``path``'s text as it is and with every generated block rewritten; an unknown block name is an error."""
    blocks = generated_blocks() if blocks is None else blocks
    text = Path(path).read_text()

    def render(match: re.Match) -> str:
        name = match.group("name")
        if name not in blocks:
            line = text[: match.start()].count("\n") + 1
            raise ValueError(f"{path}:{line}: unknown generated block {name!r}; known: {', '.join(sorted(blocks))}")
        return match.group(1) + blocks[name]() + match.group(4)

    return text, _BLOCK.sub(render, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m skillgate_lib.report.docs",
                                     description="Rewrite the generated blocks of Markdown documents from committed files.")
    parser.add_argument("documents", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block is stale")
    args = parser.parse_args(argv)
    stale = []
    for doc in args.documents:
        old, new = refresh_document(doc)
        if old != new:
            stale.append(doc)
            if not args.check:
                doc.write_text(new)
    verb = "stale" if args.check else "rewritten"
    print(f"generated blocks {verb}: {', '.join(map(str, stale)) or 'none'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
