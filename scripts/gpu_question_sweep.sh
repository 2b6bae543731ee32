#!/bin/bash
# Round 35's GPU run (docs/BENCHMARKS.md, "Round 35, rule 11"): scripts/question_sweep.py's six recipes trained at
# once on one CUDA GPU (three seeds each: a model per fold of the 267 B training questions and one on all of them),
# each under a time limit (scripts/gpu_jobs.sh's gpu_job), then `judge` (the soups of each recipe's seeds and rule
# 11), its figures and the winner's checkpoint packed under $OUT (split under 16 MiB) with every run's scores and logs.
#
# On the device, from the checkout, with the kit of scripts/device_kit.py carried as KIT (default .devkit, holding
# parts.json from `python scripts/question_sweep.py parts --out KIT/parts.json`):  bash scripts/gpu_question_sweep.sh
# TRAIN_S and JUDGE_S: the time limits (seconds) of each recipe's training and of the judge.
set -u
KIT=${KIT:-.devkit}
OUT=${OUT:-/tmp/out}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
OUT_DIR=/tmp; BUDGET=${TRAIN_S:-300}; L=$OUT_DIR/logs; W=/tmp/sweep; mkdir -p $L $W $OUT
source "$(dirname "$0")/gpu_jobs.sh"
t0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $KIT/whl/*.whl || exit 3
python3 $KIT/widen.py /tmp/site || exit 4
export PYTHONPATH=/tmp/site CQA_SHARED_DATA_DIR=$PWD/$KIT/data CQA_DENSE_ENCODER=base CQA_ANSWER_ENCODER=none CQA_DATA_DIR=/tmp/cqa
nvidia-smi -L
python3 -c "import torch, tokenizers, sys; print(sys.version.split()[0], torch.__version__, tokenizers.__version__, torch.cuda.get_device_name())"
echo "setup $(( $(date +%s) - t0 )) s"
RECIPES="shipped epochs2 epochs3 neg3 len256 lr5e-5"
for r in $RECIPES; do
  gpu_job $r python3 scripts/question_sweep.py train --recipe $r --seeds 13,14,15 --out $W --device cuda
done
wait
cat $L/jobs.jsonl
for r in $RECIPES; do tail -n 2 $L/$r.log | cut -c1-300; done
echo "train done $(( $(date +%s) - t0 )) s"
timeout -k 10 ${JUDGE_S:-190} python3 scripts/question_sweep.py judge --parts $KIT/parts.json --out $W --device cuda --pack /tmp/pack >$L/judge.log 2>&1
echo "judge rc=$? $(( $(date +%s) - t0 )) s"
tail -c 2500 $L/judge.log
(cd $W && tar czf $OUT/scores.tgz $(ls */seed-*/scores.json */soup/scores.json report.json 2>/dev/null))
tar czf $OUT/logs.tgz -C $OUT_DIR logs
[ -d /tmp/pack ] && tar cf - -C /tmp pack | split -b 15M - $OUT/pack.tar.
ls -la $OUT; echo "all $(( $(date +%s) - t0 )) s"
