"""verl's own code for the tests, in the kit's environment where verl is not installed (shared by the verl and TRL tests).

The kit's environment (``make install``) does not install verl: verl 0.9.x requires
``transformers<5.11``, Ray and a serving stack, and ``pip check`` there would not be clean. The
Makefile puts a copy of verl 0.9.1 (with tensordict and pyvers, without their dependencies) beside
the environment, in ``<venv>/verl-light`` (or where ``SKILLGATE_VERL_LIGHT`` points);
:func:`stub_ray_if_absent` appends that folder to ``sys.path`` when verl is not importable
otherwise, so a real verl install (``pip install -e ".[scale,verl]"``) always takes precedence.

verl 0.9's package ``__init__`` imports ``verl.protocol``, which imports Ray at module level
only for ``ray.ObjectRef`` annotations and ``DataProtoFuture.get``; its reward loop and agent
loop modules import ``ray.actor`` and friends for type annotations and ``@ray.remote`` class
decorators. Where Ray is absent a stand-in package is put in place: any ``ray.<sub>`` module imports, any
attribute is a placeholder class, ``ray.remote``
leaves what it decorates unchanged, and anything that would talk to a Ray cluster raises.
Nothing in the tests calls Ray. ``verl.trainer.ppo.ray_trainer`` (home of ``compute_advantage``)
and verl's v1 trainers need the real Ray and verl's serving stack, so tests of them skip.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from pathlib import Path


def _unavailable(*_a, **_k):
    raise RuntimeError("Ray is not installed (light verl install for tests)")


def _remote(*args, **_k):
    if len(args) == 1 and callable(args[0]):
        return args[0]
    return lambda obj: obj


class _StandIn(types.ModuleType):
    """A ``ray`` module: unknown attributes are placeholder classes (for annotations and base classes)."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        value = type(name, (), {"__init__": _unavailable})
        setattr(self, name, value)
        return value


class _RayFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "ray" or fullname.startswith("ray."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return _StandIn(spec.name)

    def exec_module(self, module):
        module.__path__ = []
        if module.__name__ == "ray":
            module.get = module.put = module.init = module.kill = module.wait = _unavailable
            module.remote = module.method = _remote
            module.is_initialized = lambda: False


def light_copy() -> Path:
    """Where the Makefile puts the tests' copy of verl: ``SKILLGATE_VERL_LIGHT``, else ``<venv>/verl-light``."""
    return Path(os.environ.get("SKILLGATE_VERL_LIGHT") or Path(sys.prefix) / "verl-light")


def use_light_copy() -> None:
    """Append the tests' copy of verl to ``sys.path`` when verl is not importable otherwise (a real install wins)."""
    path = light_copy()
    if importlib.util.find_spec("verl") is None and (path / "verl").is_dir() and str(path) not in sys.path:
        sys.path.append(str(path))
        importlib.invalidate_caches()


def stub_ray_if_absent() -> None:
    """verl's tests copy on the path where verl is not installed, and a stand-in ``ray`` package when Ray is absent."""
    use_light_copy()
    if "ray" in sys.modules or importlib.util.find_spec("ray") is not None or importlib.util.find_spec("verl") is None:
        return
    sys.meta_path.insert(0, _RayFinder())
