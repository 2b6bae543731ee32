# Sourced by scripts/gpu_train.sh and scripts/gpu_crossfit.sh: one training job at a time limit, in the background.
# gpu_job NAME COMMAND...: runs COMMAND under `timeout` (SIGTERM after BUDGET seconds keeps a MiniLM run's best
# evaluation point so far), its output in OUT_DIR/logs/NAME.log, and appends its exit code and seconds to
# OUT_DIR/logs/jobs.jsonl. Then `wait` for them all.
gpu_job() {
  local name=$1; shift
  mkdir -p "$OUT_DIR/logs"
  ( s=$(date +%s)
    timeout -k 60 "$BUDGET" "$@" >"$OUT_DIR/logs/$name.log" 2>&1
    echo "{\"job\": \"$name\", \"rc\": $?, \"seconds\": $(( $(date +%s) - s ))}" >>"$OUT_DIR/logs/jobs.jsonl" ) &
}
