r"""Run verl's PPO/GRPO entry point with SkillGate registered in every Ray worker.

Registries are per process: ``register_adv_est`` run in the driver does not exist in
the ``TaskRunnerV1`` actor that builds the trainer, nor in the reward-loop workers. This
entry point adds a Ray ``worker_process_setup_hook`` (:func:`setup_worker`) to the job's
``runtime_env``, so each worker process imports the SkillGate pieces before it runs
anything, then hands over to verl's own ``verl.trainer.main_ppo.main``::

    python -m skillgate_lib.integrations.verl_runner algorithm.adv_estimator=skillgate \
        trainer.v1.trainer_mode=skillgate_sync reward.reward_manager.name=skillgate ...

(``examples/verl/skillgate_grpo.sh`` is a complete command.) :func:`setup_worker` registers

* the ``skillgate`` and ``skillgate_utility`` advantage estimators (:mod:`skillgate_lib.integrations.verl`);
* the ``skillgate`` reward manager: verl's ``naive`` manager plus the read annotation
  ``reward_extra_info["skillgate_reads"]`` (:func:`~skillgate_lib.integrations.verl.reward_extra_info`);
* the ``skillgate_sync`` trainer: verl's ``sync`` v1 trainer whose ``_compute_advantage``
  fetches those annotations from the TransferQueue and runs verl's own
  ``_compute_advantage`` inside :func:`~skillgate_lib.integrations.verl.read_annotation`.

Needs a full verl install (Ray, TransferQueue, a rollout engine) and GPUs: none of this
module runs on the kit's CPU install; its pieces are tested through
:mod:`skillgate_lib.integrations.verl` there.
"""

from __future__ import annotations

import sys

HOOK = "skillgate_lib.integrations.verl_runner.setup_worker"
TRAINER_MODE = "skillgate_sync"
REWARD_MANAGER = "skillgate"
_DONE: list[bool] = []


def setup_worker() -> None:
    """Register SkillGate's estimator, reward manager and trainer in this process (idempotent)."""
    if _DONE:
        return
    from verl.experimental.reward_loop.reward_manager import register
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.trainer.ppo.v1 import PPOTrainerSync, register_trainer

    from skillgate_lib.integrations import verl as sg

    @register(REWARD_MANAGER)
    class SkillGateRewardManager(NaiveRewardManager):
        """verl's naive reward manager plus each response's read annotation."""

        async def run_single(self, data):
            out = await super().run_single(data)
            out["reward_extra_info"].update(sg.reward_extra_info(data[-1:][0], self.tokenizer))
            return out

    @register_trainer(TRAINER_MODE)
    class SkillGateTrainer(PPOTrainerSync):
        """verl's sync v1 trainer; the advantage step sees each row's reads."""

        def _compute_advantage(self, batch, metrics):
            if self.config.algorithm.adv_estimator not in sg.ESTIMATORS:
                return super()._compute_advantage(batch, metrics)
            import transfer_queue as tq

            data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
            reads, names = [], []
            for key, fields in zip(batch.keys, data["extra_fields"].tolist()):
                info = (fields or {}).get("reward_extra_info", {})
                if sg.READS_KEY not in info:
                    raise KeyError(f"sample {key}: reward_extra_info has no {sg.READS_KEY!r}; "
                                   f"set reward.reward_manager.name={REWARD_MANAGER}")
                reads.append(sg.decode_reads(info[sg.READS_KEY], where=f"sample {key}"))
                names.append(sg.decode_read_names(info[sg.READS_KEY], where=f"sample {key}"))
            with sg.read_annotation(reads, names):
                return super()._compute_advantage(batch, metrics)

    _DONE.append(True)


def main(argv: list[str] | None = None) -> None:
    """verl's ``main_ppo`` with :func:`setup_worker` in the driver and as every worker's setup hook."""
    from verl.trainer import main_ppo

    setup_worker()  # the driver validates the config against the registries
    argv = list(sys.argv[1:] if argv is None else argv)
    argv.append(f"++ray_kwargs.ray_init.runtime_env.worker_process_setup_hook={HOOK}")
    sys.argv = [sys.argv[0], *argv]
    main_ppo.main()


if __name__ == "__main__":
    main()
