"""Where a rate study stands (``speed --status``): read from its folder alone, beside a running study."""

from __future__ import annotations

import json

from skillgate_lib.runs import speed
from skillgate_lib.runs.study_progress import progress_lines, run_state, study_progress


def _run(root, name, steps, finished=False, test=False, partial=False):
    d = root / name
    d.mkdir(parents=True)
    lines = [{"step": 0, "split": "eval"}]
    for s in range(1, steps + 1):
        lines.append({"step": s, "split": "train", "time/step_s": 10.0 + s})
        if s % 5 == 0:
            lines.append({"step": s, "split": "eval"})
    text = "".join(json.dumps(x) + "\n" for x in lines) + ('{"step": ' if partial else "")
    (d / "metrics.jsonl").write_text(text)
    if finished:
        (d / "adapter").mkdir()
        (d / "adapter" / "adapter_config.json").write_text("{}")
    if test:
        (d / "test.json").write_text("{}")
    return d


def test_a_study_folder_reads_as_runs_per_state_and_the_work_left(tmp_path):
    plan = speed.plan_for("paper_note8")
    out = tmp_path / "study"
    out.mkdir()
    (out / "plan.json").write_text(json.dumps(plan.to_json()))
    _run(out, "outcome-lr0.001-seed0", 30, finished=True)
    _run(out, "outcome-lr0.001-seed1", 12, partial=True)  # under way; its last line half written
    _run(out, "skillgate-lr0.0003-seed0", 3)  # an extension below the grid, once its runs exist
    table = study_progress(plan, out)
    search = table[table["phase"] == "search"]
    assert len(search) == 2 * 3 * 2 + 2 and "skillgate-lr0.0003-seed1" in set(search["run"])
    row = table.set_index("run").loc["outcome-lr0.001-seed1"]
    assert (row["state"], row["step"], row["evals"]) == ("started", 12, 2)
    assert table.set_index("run").loc["outcome-lr0.001-seed0", "state"] == "finished"
    seeds = table[table["phase"] == "seeds"]
    assert len(seeds) == 2 * (plan.seeds - 2) and seeds["lr"].isna().all() and (seeds["state"] == "not started").all()
    said = "\n".join(progress_lines(table, plan, eval_s=20.0))
    assert "search: 14 runs: 1 finished, 2 started, 11 not started" in said
    assert "started: outcome-lr0.001-seed1, step 12 of 30 logged" in said and "chosen when the search ends" in said
    total, evals = len(table) * plan.steps, len(table) * 6
    assert f"logged: 45 of {total} steps, 8 of {evals} evaluations" in said
    tests = 2 * plan.seeds + 1  # the chosen runs' and the warm start's, none written yet
    assert f"left: {total - 45} steps at the median logged 20 s (1 run(s) a step), {evals - 8} evaluations and {tests} " in said
    hours = ((total - 45) * 20 + (evals - 8) * 20 + tests * 20 * plan.test_tasks / 256) / 3600
    assert f"1 worker(s): about {hours:.1f} h" in said
    together = "\n".join(progress_lines(table, plan, eval_s=20.0, workers=2, together=8))
    hours = ((total - 45) * 20 / 8 + (evals - 8) * 20 + tests * 20 * plan.test_tasks / 256) / 2 / 3600
    assert f"(8 run(s) a step)" in together and f"2 worker(s): about {hours:.1f} h" in together

    (out / "selection.json").write_text(json.dumps({m: {"value": 0.003} for m in plan.methods}))
    table = study_progress(plan, out)
    assert table["lr"].notna().all() and "skillgate-lr0.003-seed7" in set(table["run"])
    assert "chosen when the search ends" not in "\n".join(progress_lines(table, plan, eval_s=20.0))


def test_status_on_the_command_line_writes_nothing_and_names_a_folder_without_a_study(tmp_path, capsys):
    import pytest

    out = tmp_path / "study"
    out.mkdir()
    with pytest.raises(SystemExit):
        speed.speed_main(["--regime", "paper_note8", "--out-dir", str(out), "--status"])
    assert "plan.json: no study there" in capsys.readouterr().err
    plan = speed.plan_for("paper_note8")
    (out / "plan.json").write_text(json.dumps(plan.to_json()))
    before = sorted(p.name for p in out.rglob("*"))
    assert speed.speed_main(["--regime", "paper_note8", "--out-dir", str(out), "--status", "--eval-seconds", "8"]) == 0
    printed = capsys.readouterr().out
    assert "seeds: 12 runs: 12 not started" in printed and "no step timed yet" in printed
    assert sorted(p.name for p in out.rglob("*")) == before
    assert run_state(out / "nothing")["state"] == "not started"


def test_an_exported_study_reads_finished_and_another_plan_is_named(tmp_path):
    """An exported study keeps no adapters: a run that logged its last step is finished, and the test records
    written (the warm start's too) leave none to do. A folder holding another plan is refused, naming the fields."""
    import pytest

    plan = speed.plan_for("paper_note8")
    out = tmp_path / "study"
    out.mkdir()
    (out / "plan.json").write_text(json.dumps(plan.to_json()))
    (out / "selection.json").write_text(json.dumps({m: {"value": 0.003} for m in plan.methods}))
    for m in plan.methods:
        for v in plan.grid:
            for s in plan.search_seeds:
                _run(out, f"{m}-lr{v:g}-seed{s}", plan.steps, test=v == 0.003)
        for s in range(2, plan.seeds):
            _run(out, f"{m}-lr0.003-seed{s}", plan.steps, test=True)
    (out / "warmstart").mkdir()
    (out / "warmstart" / "test.json").write_text("{}")
    table = study_progress(plan, out)
    assert (table["state"] == "finished").all()
    said = "\n".join(progress_lines(table, plan, eval_s=20.0))
    assert "left: 0 steps" in said and "0 evaluations and 0 test records" in said and "about 0.0 h" in said

    with pytest.raises(ValueError, match="fields .*optimizer.* differ"):
        study_progress(speed.plan_for("paper_note8", "sgd"), out)
