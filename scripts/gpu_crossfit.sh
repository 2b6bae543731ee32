#!/bin/bash
# Round 28's GPU run (docs/BENCHMARKS.md, "Round 28"): the cross-fitted MiniLM scores of the subtask A layer's
# training files. The 8 fold models (4 folds x cross-encoder, bi-encoder) train at once on one CUDA GPU, each under a
# time limit (SIGTERM keeps the best evaluation point so far), then each scores its own fold.
#
# On a machine with this project installed and ../shared/data beside it:  bash scripts/gpu_crossfit.sh [OUT_DIR]
# Then, on any machine: python scripts/train_combination.py --name cross-encoder+signals --regimes \
#   --cross-fitted OUT_DIR/scores.json --out FILE
# The device run of round 28 ran it on a machine without the project's venv, set up as scripts/gpu_train.sh says.
set -u
OUT_DIR=${1:-var/crossfit}
BUDGET=${BUDGET:-240}
PY=${PY:-python3}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
source "$(dirname "$0")/gpu_jobs.sh"
for k in cross-encoder bi-encoder; do
  for i in 0 1 2 3; do
    gpu_job "$k-$i" $PY scripts/crossfit_A.py train --kind $k --fold $i --device cuda --out "$OUT_DIR"
  done
done
wait
$PY scripts/crossfit_A.py score --device cuda --out "$OUT_DIR"
