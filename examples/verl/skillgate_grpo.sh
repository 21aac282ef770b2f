#!/usr/bin/env bash
# SkillGate GRPO under verl 0.9.x (GPU machine, full `pip install verl[vllm]` plus this kit).
#
# Usage: [LAMBDA=0.2] [ESTIMATOR=skillgate] [N_GPUS=8] bash examples/verl/skillgate_grpo.sh MODEL [TRAIN [VAL]] [key=value ...]
#   MODEL        model path (made absolute) or Hugging Face id
#   TRAIN, VAL   parquet files (default: data/verl/{train,val}.parquet of this repository, as
#                examples/verl/make_data.py writes them); made absolute, so Ray workers find them
#                whatever their working directory
#   key=value    further Hydra overrides for verl, after the ones below (the last value of a key wins),
#                e.g. trainer.total_training_steps=10; skillgate.selector_coef=0.3 sets lambda too
#   LAMBDA       lambda, the selector channel's weight (default 0.2, the reference's): passed as
#                skillgate.selector_coef, which skillgate_lib.integrations.verl_runner exports to every
#                Ray worker (SKILLGATE_SELECTOR_COEF) and the worker hook applies
#   ESTIMATOR    skillgate (default) or skillgate_utility (the utility baseline)
#   DRY_RUN=1    check the launch without Ray or GPUs and start nothing: verl's config with every
#                override, the registries, verl's validation, the data, the reward, the tool and,
#                for a local MODEL, the prompt's length (skillgate_lib/integrations/verl_dry_run.py)
#
# The kit's knobs: 8 rollouts per prompt, slate of 16 candidates (1/5/5/5) in the data,
# lambda = $LAMBDA, lr 1e-6, KL 3e-5, and the kit's dynamic sampling: groups whose rewards all
# agree dropped and refilled, at most two generation batches per step (the kit's max_draws).
# One actor update per batch (ppo_mini_batch_size == train_batch_size) with token-mean
# aggregation makes verl's loss equal the kit's sum(weights * surrogate) exactly; see
# the docstring of skillgate_lib/integrations/verl.py.
#
# Data: `python examples/verl/make_data.py --regime easy` writes the kit's environment as verl RL
# parquet rows whose extra_info carries the task, the slate (skill_names / skill_categories: what
# the reward manager categorises reads by) and the regime; the reward function is
# skillgate_lib/integrations/verl_data.py:compute_score (that regime's verifier).
#
# Multi-turn: verl's tool agent loop with the kit's `read` tool (examples/verl/read_tool.yaml,
# skillgate_lib/integrations/verl_tool.py) and the `skillgate_read` tool parser for the kit's
# syntax `<read> words </read>`; the tokenizer renders the episode with the kit's chat template
# (no turn markers: skillgate_lib.integrations.kit_chat.CHAT_TEMPLATE), so the response verl trains on
# is the kit's episode: read, inserted body (response_mask 0: no loss), step lines, answer.
#
# `</read>` and pretrained tokenizers: the reward manager and the estimator find reads by their
# text, so `</read>` may be any number of tokens there. Only stopping generation after a read
# needs it as ONE token (the parser's stop_token_ids; the kit's embedded tokenizer has it). With a
# pretrained tokenizer that splits `</read>` (most do: `</`, `read`, `>`), the parser logs a warning
# and the policy writes on past `</read>` to the end of its turn before the tool's reply is
# inserted, and the verifier scores that text too. Add `<read>` and `</read>` as tokens first
# (`python examples/verl/add_read_tokens.py MODEL OUT`, then pass OUT as MODEL), or use a chat model's JSON tool calls
# (actor_rollout_ref.rollout.multi_turn.format=hermes): the model ends its turn after a call, and
# the reward manager finds those reads as well.
#
# Not run here past its dry run (no GPU, no vLLM): what ran is listed in docs/integrations.md.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
absolute() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s/%s\n' "$PWD" "$1" ;; esac; }

POSITIONAL=() OVERRIDES=()
for arg in "$@"; do
  case "$arg" in *=*) OVERRIDES+=("$arg") ;; *) POSITIONAL+=("$arg") ;; esac
done
MODEL=${POSITIONAL[0]:?usage: bash examples/verl/skillgate_grpo.sh MODEL [TRAIN [VAL]] [key=value ...]}
TRAIN=$(absolute "${POSITIONAL[1]:-$ROOT/data/verl/train.parquet}")
VAL=$(absolute "${POSITIONAL[2]:-$ROOT/data/verl/val.parquet}")
if [ -e "$MODEL" ]; then MODEL=$(absolute "$MODEL"); fi  # a local checkpoint; a Hugging Face id stays as it is
SCORE=$(python -c "import skillgate_lib.integrations.verl_data as m; print(m.__file__)")
TEMPLATE=$(python -c "from skillgate_lib.integrations.verl_runner import chat_template_override as f; print(f())")

python -m skillgate_lib.integrations.verl_runner ${DRY_RUN:+--dry-run} \
  skillgate.selector_coef="${LAMBDA:-0.2}" \
  algorithm.adv_estimator="${ESTIMATOR:-skillgate}" \
  algorithm.norm_adv_by_std_in_grpo=true \
  algorithm.use_kl_in_reward=false \
  algorithm.filter_groups.enable=true \
  algorithm.filter_groups.metric=reward \
  algorithm.filter_groups.max_num_gen_batches=2 \
  trainer.use_v1=true \
  trainer.v1.trainer_mode=skillgate_sync \
  reward.reward_manager.source=register \
  reward.reward_manager.name=skillgate \
  reward.custom_reward_function.path="$SCORE" \
  reward.custom_reward_function.name=compute_score \
  data.train_files="$TRAIN" \
  data.val_files="$VAL" \
  data.train_batch_size=32 \
  data.max_prompt_length=2048 \
  data.max_response_length=1024 \
  actor_rollout_ref.model.path="$MODEL" \
  "$TEMPLATE" \
  actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent \
  actor_rollout_ref.rollout.multi_turn.enable=true \
  actor_rollout_ref.rollout.multi_turn.format=skillgate_read \
  actor_rollout_ref.rollout.multi_turn.tool_config_path="$HERE/read_tool.yaml" \
  actor_rollout_ref.rollout.multi_turn.max_tool_response_length=2048 \
  actor_rollout_ref.model.lora_rank=32 \
  actor_rollout_ref.model.lora_alpha=64 \
  actor_rollout_ref.model.target_modules=all-linear \
  actor_rollout_ref.actor.optim.lr=1e-6 \
  actor_rollout_ref.actor.ppo_mini_batch_size=32 \
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8 \
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8 \
  actor_rollout_ref.actor.loss_agg_mode=token-mean \
  actor_rollout_ref.actor.use_kl_loss=true \
  actor_rollout_ref.actor.kl_loss_coef=3e-5 \
  actor_rollout_ref.rollout.name=vllm \
  actor_rollout_ref.rollout.n=8 \
  trainer.total_training_steps=100 \
  trainer.n_gpus_per_node="${N_GPUS:-8}" \
  trainer.nnodes=1 \
  trainer.logger='["console","tensorboard"]' \
  trainer.rollout_data_dir="$ROOT/runs/verl_skillgate/rollouts" \
  ${OVERRIDES[@]+"${OVERRIDES[@]}"}
