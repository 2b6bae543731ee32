#!/bin/bash
# The GPU runs of scripts/question_sweep.py (docs/BENCHMARKS.md, "Round 35, rule 11" and "Round 58, rule 30"): its
# recipes trained at once on one CUDA GPU, one job per (recipe, seed) (a model per fold of the 267 B training
# questions and one on all of them), each under a time limit (scripts/gpu_jobs.sh's gpu_job), then `judge` (the
# soups of each recipe's seeds and the rule), its figures and the checkpoints it packs (split under 16 MiB) under
# $OUT with every run's scores and logs. With FORWARD=1, first bench/model_load.py --forward-only cuda (the served
# network's forward passes on the GPU) into $OUT/forward.json.
#
# On the device, from the checkout, with the kit of scripts/device_kit.py carried as KIT (default .devkit, holding
# parts.json from `python scripts/question_sweep.py parts --out KIT/parts.json` and, when models/ stays behind, the
# shipped question model's config.json as KIT/shipped-config.json):  bash scripts/gpu_question_sweep.sh
# RECIPES, SEEDS (comma-separated), RULE (11 or 30), PACK_CANDIDATE (a candidate packed passing or not);
# TRAIN_S and JUDGE_S: the time limits (seconds) of each job's training and of the judge.
# Round 35: the defaults (six recipes, seeds 13-15, rule 11). Round 58: RECIPES="shipped transitive"
# SEEDS=13,14,15,16,17,18,19,20 RULE=30 PACK_CANDIDATE="transitive soup" FORWARD=1.
set -u
KIT=${KIT:-.devkit}
OUT=${OUT:-/tmp/out}
RECIPES=${RECIPES:-"shipped epochs2 epochs3 neg3 len256 lr5e-5"}
SEEDS=${SEEDS:-13,14,15}
RULE=${RULE:-11}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
OUT_DIR=/tmp; BUDGET=${TRAIN_S:-300}; L=$OUT_DIR/logs; W=/tmp/sweep; mkdir -p $L $W $OUT
source "$(dirname "$0")/gpu_jobs.sh"
t0=$(date +%s)
kit_setup $KIT || exit $?
export PYTHONPATH=/tmp/site CQA_SHARED_DATA_DIR=$PWD/$KIT/data CQA_DENSE_ENCODER=base CQA_ANSWER_ENCODER=none CQA_DATA_DIR=/tmp/cqa
SHIPPED_CONFIG=models/question-bi-encoder/config.json
[ -f $SHIPPED_CONFIG ] || SHIPPED_CONFIG=$KIT/shipped-config.json
nvidia-smi -L
python3 -c "import torch, tokenizers, sys; print(sys.version.split()[0], torch.__version__, tokenizers.__version__, torch.cuda.get_device_name())"
echo "setup $(( $(date +%s) - t0 )) s"
if [ "${FORWARD:-0}" = 1 ]; then
  timeout -k 10 120 python3 bench/model_load.py --forward-only cuda >$L/forward.log 2>&1
  echo "forward rc=$? $(( $(date +%s) - t0 )) s"; tail -n 1 $L/forward.log | tee $OUT/forward.json
fi
for r in $RECIPES; do
  for sd in ${SEEDS//,/ }; do
    gpu_job $r-$sd python3 scripts/question_sweep.py train --recipe $r --seeds $sd --out $W --device cuda \
      --shipped-config $SHIPPED_CONFIG
  done
done
wait
cat $L/jobs.jsonl
for f in $L/*-*.log; do tail -n 1 $f | cut -c1-300; done
echo "train done $(( $(date +%s) - t0 )) s"
timeout -k 10 ${JUDGE_S:-190} python3 scripts/question_sweep.py judge --rule $RULE --parts $KIT/parts.json --out $W \
  --device cuda --pack /tmp/pack ${PACK_CANDIDATE:+--pack-candidate "$PACK_CANDIDATE"} >$L/judge.log 2>&1
echo "judge rc=$? $(( $(date +%s) - t0 )) s"
tail -c 2500 $L/judge.log
(cd $W && tar czf $OUT/scores.tgz $(ls */seed-*/scores.json */soup/scores.json report.json 2>/dev/null))
tar czf $OUT/logs.tgz -C $OUT_DIR logs
[ -d /tmp/pack ] && tar cf - -C /tmp pack | split -b 15M - $OUT/pack.tar.
ls -la $OUT; echo "all $(( $(date +%s) - t0 )) s"
