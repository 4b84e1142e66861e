#!/usr/bin/env bash
# Fault tolerance with real processes over 127.0.0.1: a coordinator, two
# parameter-server daemons and two train daemons run one BSP job (a
# checkpoint every 20 steps) through four faults:
#  1. kill -9 of shard 1, started again at its address: the job starts again
#     from its newest checkpoint (a new incarnation; both shards restore it),
#     once the workers' report and a failed probe, or the new daemon's
#     registration, say it was lost;
#  2. kill -9 of a train daemon: a new one takes its slot after the member
#     timeout;
#  3. SIGTERM of shard 0 (no backup, no idle shard daemon to join as one):
#     it leaves and exits 0; the job waits for a shard and starts again from
#     its newest checkpoint on a new one;
#  4. SIGTERM of a train daemon: it exits 0; its slot is free at once (slot
#     0) or handed to the other daemon at once, which takes it at its next
#     step boundary (slot 1).
# With checkpoint.keep 3 only the newest three checkpoints remain.
# The job succeeds after exactly 2 restarts, and its final parameters equal,
# bit for bit, those of the same job run from its start with no fault (so
# every fault above is covered: no update lost or applied twice).
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
source "$(dirname "$0")/process_lib.sh"
init_work faults
tiny_model_data "$BERT_LOCAL"
start_coordinator "$COORD" 0 "$work/coordinator.log" --member_timeout_s 3
coord="$BERTPS_COORDINATOR"

start_shard() {  # start_shard NAME PORT: shard_pid
  "$SERVER" --coordinator "$coord" --port "$2" > "$work/$1.log" 2>&1 &
  shard_pid=$!; pids+=($shard_pid)
}
start_worker() {  # start_worker NAME: worker_pid
  "$WORKER" --role=train --coordinator "$coord" > "$work/$1.log" 2>&1 &
  worker_pid=$!; pids+=($worker_pid)
}
wait_step() {  # wait_step JOB N: until the job reached step N
  local s=0
  for _ in $(seq 1 1200); do
    s=$(field "$1" 's.get("progress", {}).get("step", 0)')
    [ "$s" -ge "$2" ] && return 0
    sleep 0.1
  done
  fail "step $2 not reached (at $s)"
}

ps_port=($(free_port) $(free_port))
start_shard ps-a "${ps_port[0]}"; ps_pid[0]=$shard_pid
start_shard ps-b "${ps_port[1]}"; ps_pid[1]=$shard_pid
start_worker w-a; w_pid[0]=$worker_pid
start_worker w-b; w_pid[1]=$worker_pid

spec() {  # spec NAME CKPT-DIR EXPORT [RESTORE]
  tiny_spec "$1" 400 "num_ps_shards: 2" "num_workers: 2" "no_dropout: true" \
      "checkpoint { dir: \"$2\" every_steps: 20 keep: 3 ${4:+restore: \"$4\"} }" \
      "export_path: \"$3\""
}
spec faults "$work/ckpt" "$work/faults.safetensors" > "$work/faults.pbtxt"
job=$("$CTL" submit "$work/faults.pbtxt") || fail "submit"

# 1. kill -9 of shard 1; the same daemon comes back at its address.
wait_step "$job" 50
addr1=$(field "$job" 's["ps_addresses"][1]')
for k in 0 1; do
  [ "$addr1" = "127.0.0.1:${ps_port[$k]}" ] && victim=$k
done
kill -9 "${ps_pid[$victim]}"
echo "killed shard 1 ($addr1)"
sleep 0.5
start_shard ps-a-again "${ps_port[$victim]}"; ps_pid[$victim]=$shard_pid
for _ in $(seq 1 300); do
  [ "$(field "$job" 's.get("restarts", 0)')" -ge 1 ] && break; sleep 0.1
done
[ "$(field "$job" 's.get("restarts", 0)')" -eq 1 ] || fail "no restart after the shard was killed"

# 2. kill -9 of a train daemon; a fresh one takes the slot.
wait_step "$job" 120
kill -9 "${w_pid[1]}"
echo "killed a train daemon"
start_worker w-c; w_pid[1]=$worker_pid

# 3. SIGTERM of shard 0: exit 0, the job restarts on a new shard.
wait_step "$job" 200
addr0=$(field "$job" 's["ps_addresses"][0]')
for k in 0 1; do
  [ "$addr0" = "127.0.0.1:${ps_port[$k]}" ] && victim=$k
done
stop_gently "${ps_pid[$victim]}" "shard 0"
echo "shard 0 ($addr0) left on SIGTERM"
start_shard ps-c "$(free_port)"

# 4. SIGTERM of a train daemon: exit 0; its slot is freed (slot 0) or handed
# to the other daemon (slot 1) at once.
wait_step "$job" 300
stop_gently "${w_pid[0]}" "a train daemon"
echo "a train daemon left on SIGTERM"
start_worker w-d

"$CTL" watch "$job" > "$work/watch.out" 2>&1 || fail "the job failed: $(tail -5 "$work/watch.out")"
# Found lost by the workers' report and a failed probe, or, when the new
# daemon at its address registered first, as restarted.
grep -qE "restart 1 of 10: parameter-server shard 1 .* (was restarted|did not answer a probe)" "$work/watch.out" \
  || fail "no restart event for the killed shard: $(grep -i restart "$work/watch.out")"
grep -q "stopped answering; its slot is free" "$work/watch.out" \
  || fail "the killed train daemon's slot was not freed"
grep -q "restart 2 of 10: parameter-server shard 0 .* left (shut down)" "$work/watch.out" \
  || fail "no restart event for the shard that left: $(grep -i restart "$work/watch.out")"
# (Slot 0 is freed as it leaves: its holder writes the checkpoints; slot 1
# is handed over.)
grep -qE "worker 0 \(member [^)]*\) left \(shut down\); its slot is free|member .* handed every slot it held over" "$work/watch.out" \
  || fail "the slot of the train daemon that got SIGTERM was neither freed nor handed over at once: $(grep -iE 'handed|left' "$work/watch.out" | tail -3)"
[ "$(field "$job" 's.get("restarts", 0)')" -eq 2 ] || fail "expected 2 restarts"
from=$(grep -o "restart 2 of 10: .*resuming from the checkpoint of step [0-9]*" "$work/watch.out" \
       | grep -o "[0-9]*$") || fail "the second restart names no checkpoint"
echo "the last restart resumed from the checkpoint of step $from"

# checkpoint.keep 3: the newest three checkpoints remain (the restarts
# resumed from kept ones), the older ones were removed as the job went.
kept() { ls -d "$work"/ckpt/ckpt-*/manifest.json 2>/dev/null | sed 's#.*/ckpt-\([0-9]*\)/manifest.json#\1#' | sort -n | tr '\n' ' '; }
for _ in $(seq 1 50); do [ "$(kept)" = "360 380 400 " ] && break; sleep 0.1; done
[ "$(kept)" = "360 380 400 " ] || fail "checkpoint.keep 3 left: $(kept)"
grep -q "removed the checkpoint.* (checkpoint.keep 3)" "$work/watch.out" || fail "no removal event"
echo "checkpoint.keep 3: $(kept)remain"

# The same job from its start, no fault: equal parameters, bit for bit.
spec clean "$work/ckpt-clean" "$work/clean.safetensors" > "$work/clean.pbtxt"
clean=$("$CTL" submit "$work/clean.pbtxt") || fail "submit clean"
"$CTL" watch "$clean" > "$work/watch-clean.out" 2>&1 || fail "the clean job failed"
grep -qi "restart" "$work/watch-clean.out" && fail "the clean job restarted: $(grep -i restart "$work/watch-clean.out")"
for _ in $(seq 1 100); do [ -f "$work/clean.safetensors" ] && [ -f "$work/faults.safetensors" ] && break; sleep 0.1; done
worst=$(max_relative_difference "$work/faults.safetensors" "$work/clean.safetensors") \
  || fail "cannot compare the exports"
echo "after the faults vs the same job without faults: worst relative difference $worst"
[ "$worst" = "0.000e+00" ] || fail "the parameters differ ($worst)"
echo PASS
