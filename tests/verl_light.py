"""Import verl on the kit's light install, where Ray is absent (shared by the verl and TRL tests).

verl 0.9's package ``__init__`` imports ``verl.protocol``, which imports Ray at module level
only for ``ray.ObjectRef`` annotations and ``DataProtoFuture.get``; its reward loop and agent
loop modules import ``ray.actor`` and friends for type annotations and ``@ray.remote`` class
decorators. The kit's light install has no Ray, so a stand-in package is put in place when Ray
is absent: any ``ray.<sub>`` module imports, any attribute is a placeholder class, ``ray.remote``
leaves what it decorates unchanged, and anything that would talk to a Ray cluster raises.
Nothing in the tests calls Ray. ``verl.trainer.ppo.ray_trainer`` (home of ``compute_advantage``)
and verl's v1 trainers need the real Ray and verl's serving stack, so tests of them skip.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types


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


def stub_ray_if_absent() -> None:
    """Put a stand-in ``ray`` package in place when verl is installed but Ray is not."""
    if "ray" in sys.modules or importlib.util.find_spec("ray") is not None or importlib.util.find_spec("verl") is None:
        return
    sys.meta_path.insert(0, _RayFinder())
