"""Runs: training, evaluation and the studies built from many runs, each writing the kit's run artifacts.

* :mod:`.train`       LoRA GRPO with a chosen credit assigner (the ``train`` command)
* :mod:`.optimizers`  AdamW, SGD and normalised SGD for the LoRA weights
* :mod:`.evaluate`    held-out metrics of a model or an adapter
* :mod:`.records`     a step's episodes as trajectory-table rows
* :mod:`.tracking`    mirroring metrics to TensorBoard / W&B
* :mod:`.multirun`    several runs trained together, their rollouts decoded in one batch
* :mod:`.compare`     every method x seed with one budget
* :mod:`.study`       the powered comparison: equal search on validation, seeds, the test set
* :mod:`.speed`       the rate study: how fast each arm learns the choice
* :mod:`.protocol`    what the study and the rate study share: the plan fixed up front, grid edges, test records
* :mod:`.probe`       the outcome-only audit of a warm start in a regime, before training
"""
