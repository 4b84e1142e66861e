# Shared by the real-process tests (sourced): a work directory, process
# bookkeeping, failure reports with the daemons' logs, a SIGTERM that must
# end a daemon with exit 0, a free loopback port,
# a coordinator that is listening, shard and train daemons joining it, a
# field of a job's status, a small synthetic dataset, and a comparison of
# two safetensors files.
#
#   source "$(dirname "$0")/process_lib.sh"   # after set -euo pipefail
#   init_work NAME                            # $work, cleaned, with data/

# The work directory $work (under TEST_TMPDIR), emptied.
init_work() {
  work="${TEST_TMPDIR:-$(mktemp -d)}/$1"
  rm -rf "$work"; mkdir -p "$work/data"
}

pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
# A command that fails under `set -e` outside a `|| fail` names itself (and
# the daemons' logs) instead of ending the test without a word.
trap 'echo "FAIL: line $LINENO: $BASH_COMMAND exited $?"; for f in "${work:-/nonexistent}"/*.log; do [ -f "$f" ] && { echo "== $f"; tail -15 "$f"; }; done' ERR
fail() {
  echo "FAIL: $*"
  for f in "$work"/*.log; do echo "== $f"; tail -15 "$f"; done
  exit 1
}

# stop_gently PID WHAT [SECONDS]: SIGTERM; it must exit 0 within SECONDS
# (default 10). Prints how long it took.
stop_gently() {
  local pid="$1" what="$2" limit="${3:-10}" rc=0 start
  start=$(date +%s%N)
  kill -TERM "$pid" 2>/dev/null || fail "$what (pid $pid) was not running"
  for _ in $(seq 1 $((limit * 20))); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -9 "$pid" 2>/dev/null || true
    fail "$what did not exit within ${limit}s of SIGTERM"
  fi
  wait "$pid" || rc=$?
  [ "$rc" -eq 0 ] || fail "$what exited $rc on SIGTERM"
  echo "$what: exit 0, $(( ($(date +%s%N) - start) / 1000000 )) ms after SIGTERM"
}

# scrape_until PORT OUT REGEX [SECONDS]: scrapes http://127.0.0.1:PORT/metrics
# into OUT until a line matches REGEX (exported values trail events by up
# to a daemon's export period); fails with the matching family otherwise.
scrape_until() {
  local port="$1" out="$2" regex="$3" limit="${4:-5}"
  for _ in $(seq 1 $((limit * 5))); do
    /usr/bin/python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:$port/metrics',timeout=5).read().decode())" \
      > "$out" 2>/dev/null && grep -qE "$regex" "$out" && return 0
    sleep 0.2
  done
  fail "metrics on port $port: no line matches $regex: $(grep -E "^${regex%%[{ ]*}" "$out" | head -5)"
}

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# start_coordinator BINARY PORT LOG [FLAGS...]: runs it in the background
# (coord_pid) on PORT (0: any free port), exports BERTPS_COORDINATOR from the
# address it writes once it listens (--address_file), returns then.
start_coordinator() {
  local bin="$1" port="$2" log="$3"; shift 3
  local address_file="$log.address"
  rm -f "$address_file"
  "$bin" --port "$port" --metrics_port 0 --address_file "$address_file" "$@" > "$log" 2>&1 &
  coord_pid=$!; pids+=($coord_pid)
  for _ in $(seq 1 400); do
    if [ -s "$address_file" ]; then
      export BERTPS_COORDINATOR="$(cat "$address_file")"
      return 0
    fi
    kill -0 "$coord_pid" 2>/dev/null || fail "the coordinator exited: $(tail -3 "$log")"
    sleep 0.05
  done
  fail "the coordinator did not start listening"
}

# start_ps_daemons NAME...: a bertps_server ($SERVER) per NAME joining the
# coordinator ($BERTPS_COORDINATOR) on a free port, logging to
# $work/ps-NAME.log; returns once each wrote $work/ps-NAME.address.
# ps_daemon_pid[NAME] is its pid. Each is started with ps_daemon_flags
# (e.g. --slices 2) too.
declare -A ps_daemon_pid
ps_daemon_flags=()
start_ps_daemons() {
  local s
  for s in "$@"; do
    "$SERVER" --coordinator "$BERTPS_COORDINATOR" --port 0 \
      --address_file "$work/ps-$s.address" "${ps_daemon_flags[@]}" \
      > "$work/ps-$s.log" 2>&1 &
    pids+=($!); ps_daemon_pid[$s]=$!
  done
  for s in "$@"; do
    for _ in $(seq 1 200); do [ -s "$work/ps-$s.address" ] && break; sleep 0.05; done
    [ -s "$work/ps-$s.address" ] || fail "shard $s wrote no address file"
  done
}

# start_train_daemons NAME...: a train bertps_worker ($WORKER) per NAME,
# logging to $work/w-NAME.log.
start_train_daemons() {
  local w
  for w in "$@"; do
    "$WORKER" --role=train --coordinator "$BERTPS_COORDINATOR" > "$work/w-$w.log" 2>&1 &
    pids+=($!)
  done
}

# field JOB PYTHON-EXPRESSION-OF-s: the expression over the job's status
# (`bertpsctl status JOB --json` as s; $CTL is bertpsctl).
field() {
  "$CTL" status "$1" --json | /usr/bin/python3 -c \
    "import json,sys; s=json.load(sys.stdin); print($2)"
}

# A small BERT config ($work/model.json) and 2 x 40 synthetic examples in
# $work/data (bert_local synthetic-data).
tiny_model_data() {
  cat > "$work/model.json" <<'JSON'
{"vocab_size": 1200, "hidden_size": 32, "num_hidden_layers": 2,
 "num_attention_heads": 2, "intermediate_size": 64,
 "max_position_embeddings": 128}
JSON
  "$1" synthetic-data --config "$work/model.json" --out "$work/data" --steps 40
}

# tiny_spec NAME STEPS [LINE...]: a PRETRAIN spec of the tiny model over
# $work/data (tiny_model_data), batch 8, learning rate 2e-3 after 2 warm-up
# steps, then each LINE (empty ones skipped).
tiny_spec() {
  cat <<EOF2
name: "$1"
task: PRETRAIN
model: "$work/model.json"
data: "$work/data/*.tfrecord"
batch_size: 8
steps: $2
optimizer { learning_rate: 2e-3 warmup_steps: 2 }
EOF2
  shift 2
  local line
  for line in "$@"; do [ -z "$line" ] || printf '%s\n' "$line"; done
}

# replicated_spec NAME REPLICAS EXPORT STEPS [MORE]: tiny_spec with 2 shards,
# 2 workers, `replicas: REPLICAS`, exported to EXPORT; MORE lines appended.
replicated_spec() {
  tiny_spec "$1" "$4" "num_ps_shards: 2" "num_workers: 2" "replicas: $2" \
      "export_path: \"$3\"" "${5:-}"
}

# pipeline_spec NAME STEPS [MORE]: tiny_spec run as 2 replicas x 2 pipeline
# stages (1F1B, 2 micro-batches), exported to $work/NAME.safetensors; MORE
# lines appended.
pipeline_spec() {
  tiny_spec "$1" "$2" "num_workers: 2" "export_path: \"$work/$1.safetensors\"" \
      'pipeline { stages: 2 micro_batches: 2 schedule: "1f1b" }' "${3:-}"
}

# wait_for_step JOB N: returns once JOB's progress reached step N; fails the
# test (naming the job's state and step) when it has not within 60 s.
wait_for_step() {
  local step
  for _ in $(seq 1 600); do
    step=$(field "$1" 's.get("progress", {}).get("step", 0)' 2>/dev/null) || step=0
    [ "${step:-0}" -ge "$2" ] 2>/dev/null && return 0
    sleep 0.1
  done
  fail "job $1 did not reach step $2 within 60 s: $(field "$1" 's["state"] + " at step " + str(s.get("progress", {}).get("step", 0)) + " " + s.get("waiting", "") + s.get("reason", "")' 2>&1)"
}

# wait_for_field JOB EXPR MIN SECONDS WHAT: returns once the integer EXPR
# of JOB's status (as `field`) is at least MIN; fails naming WHAT and the
# job's state when it is not within SECONDS.
wait_for_field() {
  local v
  for _ in $(seq 1 $(($4 * 20))); do
    v=$(field "$1" "int($2)" 2>/dev/null) || v=0
    [ "${v:-0}" -ge "$3" ] 2>/dev/null && return 0
    sleep 0.05
  done
  fail "$5 (within $4 s): $("$CTL" status "$1" | grep -E '^(state|replicas|waiting)')"
}

# expect_same_parameters A B WHAT: the exports A and B (waited for up to
# 10 s) are equal bit for bit; prints the comparison as WHAT.
expect_same_parameters() {
  local worst
  for _ in $(seq 1 100); do [ -f "$1" ] && [ -f "$2" ] && break; sleep 0.1; done
  worst=$(max_relative_difference "$1" "$2") || fail "cannot compare $1 and $2"
  echo "$3: worst relative difference $worst"
  [ "$worst" = "0.000e+00" ] || fail "the parameters differ ($worst): $3"
}

# max_relative_difference A B: prints the largest over tensors of
# max|a - b| / (1e-3 + max|b|) of two float32 safetensors files with the
# same tensors; fails on a non-finite value.
max_relative_difference() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, struct, sys
import numpy as np
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); base = 8 + n
    return {k: np.frombuffer(b[base + v["data_offsets"][0]: base + v["data_offsets"][1]], dtype=np.float32)
            for k, v in h.items() if k != "__metadata__"}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys(), (sorted(a)[:5], sorted(b)[:5])
assert all(np.all(np.isfinite(a[k])) and np.all(np.isfinite(b[k])) for k in a)
print(f"{max(float(np.max(np.abs(a[k] - b[k])) / (1e-3 + float(np.max(np.abs(b[k]))))) for k in a):.3e}")
PY
}
