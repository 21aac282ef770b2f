"""The verl launch's dry run (integrations/verl_dry_run.py): ``DRY_RUN=1 bash examples/verl/skillgate_grpo.sh``
checks every part of the launch that can run without Ray or a GPU.

The script runs as a user runs it, in a subprocess. On the kit's light install (verl without Ray) a
``sitecustomize`` puts the Ray stand-in of :mod:`verl_light` in place in every Python the script starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import verl_light

from skillgate_lib import paths

verl_light.stub_ray_if_absent()
pytest.importorskip("verl")
pytest.importorskip("hydra")

SCRIPT = paths.REPO_ROOT / "examples" / "verl" / "skillgate_grpo.sh"
MODEL = paths.DATA_DIR / "models" / "tiny-sft"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def launch(tmp_path_factory):
    """Run the launch script's dry run with extra ``key=value`` overrides; returns (exit status, output)."""
    root = tmp_path_factory.mktemp("verl_dry_run")
    subprocess.run([sys.executable, str(paths.REPO_ROOT / "examples" / "verl" / "make_data.py"), "--regime", "paper",
                    "--out", str(root / "data"), "--n-train", "16", "--n-val", "4"], check=True, capture_output=True)
    (root / "site").mkdir()
    (root / "site" / "sitecustomize.py").write_text(
        f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\nimport verl_light\nverl_light.stub_ray_if_absent()\n")

    def run(*overrides: str) -> tuple[int, str]:
        env = {**os.environ, "DRY_RUN": "1", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               "PYTHONPATH": os.pathsep.join([str(root / "site"), str(paths.REPO_ROOT)])}
        env.pop("SKILLGATE_SELECTOR_COEF", None)
        out = subprocess.run(["bash", str(SCRIPT), str(MODEL), str(root / "data" / "train.parquet"),
                              str(root / "data" / "val.parquet"), *overrides],
                             capture_output=True, text=True, env=env, cwd=root, timeout=600)
        return out.returncode, out.stdout + out.stderr

    return run


def _line(output: str, step: str) -> str:
    found = [ln for ln in output.splitlines() if ln[6:].split(" ")[0] == step and ln[:4] in ("ok  ", "FAIL", "skip")]
    assert found, f"no line for step {step!r} in:\n{output[-3000:]}"
    return found[-1]


def test_the_launch_passes_its_dry_run(launch):
    code, out = launch("trainer.total_training_steps=2", "skillgate.selector_coef=0.3")
    assert code == 0, out[-3000:]
    for step in ("compose", "registries", "validate", "data", "reward", "tools", "prompt"):  # parser, trainer: verl-core
        assert _line(out, step).startswith("ok"), _line(out, step)
    assert "lambda 0.3" in _line(out, "lambda")
    assert "16 skills" in _line(out, "data") and "0 for an empty response" in _line(out, "reward")
    assert _line(out, "engine").startswith(("ok", "skip"))  # vLLM: a GPU machine's


def test_an_override_verl_does_not_have_fails_by_name(launch):
    code, out = launch("actor_rollout_ref.actor.no_such_knob=1")
    assert code == 1
    assert _line(out, "compose").startswith("FAIL") and "no_such_knob" in _line(out, "compose")


def test_verls_validation_runs_on_the_launch(launch):
    """The launch before its dry run set no micro-batch size, which verl's own validation refuses."""
    code, out = launch("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=null")
    assert code == 1
    assert _line(out, "validate").startswith("FAIL") and "micro_batch_size" in _line(out, "validate")
