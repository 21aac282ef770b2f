#!/usr/bin/env bash
# The kit and verl 0.9.x in one fresh virtual environment, resolved by pip with every dependency
# (no --no-deps): `pip install -e ".[scale]" "verl[verl-core]>=0.9.1,<0.10"`, then `pip check`, the kit's verl
# tests and the launch script's dry run in it: the kit's transformers range (>=5.5.3) and verl 0.9.x's (<5.11) must meet
# (docs/integrations.md, "Versions").
#
# Usage: bash scripts/engine_env_check.sh [KIT_DIR [VENV_DIR]]
#   KIT_DIR   the kit's source tree to install (default: this repository)
#   VENV_DIR  where the throwaway environment goes (default: build/engine_env; removed first)
#   TORCH     the torch requirement installed first (default torch==2.13.0, the CPU build the
#             Makefile uses; an unpinned torch would pull a multi-GB CUDA build)
#
# Prints pip check's verdict, the resolved versions of the packages the integrations touch (the
# tested version matrix of docs/integrations.md) and the test summary; exits non-zero when pip check
# or a test fails. Takes minutes and downloads Ray and verl's other dependencies; CI runs it through the slow
# test tests/test_engine_env.py.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KIT=$(cd "${1:-$HERE/..}" && pwd)
VENV=${2:-$KIT/build/engine_env}
PY=${PYTHON:-python3}

rm -rf "$VENV"
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "${TORCH:-torch==2.13.0}"
"$VENV/bin/python" -m pip install -q -e "$KIT[scale]" "verl[verl-core]>=0.9.1,<0.10" pytest

status=0
echo "== pip check"
"$VENV/bin/python" -m pip check || status=1
echo "== versions"
"$VENV/bin/python" -m pip list 2>/dev/null | grep -i -E "^(verl|transformers|trl|torch|ray|tensordict|peft|accelerate|datasets|hydra-core|vllm) " || true
echo "== the kit's verl tests"
(cd "$KIT" && OMP_NUM_THREADS=1 "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
  tests/test_verl_integration.py tests/test_integration_install_hints.py tests/test_verl_dry_run.py) || status=1
echo "== the launch's dry run (examples/verl/skillgate_grpo.sh with DRY_RUN=1, the embedded tiny model)"
DATA=$(mktemp -d)
"$VENV/bin/python" "$KIT/examples/verl/make_data.py" --regime paper --out "$DATA" --n-train 16 --n-val 4 >/dev/null
(cd "$DATA" && PATH="$VENV/bin:$PATH" DRY_RUN=1 bash "$KIT/examples/verl/skillgate_grpo.sh" "$KIT/data/models/tiny-sft" \
  "$DATA/train.parquet" "$DATA/val.parquet" | grep -E "^(ok|FAIL|skip) |^dry run") || status=1
rm -rf "$DATA"
exit $status
