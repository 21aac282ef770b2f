"""A missing engine package is an error with the exact ``pip install`` command (and no package index's address)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from skillgate_lib.integrations.deps import import_engine, install_hint, missing


def _hides(modules: tuple[str, ...]) -> str:
    """Python source that makes ``modules`` look absent: ``find_spec`` gives None and ``import`` raises ModuleNotFoundError."""
    return f"import sys\nfor m in {modules!r}:\n    sys.modules[m] = None\n"


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode != 0, out.stdout
    return out.stderr.strip().splitlines()[-1]


def _no_index(message: str) -> None:
    assert "http" not in message and "pypi" not in message.lower() and "index" not in message.lower(), message


def test_the_hint_is_the_pip_command():
    assert install_hint("datasets") == "pip install datasets" and install_hint("ray.actor") == "pip install ray"
    assert install_hint("verl.trainer") == "pip install verl==0.9.1"
    err = missing(ModuleNotFoundError("No module named 'datasets'", name="datasets"), "env_dataset")
    assert str(err) == "env_dataset needs the 'datasets' package, which is not installed: pip install datasets"
    with pytest.raises(ImportError, match="x needs the 'no_such_pkg_zz' package, which is not installed: pip install no_such_pkg_zz"):
        import_engine("no_such_pkg_zz.sub", "x")


def test_trl_env_dataset_without_datasets_says_pip_install_datasets():
    message = _run(_hides(("datasets",)) + "from skillgate_lib.integrations.trl_env import env_dataset\n"
                   "from skillgate_lib.env import SkillSlateEnv\nenv_dataset(SkillSlateEnv(), 1)")
    assert message == ("ImportError: skillgate_lib.integrations.trl.env_dataset needs the 'datasets' package, "
                       "which is not installed: pip install datasets")
    _no_index(message)


def test_the_trl_integration_without_trl_says_pip_install_trl():
    message = _run(_hides(("trl",)) + "import skillgate_lib.integrations.trl")
    assert message.startswith("ImportError: skillgate_lib.integrations.trl needs the 'trl' package") and \
        message.endswith('pip install "trl>=1.16,<1.17"'), message
    _no_index(message)


def test_verl_register_without_verl_says_pip_install_verl():
    message = _run(_hides(("verl", "ray")) + "import skillgate_lib.integrations.verl as m\nm.register()")
    assert message == ("ImportError: skillgate_lib.integrations.verl.register needs the 'verl' package, which is not "
                       "installed: pip install verl==0.9.1")
    _no_index(message)


def test_the_verl_launch_without_ray_says_pip_install_ray():
    import importlib.util

    import verl_light

    verl_light.use_light_copy()
    if importlib.util.find_spec("verl") is None:
        pytest.skip("needs verl (installed, or the Makefile's copy for the tests), to reach its import of Ray")
    path = f"import sys\nsys.path.append({str(verl_light.light_copy())!r})\n"
    message = _run(path + _hides(("ray",)) + "from skillgate_lib.integrations import verl_runner\n"
                   "verl_runner.main(['trainer.total_training_steps=1'])")
    assert message == ("ImportError: skillgate_lib.integrations.verl_runner needs the 'ray' package, which is not "
                       "installed: pip install ray"), message
    _no_index(message)
