"""A dry run of the verl launch: every part of ``examples/verl/skillgate_grpo.sh`` that can run without Ray or a GPU.

``DRY_RUN=1 bash examples/verl/skillgate_grpo.sh MODEL [TRAIN [VAL]] [key=value ...]`` (or
``python -m skillgate_lib.integrations.verl_runner --dry-run OVERRIDES...``) takes the launch's own
overrides through the same path as the real launch (:func:`~skillgate_lib.integrations.verl_runner.runner_argv`)
and checks, in order, stopping nowhere:

1. **compose**: verl's ``ppo_trainer`` Hydra config accepts every override (a key verl does not
   have, such as one renamed between verl releases, fails here, naming it);
2. **registries**: the estimator and reward manager the config names are registered by the worker
   hook; so are the tool parser and the ``skillgate_sync`` trainer where verl's agent loop and
   TransferQueue import (verl's ``verl-core`` extra, with Ray: skipped otherwise, and said so);
3. **validate**: verl's own ``validate_config`` (batch sizes against GPUs, micro-batch sizes, loss settings),
   then every interpolation resolved;
4. **lambda**: the selector weight every worker will apply;
5. **data**: the train and validation parquet files exist and their first row rebuilds its task
   and slate (:func:`~skillgate_lib.integrations.verl_data.episode_of`);
6. **reward**: the custom reward function loads from its path and scores the first row's empty response;
7. **tools**: the tool config builds the ``read`` tool;
8. **engine**: the rollout engine is installed (vLLM: not on this machine, skipped and said so; the
   validation above then runs with a stand-in for verl's vLLM import);
9. **prompt**: where MODEL is a local directory, its tokenizer renders the first row with the
   config's chat template within ``data.max_prompt_length`` (a Hub id is not downloaded: skipped).

What it cannot check: Ray's workers, the rollout engine (vLLM) and the GPUs.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence


@dataclass
class Check:
    """One step of the dry run: ``ok`` True, False (failed) or None (not checkable here), and what was found."""

    name: str
    ok: bool | None
    detail: str


class _Skip(Exception):
    """A step that cannot be checked on this install (its message says why)."""


def _config_dir() -> Path:
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        from skillgate_lib.integrations.deps import missing

        raise missing(ModuleNotFoundError("No module named 'verl'", name="verl"), "the verl dry run")
    return Path(list(spec.submodule_search_locations)[0]) / "trainer" / "config"


def compose(overrides: Sequence[str]):
    """verl's ``ppo_trainer`` config with ``overrides`` (Hydra's own composition, as ``main_ppo`` gets it)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(_config_dir()), version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=list(overrides))


#: The LoRA ranks vLLM serves (verl's own fallback list, ``vllm_rollout.utils.get_vllm_max_lora_rank``).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


@contextlib.contextmanager
def _engine_absent(name: str):
    """verl's validation ends by checking the LoRA rank against vLLM's (``verl.workers.rollout.vllm_rollout.utils``),
    an import that raises where vLLM is not installed (this machine: vLLM needs a GPU). Where it is absent, a
    stand-in module with the same check takes that import's place for the validation only; yields whether it did."""
    package = "verl.workers.rollout.vllm_rollout"
    if name != "vllm" or importlib.util.find_spec("vllm") is not None or package in sys.modules:
        yield False
        return

    def get_vllm_max_lora_rank(lora_rank: int) -> int:
        if not 0 < lora_rank <= VLLM_LORA_RANKS[-1]:
            raise ValueError(f"lora_rank must be in 1..{VLLM_LORA_RANKS[-1]} for vLLM, got {lora_rank}")
        return next(r for r in VLLM_LORA_RANKS if lora_rank <= r)

    stand_in, utils = types.ModuleType(package), types.ModuleType(package + ".utils")
    stand_in.__path__, utils.get_vllm_max_lora_rank, stand_in.utils = [], get_vllm_max_lora_rank, utils
    sys.modules[package], sys.modules[package + ".utils"] = stand_in, utils
    try:
        yield True
    finally:
        sys.modules.pop(package, None)
        sys.modules.pop(package + ".utils", None)


def _first_row(path: str):
    import pandas as pd

    if not Path(path).exists():
        raise FileNotFoundError(f"{path}: no such file (write it with examples/verl/make_data.py)")
    table = pd.read_parquet(path)
    missing = [c for c in ("prompt", "reward_model", "extra_info") if c not in table.columns]
    if missing:
        raise KeyError(f"{path}: no column {missing[0]!r} (columns: {', '.join(table.columns)})")
    if table.empty:
        raise ValueError(f"{path}: no rows")
    return len(table), table.iloc[0]


def _plain(value: Any) -> Any:
    """A parquet row's nested values (numpy arrays, mappings) as lists and dicts."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def dry_run(argv: Sequence[str], environ: dict[str, str] | None = None) -> list[Check]:
    """The checks of the module docstring for the launch arguments ``argv`` (verl's overrides plus the kit's
    ``skillgate.selector_coef``); ``environ`` (default: a copy of ``os.environ``) is not modified."""
    from skillgate_lib.integrations.verl_runner import runner_argv

    environ = dict(os.environ if environ is None else environ)
    checks: list[Check] = []

    def step(name: str, fn: Callable[[], str]) -> bool:
        try:
            checks.append(Check(name, True, fn()))
        except _Skip as why:
            checks.append(Check(name, None, str(why)))
        except Exception as err:  # noqa: BLE001 - every failure is reported, and the run goes on
            checks.append(Check(name, False, f"{type(err).__name__}: " + " ".join(str(err).split())))  # one line
            return False
        return True

    overrides = runner_argv(list(argv), environ)
    box: dict[str, Any] = {}

    def do_compose():
        box["cfg"] = compose(overrides)
        return f"{len(overrides)} overrides accepted by verl's ppo_trainer config"

    if not step("compose", do_compose):
        return checks
    cfg = box["cfg"]

    def registries():
        from skillgate_lib.integrations import verl as sg
        from skillgate_lib.integrations.verl_runner import reward_manager_class
        from verl.experimental.reward_loop.reward_manager.registry import get_reward_manager_cls
        from verl.trainer.ppo.core_algos import get_adv_estimator_fn

        sg.register()
        reward_manager_class()
        get_adv_estimator_fn(cfg.algorithm.adv_estimator)
        found = [f"estimator {cfg.algorithm.adv_estimator}"]
        if cfg.reward.reward_manager.get("source") == "register":
            get_reward_manager_cls(cfg.reward.reward_manager.name)
            found.append(f"reward manager {cfg.reward.reward_manager.name}")
        return ", ".join(found)

    step("registries", registries)

    def parser():
        multi_turn = cfg.actor_rollout_ref.rollout.multi_turn
        if not multi_turn.enable:
            return "multi-turn off: no tool parser"
        try:
            from skillgate_lib.integrations.verl_tool import register_parser
            from verl.experimental.agent_loop.tool_parser import ToolParser

            register_parser()
        except ImportError as err:  # verl's agent loop imports its serving stack (verl-core): not on the light install
            raise _Skip(f"not checkable on this install ({type(err).__name__}: {err}; verl's verl-core extra)") from err
        if multi_turn.format not in ToolParser._registry:
            raise KeyError(f"actor_rollout_ref.rollout.multi_turn.format={multi_turn.format}: no such tool parser "
                           f"(registered: {', '.join(sorted(ToolParser._registry))})")
        return f"tool parser {multi_turn.format}"

    step("parser", parser)

    def trainer():
        if not cfg.trainer.get("use_v1", False):
            return "trainer.use_v1=false: verl's legacy trainer, which the kit does not extend"
        try:
            from skillgate_lib.integrations.verl_runner import trainer_class
            from verl.trainer.ppo.v1 import get_trainer_cls

            trainer_class()
        except (ImportError, RuntimeError) as err:  # TransferQueue needs Ray: the light install has neither
            raise _Skip(f"not checkable on this install ({type(err).__name__}: {err}; verl's verl-core extra)") from err
        get_trainer_cls(cfg.trainer.v1.trainer_mode)
        return f"trainer {cfg.trainer.v1.trainer_mode}"

    step("trainer", trainer)

    def validate():
        from omegaconf import OmegaConf
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
        from verl.utils.config import validate_config
        from verl.utils.device import auto_set_device

        auto_set_device(cfg)
        with _engine_absent(cfg.actor_rollout_ref.rollout.name) as stubbed:
            validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
        OmegaConf.resolve(cfg)
        shape = (f"{cfg.trainer.n_gpus_per_node} GPUs x {cfg.trainer.nnodes} node(s), batch {cfg.data.train_batch_size} "
                 f"x {cfg.actor_rollout_ref.rollout.n} rollouts, mini-batch {cfg.actor_rollout_ref.actor.ppo_mini_batch_size}")
        return ("vLLM's LoRA-rank check by a stand-in (vLLM not installed): " if stubbed else "") + shape

    step("validate", validate)

    def engine():
        name = cfg.actor_rollout_ref.rollout.name
        if importlib.util.find_spec(name) is None:
            raise _Skip(f"rollout engine {name} not installed (a GPU machine: pip install 'verl[{name}]==0.9.1')")
        from importlib.metadata import version

        return f"rollout engine {name} {version(name)}"

    step("engine", engine)

    def coef():
        from skillgate_lib.integrations import verl as sg

        value = sg.env_selector_coef(environ)
        return f"lambda {value:g} in every worker ({sg.SELECTOR_COEF_ENV})" if value is not None else \
            f"lambda: the estimator's default ({sg.SELECTOR_COEF_ENV} unset)"

    step("lambda", coef)

    def data():
        from skillgate_lib.integrations.verl_data import episode_of, regime_env

        out = []
        for key in ("train_files", "val_files"):
            paths = cfg.data[key]
            paths = [paths] if isinstance(paths, str) else list(paths)
            for path in paths:
                rows, row = _first_row(path)
                extra = _plain(row["extra_info"])
                task, slate = episode_of(regime_env(extra), extra)
                box.setdefault("row", row)
                out.append(f"{Path(path).name}: {rows} rows, first task {task.task_id} with {len(slate.names)} skills")
        return "; ".join(out)

    step("data", data)

    def reward():
        if "row" not in box:
            raise RuntimeError("no data row to score (the data check failed)")
        from verl.trainer.ppo.reward import get_custom_reward_fn

        fn = get_custom_reward_fn(cfg)
        if fn is None:
            raise KeyError("reward.custom_reward_function.path is not set")
        row = box["row"]
        score = fn(row.get("data_source", ""), "", _plain(row["reward_model"])["ground_truth"], _plain(row["extra_info"]))
        score = score["score"] if isinstance(score, dict) else score
        return f"{cfg.reward.custom_reward_function.name} from {Path(cfg.reward.custom_reward_function.path).name}: " \
               f"{float(score):g} for an empty response"

    step("reward", reward)

    def tools():
        path = cfg.actor_rollout_ref.rollout.multi_turn.get("tool_config_path")
        if not path:
            return "no tool config (multi-turn off)"
        from verl.tools.tool_registry import initialize_tools_from_config

        names = [t.name for t in initialize_tools_from_config(path)]
        if "read" not in names:
            raise KeyError(f"{path}: builds {names}, not the kit's read tool")
        return f"{Path(path).name}: tools {', '.join(names)}"

    step("tools", tools)

    def prompt():
        model = cfg.actor_rollout_ref.model.path
        if not Path(str(model)).is_dir():
            raise _Skip(f"{model}: not a local directory (a Hub id is not downloaded)")
        if "row" not in box:
            raise RuntimeError("no data row to render (the data check failed)")
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model)
        template = cfg.actor_rollout_ref.model.get("custom_chat_template")
        messages = _plain(box["row"]["prompt"])
        ids = tokenizer.apply_chat_template(messages, chat_template=template, add_generation_prompt=True, tokenize=True)
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        if len(ids) > cfg.data.max_prompt_length:
            raise ValueError(f"the first prompt is {len(ids)} tokens, over data.max_prompt_length={cfg.data.max_prompt_length}")
        return f"first prompt {len(ids)} tokens (max {cfg.data.max_prompt_length}) with the config's chat template"

    step("prompt", prompt)
    return checks


def dry_run_table(checks: Sequence[Check]) -> str:
    """The checks as aligned lines: ``ok``, ``FAIL`` or ``skip``, the step, what was found."""
    mark = {True: "ok  ", False: "FAIL", None: "skip"}
    width = max(len(c.name) for c in checks)
    return "\n".join(f"{mark[c.ok]}  {c.name:<{width}}  {c.detail}" for c in checks)
