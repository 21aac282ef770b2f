#!/usr/bin/env bash
# The rate study in the order it is run: AdamW in five regimes (cheapest first), then the optimizer
# control (normalised SGD and plain SGD) in the note regime, then in the echo regime. Resumable: rerun it
# and finished runs are skipped. Runs write under build/runs/speed/; each finished study is copied
# (plan, selection, each run's config, metrics and test record) to data/runs/speed/<name>/; a study
# already exported there (its selection.json is written last) is skipped, so a fresh clone resumes too.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
run() {  # regime optimizer
  local name=$1; [ "$2" != adamw ] && name="$1-$2"
  if [ -e "data/runs/speed/$name/selection.json" ]; then echo "$name: exported already, skipped"; return; fi
  "$PY" -m skillgate_lib speed --regime "$1" --optimizer "$2" --out-dir "build/runs/speed/$name" \
    --export "data/runs/speed/$name"
}
for r in paper_note8 paper_note4 paper easy paper_echo_f30; do run "$r" adamw; done
for r in paper_note8 paper_echo_f30; do for o in nsgd sgd; do run "$r" "$o"; done; done
