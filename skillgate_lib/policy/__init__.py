"""The policy: the model, how it decodes and samples, and how it is warm-started.

* :mod:`.models`     loading the embedded tiny model, SmolLM2 or any causal LM; fingerprints
* :mod:`.decoder`    the fast decode loop (and several runs' LoRA adapters in one batch)
* :mod:`.rollout`    sampling episodes with reads answered mid-decode
* :mod:`.batching`   packing episodes into tensors; response log-probabilities
* :mod:`.gradients`  the logit-gradient weight of a token and the per-token parameter gradients
* :mod:`.warmstart`  the SFT warm start of the embedded model
* :mod:`.devices`    where a run computes (CPU, CUDA) and bf16 autocast
"""
