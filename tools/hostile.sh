#!/usr/bin/env bash
# The hostile-input list: every case of tools/hostile/cases.sh run against a
# real local cluster over 127.0.0.1 (a coordinator, two parameter-server
# daemons, two train daemons), each judged by what a careful user expects:
#   refused   the submission is refused, the message names the field, file
#             or limit (PATTERN)
#   fails     accepted, then FAILED with a reason matching PATTERN
#   succeeds  accepted and SUCCEEDED
#   waits     accepted, and `waiting` says what for (PATTERN); cancelled
#   exit N    a command exits N (not a crash, not a hang) saying PATTERN
#   alive     raw bytes sent to a port: every daemon still up and answering
# After every case each daemon must still run (else the verdict is "crash",
# and the cluster is started again) and no job may be left RUNNING.
# `confine DATA OUT` (cases.sh) runs the cases after it against a coordinator
# with --data_root DATA --output_root OUT --jobs_root OUT/jobs (the cluster
# is started again before the first of them that runs).
#
#   tools/hostile.sh [--only REGEX] [--list]
# Binaries: $COORD $SERVER $WORKER $CTL $BERT_LOCAL, else built with Bazel.
# Prints one line per case and "hostile: N cases: N as expected, N not
# (crash C, hang H, wrong W, unclear U)"; exits 1 if any is not.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
only="" list=0
while [ $# -gt 0 ]; do
  case "$1" in
    --only) shift; only="$1" ;;
    --list) list=1 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "hostile: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

if [ -z "${COORD:-}" ]; then
  (cd "$here/.." && bazel build -c opt //server/coordinator:bertps_coordinator \
    //server/ps:bertps_server //worker:bertps_worker //tools:bertpsctl \
    //tools:bert_local >&2) || { echo "hostile: build failed"; exit 1; }
  bin="$here/../bazel-bin"
  COORD="$bin/server/coordinator/bertps_coordinator"
  SERVER="$bin/server/ps/bertps_server"; WORKER="$bin/worker/bertps_worker"
  CTL="$bin/tools/bertpsctl"; BERT_LOCAL="$bin/tools/bert_local"
fi
work="${TEST_TMPDIR:-$(mktemp -d)}/hostile"
rm -rf "$work"; mkdir -p "$work/data" "$work/files" "$work/jobs"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; }
trap cleanup EXIT

# --- inputs -----------------------------------------------------------------
cat > "$work/model.json" <<'JSON'
{"vocab_size": 1200, "hidden_size": 32, "num_hidden_layers": 2,
 "num_attention_heads": 2, "intermediate_size": 64,
 "max_position_embeddings": 128}
JSON
"$BERT_LOCAL" synthetic-data --config "$work/model.json" --out "$work/data" \
  --steps 8 > "$work/synthetic.log" 2>&1 || { echo "hostile: synthetic data"; exit 1; }
cat > "$work/base.txt" <<EOF
name: "hostile"
task: PRETRAIN
model: "$work/model.json"
data: "$work/data/*.tfrecord"
batch_size: 4
steps: 4
num_ps_shards: 2
num_workers: 2
optimizer.learning_rate: 1e-3
EOF
# A whole model's weights (one training step) for the weights cases to spoil.
"$BERT_LOCAL" train --config "$work/model.json" --data "$work/data/*.tfrecord" \
  --batch 4 --steps 1 --out "$work/full.safetensors" > "$work/full.log" 2>&1 \
  || { echo "hostile: bert_local train: $(tail -3 "$work/full.log")"; exit 1; }
/usr/bin/python3 "$here/hostile/make_files.py" "$work/model.json" \
  "$work/data" "$work/files" "$work/full.safetensors" \
  || { echo "hostile: make_files failed"; exit 1; }
F="$work/files"

# --- the cluster ----------------------------------------------------------
cluster=()
roots_data="" roots_out=""  # the roots the cases need (confine; "": none)
roots_running="|"           # "DATA|OUT" the cluster runs with
start_cluster() {
  for p in "${cluster[@]}"; do kill -9 "$p" 2>/dev/null; done
  cluster=()
  local addr="$work/coordinator.address" flags=(--jobs_root "$work/jobs")
  if [ -n "$roots_out" ]; then
    flags=(--data_root "$roots_data" --output_root "$roots_out"
           --jobs_root "$roots_out/jobs")
  fi
  roots_running="$roots_data|$roots_out"
  rm -f "$addr"
  "$COORD" --port 0 --metrics_port 0 --address_file "$addr" \
    --member_timeout_s 2 "${flags[@]}" > "$work/coordinator.log" 2>&1 &
  cluster+=($!); pids+=($!)
  for _ in $(seq 1 200); do [ -s "$addr" ] && break; sleep 0.05; done
  export BERTPS_COORDINATOR="$(cat "$addr")"
  metrics_port=$(sed -n 's/.*metrics on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' \
    "$work/coordinator.log" | head -1)
  for s in a b; do
    "$SERVER" --coordinator "$BERTPS_COORDINATOR" --port 0 \
      --address_file "$work/ps-$s.address" > "$work/ps-$s.log" 2>&1 &
    cluster+=($!); pids+=($!)
  done
  for w in a b; do
    "$WORKER" --role=train --coordinator "$BERTPS_COORDINATOR" --threads 1 \
      > "$work/worker-$w.log" 2>&1 &
    cluster+=($!); pids+=($!)
  done
  for _ in $(seq 1 200); do
    [ -s "$work/ps-a.address" ] && [ -s "$work/ps-b.address" ] && break
    sleep 0.05
  done
  sleep 1  # the members register
}
dead_daemons() {
  local d=""
  for p in "${cluster[@]}"; do kill -0 "$p" 2>/dev/null || d="$d $p"; done
  echo "$d"
}

# --- verdicts -------------------------------------------------------------
total=0 good=0 crash=0 hang=0 wrong=0 unclear=0
declare -A counted
verdict() {  # verdict ID KIND DETAIL
  total=$((total + 1))
  case "$2" in
    ok) good=$((good + 1)); echo "ok       $1" ;;
    *) eval "$2=\$(( $2 + 1 ))"; printf '%-8s %s: %s\n' "$2" "$1" "$3" ;;
  esac
}
selected() {
  if [ "$list" = 1 ]; then echo "$1"; return 1; fi
  [ -z "$only" ] || [[ "$1" =~ $only ]] || return 1
  # The cluster the case needs (confined or not).
  [ "$roots_data|$roots_out" = "$roots_running" ] || start_cluster
}
# confine DATA OUT: the cases after it run with these roots.
confine() { roots_data="$1"; roots_out="$2"; }
after_case() {  # after_case ID: a daemon that died is a crash
  local d
  d=$(dead_daemons)
  if [ -n "$d" ]; then
    verdict "$1" crash "daemon(s)$d died"
    start_cluster
    return 1
  fi
  # No job may stay RUNNING or PENDING.
  local left
  left=$(timeout 10 "$CTL" list --json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
for j in json.load(sys.stdin).get("jobs", []):
    if j.get("state") in ("RUNNING", "PENDING"): print(j["id"])' 2>/dev/null)
  for j in $left; do timeout 10 "$CTL" cancel "$j" > /dev/null 2>&1; done
  return 0
}
matches() { grep -qE -- "$1" <<< "$2"; }

# spec ID EXPECT PATTERN [KEY=VALUE...]: a job spec, the base with overrides.
spec() {
  local id="$1" expect="$2" pattern="$3"; shift 3
  selected "$id" || return 0
  /usr/bin/python3 "$here/hostile/spec.py" "$work/base.txt" "$@" > "$work/case.pbtxt"
  submit_case "$id" "$expect" "$pattern" "$work/case.pbtxt"
}
# spec_file ID EXPECT PATTERN FILE: the spec as a file (or any path).
spec_file() {
  selected "$1" || return 0
  submit_case "$@"
}
submit_case() {
  local id="$1" expect="$2" pattern="$3" file="$4" out rc job
  out=$(timeout 40 "$CTL" submit "$file" 2>&1); rc=$?
  if [ "$rc" -eq 124 ]; then
    after_case "$id" && verdict "$id" hang "submit did not answer in 40 s"
    return
  fi
  if [ "$expect" = refused ]; then
    if [ "$rc" -eq 0 ]; then
      job=$(tail -n 1 <<< "$out")
      after_case "$id" && verdict "$id" wrong "accepted as $job"
    elif matches "$pattern" "$out"; then
      after_case "$id" && verdict "$id" ok ""
    else
      after_case "$id" && verdict "$id" unclear "$(tr '\n' ' ' <<< "$out" | cut -c1-200)"
    fi
    return
  fi
  if [ "$rc" -ne 0 ]; then
    after_case "$id" && verdict "$id" wrong "refused: $(tr '\n' ' ' <<< "$out" | cut -c1-200)"
    return
  fi
  job=$(tail -n 1 <<< "$out")
  local status state reason waiting
  if [ "$expect" = waits ]; then
    for _ in $(seq 1 50); do
      waiting=$(timeout 10 "$CTL" status "$job" --json 2>/dev/null | /usr/bin/python3 -c \
        'import json,sys; print(json.load(sys.stdin).get("waiting",""))' 2>/dev/null)
      matches "$pattern" "$waiting" && break
      sleep 0.2
    done
    timeout 10 "$CTL" cancel "$job" > /dev/null 2>&1
    if matches "$pattern" "$waiting"; then
      after_case "$id" && verdict "$id" ok ""
    else
      after_case "$id" && verdict "$id" unclear "waiting: ${waiting:-(nothing)}"
    fi
    return
  fi
  timeout 90 "$CTL" watch "$job" > "$work/watch.out" 2>&1; rc=$?
  status=$(timeout 10 "$CTL" status "$job" --json 2>/dev/null)
  state=$(/usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin).get("state",""))' <<< "$status" 2>/dev/null)
  reason=$(/usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin).get("reason",""))' <<< "$status" 2>/dev/null)
  if [ "$rc" -eq 124 ]; then
    timeout 10 "$CTL" cancel "$job" > /dev/null 2>&1
    after_case "$id" && verdict "$id" hang "$job still $state after 90 s: $(tail -n 1 "$work/watch.out")"
    return
  fi
  local want=SUCCEEDED
  [ "$expect" = fails ] && want=FAILED
  if [ "$state" != "$want" ]; then
    after_case "$id" && verdict "$id" wrong "$job ended $state: $reason"
  elif [ "$expect" = fails ] && ! matches "$pattern" "$reason"; then
    after_case "$id" && verdict "$id" unclear "reason: $reason"
  else
    after_case "$id" && verdict "$id" ok ""
  fi
}

# run ID RC PATTERN CMD...: a command (flags, files, the client) must exit
# RC within 20 s, its output matching PATTERN.
run() {
  local id="$1" want="$2" pattern="$3" out rc; shift 3
  selected "$id" || return 0
  out=$(timeout 20 "$@" 2>&1 < /dev/null); rc=$?
  if [ "$rc" -eq 124 ]; then
    after_case "$id" && verdict "$id" hang "no exit within 20 s"
  elif [ "$rc" -gt 128 ]; then
    after_case "$id" && verdict "$id" crash "killed by signal $((rc - 128))"
  elif [ "$rc" -ne "$want" ]; then
    after_case "$id" && verdict "$id" wrong "exit $rc, not $want: $(tr '\n' ' ' <<< "$out" | cut -c1-200)"
  elif ! matches "$pattern" "$out"; then
    after_case "$id" && verdict "$id" unclear "$(tr '\n' ' ' <<< "$out" | cut -c1-200)"
  else
    after_case "$id" && verdict "$id" ok ""
  fi
}

# net ID TARGET PAYLOAD: raw bytes to a daemon's port (coordinator, shard,
# metrics); every daemon must live, and the coordinator answer.
net() {
  local id="$1" target="$2" payload="$3" port
  selected "$id" || return 0
  case "$target" in
    coordinator) port="${BERTPS_COORDINATOR##*:}" ;;
    shard) port=$(sed 's/.*://' "$work/ps-a.address") ;;
    metrics) port="$metrics_port" ;;
  esac
  if ! /usr/bin/python3 "$here/hostile/send.py" 127.0.0.1 "$port" "$payload" \
    > "$work/net.out" 2>&1 && [ "$payload" = slow ]; then
    after_case "$id" && verdict "$id" wrong "$(tail -n 1 "$work/net.out")"
    return
  fi
  sleep 0.3
  if ! timeout 10 "$CTL" list > /dev/null 2>&1; then
    after_case "$id" && verdict "$id" hang "the coordinator no longer answers"
    return
  fi
  after_case "$id" && verdict "$id" ok ""
}

[ "$list" = 1 ] || start_cluster
source "$here/hostile/cases.sh"
[ "$list" = 1 ] && exit 0
echo "hostile: $total cases: $good as expected, $((total - good)) not (crash $crash, hang $hang, wrong $wrong, unclear $unclear)"
[ "$good" -eq "$total" ] && [ "$total" -gt 0 ]
