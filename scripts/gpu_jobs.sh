# Sourced by the scripts/gpu_*.sh runs. gpu_job: one training job at a time limit, in the background.
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

# kit_setup KIT: the kit of scripts/device_kit.py made usable on the device: its wheels (pydantic, ...) installed and
# the packaged MiniLM widened back to fp32, both into /tmp/site (then `export PYTHONPATH=/tmp/site`).
kit_setup() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$1"/whl/*.whl \
    || return 3
  python3 "$1"/widen.py /tmp/site || return 4
}
