#!/usr/bin/env bash
# A failover to a backup that had only just joined, with the events put in
# order by test-only pause points (BERTPS_PAUSE_AT, common/crash_point.h),
# real processes over 127.0.0.1: a job with replicas: 2 (BSP, checkpoints
# every 10 steps) on 4 shard daemons (2 indices) and 2 train workers.
#  1. Worker 1 stops itself at the pause point "train_step" of version 5
#     (step 4 about to start); kill -9 of shard 1's backup; SIGCONT of worker
#     1: shard 1's primary drops its lost backup (at step 4, or at step 3 if
#     that one was still being replicated).
#  2. Worker 0 stops itself at "train_step" of version 20 (step 19 about to
#     start): the job holds at version 19, shard 1 with no backup.
#  3. A spare shard daemon starts; the coordinator gives it shard 1; the
#     primary sends it its snapshot (version 19) and it catches up (the
#     job's backups_added says so).
#  4. SIGCONT of worker 0: step 19 runs with the joined backup live, and at
#     step 20 (a checkpoint step) shard 1's primary stops itself at the
#     point named by the round: "push" (one push of step 20 staged, the step
#     not yet sent to its backup: the joined backup holds nothing of it,
#     while shard 0 has both pushes and waits in the norm exchange for shard
#     1's partial sums) or "exchange" (the step's STAGE on the joined backup,
#     its norms not yet exchanged).
#  5. kill -9 of that primary: the joined spare is promoted at version 20.
# Each round must end within a bounded time (a stall fails it, with what the
# workers were doing) with one failover, no restart, and parameters equal,
# bit for bit, to the same job run with no fault and no replicas. (Without
# the fix the "push" round stalled: the workers start their parts again at
# shard 0's version, 20, and worker 0, started at a checkpoint step, first
# wrote the checkpoint of version 20 again, which waited for shard 0 to
# finish step 20, whose norm exchange waited for the promoted shard 1, which
# waited for worker 0's push of step 20; after the step's deadline shard 0
# broke and the workers looped for good. A part now writes that checkpoint
# only if no shard holds its push of the step: the member that pushed it
# wrote it first.)
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
source "$(dirname "$0")/process_lib.sh"
init_work join_failover
tiny_model_data "$BERT_LOCAL"
STEPS=30
spec() {  # spec NAME REPLICAS EXPORT
  replicated_spec "$1" "$2" "$3" "$STEPS" 'checkpoint { every_steps: 10 }'
}
mine=()  # this round's coordinator, daemons and workers
teardown() { for p in "${mine[@]}"; do kill -9 "$p" 2>/dev/null || true; done; mine=(); }
# round POINT: one job through steps 1-5 above, on a cluster of its own;
# its export in $work/POINT.safetensors.
round() {
  local point="$1" s w pid
  local -A daemon_pid worker_pid metrics_port
  # A long member timeout: a stopped worker or shard does not heartbeat; the
  # losses are found by the primary's drop and the workers' reports.
  start_coordinator "$COORD" 0 "$work/$point-coordinator.log" --member_timeout_s 60 \
    --jobs_root "$work/$point-jobs"
  mine+=($coord_pid)
  coord="$BERTPS_COORDINATOR"
  for s in a b c d; do
    metrics_port[$s]=$(free_port)
    BERTPS_PAUSE_AT="$point:20:1" "$SERVER" --coordinator "$coord" --port 0 \
      --metrics_port "${metrics_port[$s]}" \
      --address_file "$work/$point-ps-$s.address" > "$work/$point-ps-$s.log" 2>&1 &
    pids+=($!); mine+=($!); daemon_pid[$s]=$!
  done
  for s in a b c d; do
    for _ in $(seq 1 200); do [ -s "$work/$point-ps-$s.address" ] && break; sleep 0.05; done
    [ -s "$work/$point-ps-$s.address" ] || fail "$point: shard daemon $s wrote no address"
  done
  # Worker 1 stops before step 4, worker 0 before step 19 (each process
  # stops once, at the first point of its list it reaches).
  for w in a b; do
    BERTPS_PAUSE_AT="train_step:5:1,train_step:20:0" \
      "$WORKER" --role=train --coordinator "$coord" > "$work/$point-w-$w.log" 2>&1 &
    pids+=($!); mine+=($!); worker_pid[$w]=$!
  done
  spec "$point" 2 "$work/$point.safetensors" > "$work/$point.pbtxt"
  job=$("$CTL" submit "$work/$point.pbtxt") || fail "$point: submit"
  # paused_worker VERSION: the worker (a or b) stopped at train_step VERSION.
  paused_worker() {
    local w
    for _ in $(seq 1 600); do
      for w in a b; do
        grep -q "pause point train_step of version $1 reached" "$work/$point-w-$w.log" \
          && { echo "$w"; return 0; }
      done
      sleep 0.1
    done
    return 1
  }
  local w1 w0 backup="" primary="" primary0=""
  w1=$(paused_worker 5) || fail "$point: worker 1 did not stop before step 4"
  for s in a b c d; do
    grep -q "holding a backup of shard 1 of job" "$work/$point-ps-$s.log" && backup=$s
    grep -q "serving shard 1 of job" "$work/$point-ps-$s.log" && primary=$s
    grep -q "serving shard 0 of job" "$work/$point-ps-$s.log" && primary0=$s
  done
  [ -n "$backup" ] && [ -n "$primary" ] && [ -n "$primary0" ] \
    || fail "$point: no daemon holds shard 1's backup or primary, or shard 0's primary"
  # 1. The backup is lost; its primary drops it at step 4 (or at step 3,
  # whose update may still be replicating: a push is answered before its
  # step runs).
  kill -9 "${daemon_pid[$backup]}"
  kill -CONT "${worker_pid[$w1]}"
  # 2. The job holds at version 19.
  w0=$(paused_worker 20) || fail "$point: worker 0 did not stop before step 19"
  for _ in $(seq 1 100); do
    "$CTL" status "$job" | grep -E "^replicas" | grep -q "no backup" && break
    sleep 0.1
  done
  "$CTL" status "$job" | grep -E "^replicas" | grep -q "no backup" \
    || fail "$point: shard 1 still counts its lost backup: $("$CTL" status "$job" | grep -E '^replicas')"
  grep -qE "dropping backup $(cat "$work/$point-ps-$backup.address") at step [34]:" "$work/$point-ps-$primary.log" \
    || fail "$point: the primary did not drop its lost backup at step 3 or 4: $(grep -o 'dropping.*' "$work/$point-ps-$primary.log")"
  echo "$point: shard 1's backup killed, worker 0 paused before step 19"
  # 3. A spare joins and catches up.
  "$SERVER" --coordinator "$coord" --port 0 --address_file "$work/$point-ps-e.address" \
    > "$work/$point-ps-e.log" 2>&1 &
  pids+=($!); mine+=($!)
  for _ in $(seq 1 400); do
    [ "$(field "$job" 's.get("backups_added", 0)')" -ge 1 ] && break
    sleep 0.05
  done
  [ "$(field "$job" 's.get("backups_added", 0)')" -ge 1 ] \
    || fail "$point: the spare did not catch up: $("$CTL" status "$job" | grep -E '^(replicas|state)')"
  grep -q "installed the primary's snapshot of version 19" "$work/$point-ps-e.log" \
    || fail "$point: the spare took no snapshot of version 19: $(grep -o 'installed.*' "$work/$point-ps-e.log")"
  echo "$point: a spare joined shard 1 (snapshot of version 19) and caught up"
  # 4. Step 19 with the joined backup live, then shard 1's primary stops at
  # step 20's point.
  kill -CONT "${worker_pid[$w0]}"
  for _ in $(seq 1 600); do
    grep -q "pause point $point of version 20 reached" "$work/$point-ps-$primary.log" && break
    sleep 0.05
  done
  grep -q "pause point $point of version 20 reached" "$work/$point-ps-$primary.log" \
    || fail "$point: shard 1's primary did not reach its pause point"
  # Shard 0 has both pushes of step 20 (each worker's 21st: the step runs,
  # its norm exchange waits for shard 1).
  scrape_until "${metrics_port[$primary0]}" "$work/$point-shard0.metrics" \
    'bertps_shard_pushes_total\{job_id="[^"]*",result="applied"\} 42$' 10
  # 5. Shard 1's primary is lost: the joined spare takes over.
  kill -9 "${daemon_pid[$primary]}"
  for _ in $(seq 1 400); do
    [ "$(field "$job" 's.get("failovers", 0)')" -ge 1 ] && break
    sleep 0.05
  done
  [ "$(field "$job" 's.get("failovers", 0)')" -ge 1 ] || fail "$point: no failover"
  [ "$(field "$job" 's["ps_addresses"][1]')" = "$(cat "$work/$point-ps-e.address")" ] \
    || fail "$point: shard 1 did not fail over to the joined spare"
  for _ in $(seq 1 100); do
    grep -q "promoted to primary of term 1" "$work/$point-ps-e.log" && break
    sleep 0.05
  done
  grep -q "promoted to primary of term 1 at version 20" "$work/$point-ps-e.log" \
    || fail "$point: the spare was not promoted at version 20: $(grep -o 'promoted.*' "$work/$point-ps-e.log")"
  echo "$point: shard 1's primary killed at step 20: $(grep -o 'promoted to primary of term.*' "$work/$point-ps-e.log" | head -1)"
  if ! timeout 60 "$CTL" watch "$job" > "$work/$point-watch.out" 2>&1; then
    echo "$point: the job did not end within 60 s of the failover; the workers:"
    for w in a b; do grep -E "slot [01]:|starts" "$work/$point-w-$w.log" | tail -3 | cut -c1-400; done
    fail "$point: stalled after the failover to the joined backup: $("$CTL" status "$job" | grep -E '^(state|replicas|progress)')"
  fi
  [ "$(field "$job" 's.get("restarts", 0)')" = 0 ] || fail "$point: the job was restarted"
  [ "$(field "$job" 's.get("failovers", 0)')" = 1 ] || fail "$point: expected one failover"
  for _ in $(seq 1 100); do [ -f "$work/$point.safetensors" ] && break; sleep 0.1; done
  if [ "$point" = push ]; then
    # The joined spare held nothing of step 20: the workers pushed it again.
    ! grep -q "completed step 20 of the lost primary" "$work/$point-ps-e.log" \
      || fail "$point: the promoted spare held a stage of step 20"
  else
    grep -q "completed step 20 of the lost primary" "$work/$point-ps-e.log" \
      || fail "$point: the promoted spare did not complete the staged step 20"
  fi
  echo "$point: the job ended with 1 failover, no restart$(grep -h -o 'worker 0 started again at step.*' "$work/$point"-w-*.log | head -1 | sed 's/^/; /')"
  teardown
}

for point in push exchange; do round "$point"; done

# The same job with no fault and no replicas, on a fresh cluster.
start_coordinator "$COORD" 0 "$work/clean-coordinator.log" --jobs_root "$work/clean-jobs"
start_ps_daemons x y
start_train_daemons x y
spec clean 1 "$work/clean.safetensors" > "$work/clean.pbtxt"
clean=$("$CTL" submit "$work/clean.pbtxt") || fail "submit clean"
timeout 60 "$CTL" watch "$clean" > "$work/clean-watch.out" 2>&1 || fail "the clean job failed"
for point in push exchange; do
  expect_same_parameters "$work/$point.safetensors" "$work/clean.safetensors" \
    "$point: a failover to a just-joined backup vs no fault and no replicas"
done
echo PASS
