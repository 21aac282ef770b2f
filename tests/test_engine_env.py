"""verl's own environment, built from scratch as a user builds it: `scripts/engine_env_check.sh`.

The kit's environment (``make install``) keeps verl out (verl 0.9.x requires ``transformers<5.11``,
Ray and a serving stack); a user of the verl integration installs ``pip install -e ".[scale,verl]"``
instead. This test builds that environment in a fresh virtual environment with every dependency
resolved by pip, and requires there: ``pip check`` clean, the kit's verl tests passing on the real
verl and Ray (none skipped), and the launch script's dry run passing. It downloads verl, Ray and
the serving stack (a few minutes; about 7 with an empty pip cache), so it is slow.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from skillgate_lib import paths

pytestmark = pytest.mark.slow

SCRIPT = paths.REPO_ROOT / "scripts" / "engine_env_check.sh"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    if shutil.which("bash") is None:
        pytest.skip("needs bash")
    venv = tmp_path_factory.mktemp("engine_env") / "venv"
    out = subprocess.run(["bash", str(SCRIPT), str(paths.REPO_ROOT), str(venv)], capture_output=True, text=True,
                         timeout=2400, env={**os.environ, "PIP_PROGRESS_BAR": "off"})
    shutil.rmtree(venv, ignore_errors=True)  # 2-3 GB
    return out.returncode, out.stdout + out.stderr


def _section(text: str, title: str) -> str:
    parts = re.split(r"^== ", text, flags=re.M)
    found = [p for p in parts if p.startswith(title)]
    assert found, f"no section {title!r} in:\n{text[-4000:]}"
    return found[0]


def test_verl_and_the_kit_install_together_and_pip_check_is_clean(report):
    code, text = report
    assert "No broken requirements found" in _section(text, "pip check"), text[-4000:]
    versions = _section(text, "versions")
    assert re.search(r"^verl\s+0\.9\.\d+", versions, re.M) and re.search(r"^ray\s+\d", versions, re.M), versions
    assert re.search(r"^transformers\s+5\.(\d+)", versions, re.M), versions


def test_the_kit_verl_tests_pass_on_the_real_verl_with_none_skipped(report):
    code, text = report
    tests = _section(text, "the kit's verl tests")
    summary = [ln for ln in tests.splitlines() if re.search(r"\d+ passed", ln)]
    assert summary and "failed" not in summary[-1] and "error" not in summary[-1], tests[-4000:]
    assert "skipped" not in summary[-1], summary[-1]


def test_the_launch_dry_run_passes_in_verls_environment(report):
    code, text = report
    dry = _section(text, "the launch's dry run")
    assert not re.search(r"^FAIL ", dry, re.M), dry[-4000:]
    assert re.search(r"^dry run: \d+ of \d+ steps passed", dry, re.M), dry[-4000:]
    assert code == 0, text[-4000:]
