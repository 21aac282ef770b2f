"""Import verl on the kit's light install, where Ray is absent (shared by the verl and TRL tests).

verl 0.9's package ``__init__`` imports ``verl.protocol``, which imports Ray at module
level only for ``ray.ObjectRef`` annotations and ``DataProtoFuture.get``. The kit's light
install has no Ray, so a minimal stand-in module is put in place when Ray is absent;
nothing in the tests calls it. ``verl.trainer.ppo.ray_trainer`` (home of
``compute_advantage``) needs the real Ray and verl's serving stack, so tests of it skip.
"""

from __future__ import annotations

import importlib.util
import sys
import types


def stub_ray_if_absent() -> None:
    """Put a stand-in ``ray`` module in ``sys.modules`` when verl is installed but Ray is not."""
    if "ray" in sys.modules or importlib.util.find_spec("ray") is not None or importlib.util.find_spec("verl") is None:
        return
    ray = types.ModuleType("ray")
    ray.ObjectRef = type("ObjectRef", (), {})

    def _unavailable(*_a, **_k):
        raise RuntimeError("Ray is not installed (light verl install for tests)")

    ray.get = ray.remote = ray.put = _unavailable
    sys.modules["ray"] = ray
