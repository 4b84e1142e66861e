#!/usr/bin/env bash
# SIGTERM ends every daemon role promptly with exit status 0, real processes
# over 127.0.0.1: a coordinator, a parameter-server shard (idle, and
# installed in a running job), a train worker (idle and mid-job), a
# preprocess worker, an eval worker and a pipeline-stage daemon, each
# registered with the coordinator; the coordinator last.
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
source "$(dirname "$0")/process_lib.sh"
init_work sigterm
tiny_model_data "$BERT_LOCAL"
port=$(free_port)
coord="127.0.0.1:$port"
start_coordinator "$COORD" "$port" "$work/coordinator.log" --member_timeout_s 5

start() {  # start NAME ARGS...: a daemon in the background, pid in $started
  local name="$1"; shift
  "$@" > "$work/$name.log" 2>&1 &
  started=$!; pids+=($started)
}

# Idle members of every role.
start ps-idle "$SERVER" --coordinator "$coord" --port 0; ps_idle=$started
start train-idle "$WORKER" --role=train --coordinator "$coord"; train_idle=$started
start preprocess "$WORKER" --role=preprocess --coordinator "$coord"; pre=$started
start eval "$WORKER" --role=eval --coordinator "$coord"; ev=$started
start stage "$WORKER" --role=stage --coordinator "$coord"; stage=$started
sleep 1  # registered and heartbeating
stop_gently "$ps_idle" "idle shard"
stop_gently "$train_idle" "idle train worker"
stop_gently "$pre" "preprocess worker"
stop_gently "$ev" "eval worker"
stop_gently "$stage" "stage daemon"

# A shard and a train worker in a running job.
start ps "$SERVER" --coordinator "$coord" --port 0; ps=$started
start train "$WORKER" --role=train --coordinator "$coord"; train=$started
cat > "$work/job.pbtxt" <<EOF2
name: "long"
task: PRETRAIN
model: "$work/model.json"
data: "$work/data/*.tfrecord"
batch_size: 4
steps: 100000
EOF2
job=$("$CTL" submit "$work/job.pbtxt") || fail "submit"
for _ in $(seq 1 400); do
  "$CTL" status "$job" 2>/dev/null | grep -qE "step +[1-9]" && break
  sleep 0.05
done
"$CTL" status "$job" | grep -qE "step +[1-9]" || fail "the job made no step: $("$CTL" status "$job")"
stop_gently "$train" "train worker mid-job"
stop_gently "$ps" "shard mid-job"
stop_gently "$coord_pid" "coordinator"
pids=()
echo PASS
