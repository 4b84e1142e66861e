#!/usr/bin/env bash
# Pipeline jobs through the coordinator, real processes over 127.0.0.1: a
# coordinator, one parameter-server shard, two stage daemons and a train
# daemon.
#  1. A PRETRAIN job with pipeline { stages: 2 micro_batches: 4 } (1F1B)
#     runs to SUCCEEDED; its exported parameters equal (1e-5) those of the
#     same job run by one train worker (no pipeline).
#  2. A stage killed with SIGKILL mid-job, a new stage daemon started: its
#     slot goes to the new daemon, the other stage starts the step again
#     with it, no restart (the incarnation unchanged); the job succeeds with
#     the parameters, bit for bit, of the same job run without a fault.
#  3. A stage killed with no stage daemon to take its slot and
#     checkpoint.max_restarts: -1: once the slot stayed free for the member
#     timeout the job fails, with a reason naming the stage.
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
source "$(dirname "$0")/process_lib.sh"
init_work pipeline
tiny_model_data "$BERT_LOCAL"
port=$(free_port)
coord="127.0.0.1:$port"
start_coordinator "$COORD" "$port" "$work/coordinator.log" --member_timeout_s 3
"$SERVER" --coordinator "$coord" --port 0 > "$work/ps.log" 2>&1 &
pids+=($!)
stage_pids=()
for s in 0 1; do
  "$WORKER" --role=stage --coordinator "$coord" > "$work/stage$s.log" 2>&1 &
  pids+=($!); stage_pids+=($!)
done
"$WORKER" --role=train --coordinator "$coord" > "$work/train.log" 2>&1 &
pids+=($!)

spec() {  # spec NAME EXPORT PIPELINE-LINE
  tiny_spec "$1" 6 "no_dropout: true" "export_path: \"$2\"" "$3"
}
spec pipe "$work/pipe.safetensors" 'pipeline { stages: 2 micro_batches: 4 schedule: "1f1b" }' > "$work/pipe.pbtxt"
spec plain "$work/plain.safetensors" '' > "$work/plain.pbtxt"

job=$("$CTL" submit "$work/pipe.pbtxt") || fail "submit pipe"
"$CTL" watch "$job" > "$work/watch-pipe.out" 2>&1 || fail "pipeline job: $(tail -3 "$work/watch-pipe.out")"
"$CTL" status "$job" | grep -q "step *6/6" || fail "status: $("$CTL" status "$job")"
job2=$("$CTL" submit "$work/plain.pbtxt") || fail "submit plain"
"$CTL" watch "$job2" > "$work/watch-plain.out" 2>&1 || fail "plain job: $(tail -3 "$work/watch-plain.out")"
for i in $(seq 1 100); do [ -f "$work/plain.safetensors" ] && [ -f "$work/pipe.safetensors" ] && break; sleep 0.1; done
worst=$(max_relative_difference "$work/pipe.safetensors" "$work/plain.safetensors") \
  || fail "cannot compare the exports"
echo "pipeline vs one worker: worst relative difference $worst"
/usr/bin/python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < 1e-5 else 1)" "$worst" \
  || fail "pipeline != data-parallel ($worst)"

wait_step() {  # wait_step JOB N
  local step=0
  for i in $(seq 1 600); do
    step=$("$CTL" metrics "$1" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["progress"].get("step",0))')
    [ "$step" -ge "$2" ] && return 0
    sleep 0.1
  done
  fail "step $2 not reached (at $step)"
}

# 2. A stage killed mid-job: its slot taken by a new stage daemon, no
#    restart.
restart_spec() {  # restart_spec NAME CKPT-DIR
  sed -e 's/steps: 6/steps: 200/' -e "s/name: \"pipe\"/name: \"$1\"/" \
      -e "s#export_path: .*#export_path: \"$work/$1.safetensors\"#" "$work/pipe.pbtxt"
  echo "checkpoint { dir: \"$2\" every_steps: 5 }"
}
restart_spec pipe-restart "$work/ckpt" > "$work/restart.pbtxt"
job3=$("$CTL" submit "$work/restart.pbtxt") || fail "submit restart"
wait_step "$job3" 12
kill -9 "${stage_pids[1]}"
"$WORKER" --role=stage --coordinator "$coord" > "$work/stage2.log" 2>&1 &
pids+=($!); stage_pids[1]=$!
"$CTL" watch "$job3" > "$work/watch-restart.out" 2>&1 || fail "job after a stage kill: $(tail -3 "$work/watch-restart.out")"
grep -q "pipeline stage [01] of replica 0 is member .*: the replica's stages start the step again with it, no restart" \
  "$work/watch-restart.out" || fail "no takeover event: $(grep -i -m3 "restart\|stage" "$work/watch-restart.out")"
"$CTL" status "$job3" --json > "$work/restart-status.json"
[ "$(/usr/bin/python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s.get("restarts", 0), s.get("incarnation", 0))' "$work/restart-status.json")" = "0 1" ] \
  || fail "the job was restarted: $(grep -i -m3 "restart" "$work/watch-restart.out")"
echo "killed stage: $(grep -o -m1 "pipeline stage [01] of replica 0 (member.*" "$work/watch-restart.out" | sed 's/(member[^)]*) //' | cut -c1-160)"
echo "  then: $(grep -o -m1 "pipeline stage [01] of replica 0 is member.*" "$work/watch-restart.out" | sed 's/member [^ ]* at //')"
# The same job from its start without a fault: equal parameters, bit for bit.
restart_spec pipe-clean "$work/ckpt-clean" > "$work/clean.pbtxt"
job5=$("$CTL" submit "$work/clean.pbtxt") || fail "submit clean"
"$CTL" watch "$job5" > "$work/watch-clean.out" 2>&1 || fail "clean job: $(tail -3 "$work/watch-clean.out")"
expect_same_parameters "$work/pipe-restart.safetensors" "$work/pipe-clean.safetensors" \
  "stage killed and replaced vs no fault"

# 3. No restart allowed: the job fails fast, naming the stage.
sed -e 's/steps: 6/steps: 400/' -e 's/name: "pipe"/name: "pipe-kill"/' -e '/export_path/d' \
  "$work/pipe.pbtxt" > "$work/kill.pbtxt"
echo "checkpoint { max_restarts: -1 }" >> "$work/kill.pbtxt"
job4=$("$CTL" submit "$work/kill.pbtxt") || fail "submit kill"
wait_step "$job4" 2
kill -9 "${stage_pids[1]}"
start=$(date +%s)
if "$CTL" watch "$job4" > "$work/watch-kill.out" 2>&1; then fail "a job with a dead stage succeeded"; fi
took=$(( $(date +%s) - start ))
"$CTL" status "$job4" > "$work/kill-status.out"
grep -q "FAILED" "$work/kill-status.out" || fail "not FAILED: $(cat "$work/kill-status.out")"
grep -qi "stage" "$work/kill-status.out" || fail "reason names no stage: $(cat "$work/kill-status.out")"
[ "$took" -le 60 ] || fail "the failure took ${took}s"
echo "killed stage: FAILED in ${took}s: $(grep reason "$work/kill-status.out")"
echo PASS
