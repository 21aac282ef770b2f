r"""Run verl's PPO/GRPO entry point with SkillGate registered in every Ray worker.

Registries are per process: ``register_adv_est`` run in the driver does not exist in
the ``TaskRunnerV1`` actor that builds the trainer, nor in the reward-loop workers. This
entry point adds a Ray ``worker_process_setup_hook`` (:func:`setup_worker`) to the job's
``runtime_env``, so each worker process imports the SkillGate pieces before it runs
anything, then hands over to verl's own ``verl.trainer.main_ppo.main``::

    python -m skillgate_lib.integrations.verl_runner algorithm.adv_estimator=skillgate \
        trainer.v1.trainer_mode=skillgate_sync reward.reward_manager.name=skillgate ...

(``examples/verl/skillgate_grpo.sh`` is a complete command.) One override is the kit's own and
not verl's: ``skillgate.selector_coef=LAMBDA`` (the selector channel's weight), which :func:`main`
takes out of the command line and exports to every Ray worker as
:data:`~skillgate_lib.integrations.verl.SELECTOR_COEF_ENV` (the variable set in the launching shell
is passed on the same way). :func:`setup_worker` registers

* the ``skillgate`` and ``skillgate_utility`` advantage estimators (:func:`skillgate_lib.integrations.verl.register`);
* the ``skillgate`` reward manager (:func:`reward_manager_class`): verl's ``naive`` manager plus the
  read annotation ``reward_extra_info["skillgate_reads"]`` (:func:`~skillgate_lib.integrations.verl.reward_extra_info`);
* the ``skillgate_read`` tool parser of verl's tool agent loop (:func:`skillgate_lib.integrations.verl_tool.register_parser`);
* the ``skillgate_sync`` trainer (:func:`trainer_class`): verl's ``sync`` v1 trainer whose
  ``_compute_advantage`` fetches those annotations from the TransferQueue (:func:`read_annotations`
  decodes them) and runs verl's own ``_compute_advantage`` inside
  :func:`~skillgate_lib.integrations.verl.read_annotation`.

What runs where. The tests run, on verl 0.9.1's own classes and data structures without Ray
(verl's package imports Ray; the tests put a stand-in module in its place): the estimators
through verl's registry, :func:`setup_worker` (with the trainer's registration left out), the
reward manager's ``run_single`` on a ``DataProto``, :func:`read_annotations`, the read tool and
the tool parser. ``--dry-run`` (:mod:`skillgate_lib.integrations.verl_dry_run`) checks the launch up to Ray:
verl's config with every override, the registries (the trainer subclass included, where TransferQueue
imports), verl's validation, the data, reward and tool. Training itself needs Ray, a rollout engine and
GPUs: it has not run here.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Iterable, Sequence

from skillgate_lib.integrations.deps import missing

HOOK = "skillgate_lib.integrations.verl_runner.setup_worker"
TRAINER_MODE = "skillgate_sync"
REWARD_MANAGER = "skillgate"
SELECTOR_COEF_KEY = "skillgate.selector_coef"
"""The command-line override that sets lambda (``skillgate.selector_coef=0.3``); not passed on to verl's Hydra."""
_CLASSES: dict[str, type] = {}


def reward_manager_class() -> type:
    """verl's reward manager ``skillgate`` (registered once per process): ``naive`` plus each response's reads."""
    if REWARD_MANAGER in _CLASSES:
        return _CLASSES[REWARD_MANAGER]
    try:
        from verl.experimental.reward_loop.reward_manager import register
        from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    except ModuleNotFoundError as err:
        raise missing(err, "the skillgate reward manager") from err

    from skillgate_lib.integrations import verl as sg

    @register(REWARD_MANAGER)
    class SkillGateRewardManager(NaiveRewardManager):
        """verl's naive reward manager plus each response's read annotation."""

        async def run_single(self, data):
            out = await super().run_single(data)
            out["reward_extra_info"].update(sg.reward_extra_info(data[-1:][0], self.tokenizer))
            return out

    _CLASSES[REWARD_MANAGER] = SkillGateRewardManager
    return SkillGateRewardManager


def read_annotations(keys: Sequence[Any], extra_fields: Iterable[Any]) -> tuple[list, list]:
    """Each sample's reads and skill names from its ``extra_fields["reward_extra_info"]`` (the reward manager's payload).

    A sample without the payload is an error naming its key and the reward manager to set.
    """
    from skillgate_lib.integrations import verl as sg

    reads, names = [], []
    for key, fields in zip(keys, extra_fields):
        info = (fields or {}).get("reward_extra_info", {})
        if sg.READS_KEY not in info:
            raise KeyError(f"sample {key}: reward_extra_info has no {sg.READS_KEY!r}; "
                           f"set reward.reward_manager.name={REWARD_MANAGER}")
        reads.append(sg.decode_reads(info[sg.READS_KEY], where=f"sample {key}"))
        names.append(sg.decode_read_names(info[sg.READS_KEY], where=f"sample {key}"))
    return reads, names


def trainer_class() -> type:
    """verl's v1 trainer ``skillgate_sync`` (registered once per process); needs TransferQueue (and so Ray)."""
    if TRAINER_MODE in _CLASSES:
        return _CLASSES[TRAINER_MODE]
    try:
        from verl.trainer.ppo.v1 import PPOTrainerSync, register_trainer
    except ModuleNotFoundError as err:
        raise missing(err, "the skillgate_sync trainer") from err

    from skillgate_lib.integrations import verl as sg

    @register_trainer(TRAINER_MODE)
    class SkillGateTrainer(PPOTrainerSync):
        """verl's sync v1 trainer; the advantage step sees each row's reads."""

        def _compute_advantage(self, batch, metrics):
            if self.config.algorithm.adv_estimator not in sg.ESTIMATORS:
                return super()._compute_advantage(batch, metrics)
            import transfer_queue as tq

            data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
            reads, names = read_annotations(batch.keys, data["extra_fields"].tolist())
            with sg.read_annotation(reads, names):
                return super()._compute_advantage(batch, metrics)

    _CLASSES[TRAINER_MODE] = SkillGateTrainer
    return SkillGateTrainer


def setup_worker() -> None:
    """Register SkillGate's estimators, reward manager, tool parser and trainer in this process (idempotent),
    and apply lambda from :data:`~skillgate_lib.integrations.verl.SELECTOR_COEF_ENV` when it is set."""
    from skillgate_lib.integrations import verl as sg

    try:
        from skillgate_lib.integrations.verl_tool import register_parser
    except ModuleNotFoundError as err:
        raise missing(err, "skillgate_lib.integrations.verl_runner.setup_worker") from err

    sg.configure_from_env()
    sg.register()
    reward_manager_class()
    register_parser()
    trainer_class()


def chat_template_override(key: str = "actor_rollout_ref.model.custom_chat_template") -> str:
    """The Hydra override giving verl's tokenizer the kit's chat template (:data:`skillgate_lib.integrations.kit_chat.CHAT_TEMPLATE`).

    The template holds quotes and braces, so it is passed as a quoted Hydra string with ``\\`` and ``'`` escaped.
    """
    from skillgate_lib.integrations.kit_chat import CHAT_TEMPLATE

    return f"{key}='" + CHAT_TEMPLATE.replace("\\", "\\\\").replace("'", "\\'") + "'"


def runner_argv(argv: Sequence[str], environ: dict[str, str] | None = None) -> list[str]:
    """verl's overrides for ``argv``: ``skillgate.selector_coef=X`` taken out (and put in ``environ``, default
    ``os.environ``, as :data:`~skillgate_lib.integrations.verl.SELECTOR_COEF_ENV`), lambda passed to every Ray
    worker's environment when set, and :func:`setup_worker` as every worker's setup hook. The last of several
    ``skillgate.selector_coef`` overrides wins, as in Hydra."""
    from skillgate_lib.integrations.verl import SELECTOR_COEF_ENV, env_selector_coef

    environ = os.environ if environ is None else environ
    out = []
    for arg in argv:
        key, sep, value = arg.lstrip("+").partition("=")
        if sep and key == SELECTOR_COEF_KEY:
            environ[SELECTOR_COEF_ENV] = value
        else:
            out.append(arg)
    if environ.get(SELECTOR_COEF_ENV):
        env_selector_coef(environ)  # a bad value fails here, before Ray starts
        out.append(f"++ray_kwargs.ray_init.runtime_env.env_vars.{SELECTOR_COEF_ENV}={environ[SELECTOR_COEF_ENV]}")
    out.append(f"++ray_kwargs.ray_init.runtime_env.worker_process_setup_hook={HOOK}")
    return out


def main(argv: list[str] | None = None) -> None:
    """verl's ``main_ppo`` with :func:`setup_worker` in the driver and as every worker's setup hook; with
    ``--dry-run`` first, the checks of :mod:`skillgate_lib.integrations.verl_dry_run` instead (exit 1 on a failure)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--dry-run" in argv:
        from skillgate_lib.integrations.verl_dry_run import dry_run, dry_run_table

        checks = dry_run([a for a in argv if a != "--dry-run"])
        print(dry_run_table(checks))
        failed = [c.name for c in checks if c.ok is False]
        skipped = [c.name for c in checks if c.ok is None]
        print(f"dry run: {len(checks) - len(failed) - len(skipped)} of {len(checks)} steps passed"
              + (f", skipped: {', '.join(skipped)}" if skipped else "")
              + (f"; FAILED: {', '.join(failed)}" if failed else "; Ray's workers and the GPUs are never checked"))
        raise SystemExit(1 if failed else 0)
    argv = runner_argv(argv)
    try:
        from verl.trainer import main_ppo
    except ModuleNotFoundError as err:
        raise missing(err, "skillgate_lib.integrations.verl_runner") from err

    setup_worker()  # the driver validates the config against the registries
    sys.argv = [sys.argv[0], *argv]
    main_ppo.main()


if __name__ == "__main__":
    main()
