"""The one transformers API difference the kit meets across its range (5.5.3 up): what the KV cache is called.

transformers 5.25 renamed a model output's ``past_key_values`` to ``cache``, and the forward's keyword
likewise; verl 0.9.x needs transformers below 5.11, so the kit supports both names, here and nowhere else.
"""

from __future__ import annotations

from typing import Any

import transformers
from packaging.version import Version

CACHE = "cache" if Version(transformers.__version__) >= Version("5.25.0") else "past_key_values"
"""The installed transformers' name for the KV cache: a model output's attribute and the forward's keyword."""


def output_cache(output: Any) -> Any:
    """The KV cache a forward with ``use_cache=True`` returned."""
    return getattr(output, CACHE)


def with_cache(cache: Any) -> dict[str, Any]:
    """The forward's keyword argument passing ``cache`` (``model(..., **with_cache(cache))``)."""
    return {CACHE: cache}
