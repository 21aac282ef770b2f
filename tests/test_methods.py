"""The method registry: one entry is all a new method needs; reading results loads no trainer."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from skillgate_lib import paths, plots
from skillgate_lib.report import comparison, results
from skillgate_lib.runs import compare, train

TRAINER_MODULES = ("skillgate_lib.runs.train", "skillgate_lib.runs.compare", "skillgate_lib.policy.rollout", "skillgate_lib.policy.warmstart",
                   "skillgate_lib.runs.evaluate", "skillgate_lib.policy.models", "peft", "transformers")


def test_a_registered_method_runs_through_compare_report_and_the_cli(registry, tiny_model_dir, tmp_path):
    toy = registry.register(registry.Method("toy", "toy baseline", "#123456", credit="outcome", skill_free=True))
    assert compare.build_parser().parse_args(["--methods", "toy", "outcome"]).methods == ["toy", "outcome"]
    assert "toy" in compare.build_parser().parse_args([]).methods  # in the default comparison
    cfg = train.TrainConfig(method="toy")
    assert (cfg.credit, cfg.skill_free, cfg.run_dir.endswith("toy-seed0")) == ("outcome", True, True)

    # A spawned worker trains it: the registration travels with the run.
    final = compare.compare(["toy"], seeds=(0,), out_dir=tmp_path, workers=1, progress=False, model=str(tiny_model_dir),
                            steps=1, prompts_per_step=2, group_size=4, max_new_tokens=48, eval_tasks=8, eval_every=1)
    config = json.loads((tmp_path / "toy-seed0" / "config.json").read_text())
    assert (config["method"], config["credit"], config["skill_free"]) == ("toy", "outcome", True)
    assert not train.make_env(cfg).show_slate  # skill-free (a field of the entry): trained without the slate
    assert list(final["method"]) == ["toy"]  # and no sft row
    assert set(results.learning_curves(tmp_path)["method"]) == {"toy"}

    table = comparison.results_table(results.final_eval_trajectories(tmp_path))
    assert list(table["method"]) == ["toy"] and int(table["seeds"].iloc[0]) == 1
    assert comparison.results_markdown(table).splitlines()[-1].startswith("| toy baseline (`toy`) | 1 |")
    assert comparison.results_markdown(table).rstrip().endswith("| – | – | – |")  # no paper row named
    assert plots.METHOD_COLORS["toy"] == toy.color


def test_registry_fields_replace_name_checks(registry):
    with pytest.raises(ValueError, match="unknown method 'nope'; choose one of: sft, "):
        registry.get("nope")
    with pytest.raises(ValueError, match="results-only row"):
        train.TrainConfig(method="sft")
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.get("outcome"))
    assert train.TrainConfig(credit="outcome", skill_free=True).method == "skill_free"  # settings name the method
    assert [m for m in registry.METHODS.values() if m.needs_skill_values] == [registry.get("utility")]
    assert set(registry.trainable()) >= set(registry.compared())
    assert "sft" not in registry.trainable() and "sft" in plots.METHOD_COLORS


def test_reading_results_and_building_the_table_loads_no_trainer():
    """What `make figures` runs (its notebooks' imports, then the table from the committed runs) imports no trainer."""
    import yaml

    notebooks = yaml.safe_load((paths.REPO_ROOT / "notebooks" / "profiles.yaml").read_text())["figures"]
    assert "04_paper_figures" in notebooks
    imports = []
    for name in notebooks:
        nb = json.loads((paths.REPO_ROOT / "notebooks" / f"{name}.ipynb").read_text())
        imports += [line for cell in nb["cells"] if cell["cell_type"] == "code"
                    for line in "".join(cell["source"]).splitlines() if line.startswith(("import ", "from "))]
    assert any("results" in line for line in imports)
    code = "\n".join([*imports, "from skillgate_lib.report import comparison, results",
                      f"t = comparison.results_table(results.final_eval_trajectories({str(paths.DATA_DIR / 'runs' / 'compare')!r}))",
                      "assert len(t) >= 7, t",
                      "import sys; print(' '.join(sorted(sys.modules)))"])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=paths.REPO_ROOT / "notebooks")
    assert out.returncode == 0, out.stderr
    loaded = set(out.stdout.split())
    assert "skillgate_lib.report.results" in loaded
    assert not loaded & set(TRAINER_MODULES), sorted(loaded & set(TRAINER_MODULES))


def test_a_run_logged_twice_is_named_not_averaged(tmp_path):
    """Two processes writing one run leave every evaluation twice: the reader says so, naming the file and field."""
    import shutil

    from skillgate_lib.logs import ArtifactError

    run = tmp_path / "outcome-seed0"
    run.mkdir()
    src = paths.DATA_DIR / "runs" / "compare" / "outcome-seed0"
    shutil.copy(src / "config.json", run)
    shutil.copy(src / "metrics.jsonl", run)
    assert len(results.final_metrics(tmp_path)) == 2  # sft and outcome
    lines = (src / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run / "metrics.jsonl").write_text("".join(line + line for line in lines))
    with pytest.raises(ArtifactError, match=r"outcome-seed0/metrics.jsonl: field 'step': evaluation of step\(s\) \[0, 10"):
        results.final_metrics(tmp_path)

