#!/usr/bin/env bash
# Shard daemons drained by SIGTERM while a replicated job runs, with real
# processes over 127.0.0.1: a job with replicas: 2 on 4 shard daemons (2
# indices, a primary and a backup each) and 2 train daemons, a fifth shard
# daemon idle.
#  1. SIGTERM to shard 0's backup: it exits 0; the index goes on without a
#     failover and the idle daemon joins as its new backup (re-replication).
#  2. SIGTERM to shard 1's primary: it exits 0; its backup is promoted at
#     once (a failover, found from the leave, not from missed heartbeats),
#     with no restart.
#  3. An unreplicated job (replicas 1) and an idle shard daemon: SIGTERM to
#     shard 1's primary; the idle daemon joins as its backup, the primary
#     leaves once it caught up, and the index fails over to it: no restart,
#     the same bits.
# The job SUCCEEDS, its incarnation unchanged, with parameters equal, bit
# for bit, to the same job run with no fault and no replicas.
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
source "$(dirname "$0")/process_lib.sh"
init_work shard_drain
tiny_model_data "$BERT_LOCAL"
# A long member timeout: the failover must come from the leave.
start_coordinator "$COORD" 0 "$work/coordinator.log" --member_timeout_s 30
start_ps_daemons a b c d
start_train_daemons a b
spec() { replicated_spec "$1" "$2" "$3" 600; }  # spec NAME REPLICAS EXPORT
spec replicated 2 "$work/replicated.safetensors" > "$work/replicated.pbtxt"
job=$("$CTL" submit "$work/replicated.pbtxt") || fail "submit"
wait_for_step "$job" 20
role_of() {  # role_of INDEX primary|backup: the daemon's name
  local s
  for s in a b c d; do
    if [ "$2" = primary ]; then
      grep -q "serving shard $1 of job" "$work/ps-$s.log" && { echo "$s"; return 0; }
    else
      grep -q "holding a backup of shard $1 of job" "$work/ps-$s.log" && { echo "$s"; return 0; }
    fi
  done
  return 1
}
backup0=$(role_of 0 backup) || fail "no daemon holds shard 0's backup"
primary1=$(role_of 1 primary) || fail "no daemon serves shard 1"
start_ps_daemons e  # idle: the next backup

# 1. A backup drained.
stop_gently "${ps_daemon_pid[$backup0]}" "shard 0's backup (ps-$backup0)" 35
wait_for_field "$job" 's.get("backups_added", 0)' 1 30 \
  "the idle daemon did not become shard 0's backup"
[ "$(field "$job" 's.get("failovers", 0)')" = 0 ] || fail "a backup's drain failed an index over"
echo "shard 0's backup drained: no failover; $("$CTL" status "$job" | grep -m1 '^replicas' | cut -c1-120)"

# 2. A primary drained.
before=$(field "$job" 's["progress"]["step"]')
t0=$(date +%s%N)
stop_gently "${ps_daemon_pid[$primary1]}" "shard 1's primary (ps-$primary1)" 35
wait_for_field "$job" 's.get("failovers", 0)' 1 5 "no failover after the primary's drain"
echo "shard 1's primary drained: failed over $(( ($(date +%s%N) - t0) / 1000000 )) ms after SIGTERM (member timeout 30 s)"
wait_for_step "$job" $((before + 20))
timeout 300 "$CTL" watch "$job" > "$work/watch.out" 2>&1 || fail "the job failed: $(tail -3 "$work/watch.out")"
[ "$(field "$job" 's["state"]')" = SUCCEEDED ] || fail "the job: $(field "$job" 's["state"]')"
[ "$(field "$job" 's.get("restarts", 0)')" = 0 ] || fail "the job was restarted"
[ "$(field "$job" 's.get("incarnation", 0)')" = 1 ] || fail "the incarnation changed"

# The same job with no fault and no replicas.
spec clean 1 "$work/clean.safetensors" > "$work/clean.pbtxt"
clean=$("$CTL" submit "$work/clean.pbtxt") || fail "submit clean"
timeout 300 "$CTL" watch "$clean" > "$work/watch-clean.out" 2>&1 || fail "the clean job failed"
expect_same_parameters "$work/replicated.safetensors" "$work/clean.safetensors" \
  "after a backup's and a primary's drain vs the same job without faults or replicas"

# 3. A primary with no backup drained (replicas 1): an idle shard daemon
# joins as its backup (a snapshot, then the steps since), then the index
# fails over to it as the primary leaves; no restart.
start_ps_daemons f  # idle: the backup that takes the index over
spec handoff 1 "$work/handoff.safetensors" > "$work/handoff.pbtxt"
handoff=$("$CTL" submit "$work/handoff.pbtxt") || fail "submit handoff"
wait_for_step "$handoff" 20
victim=""
for s in a b c d e f; do
  grep -q "serving shard 1 of job $handoff" "$work/ps-$s.log" 2>/dev/null && victim=$s
done
[ -n "$victim" ] || fail "no daemon serves shard 1 of the unreplicated job"
stop_gently "${ps_daemon_pid[$victim]}" "shard 1's primary without a backup (ps-$victim)" 35
[ "$(field "$handoff" 's.get("failovers", 0)')" = 1 ] \
  || fail "the primary left before its index failed over: $("$CTL" events "$handoff" | tail -5)"
timeout 300 "$CTL" watch "$handoff" > "$work/watch-handoff.out" 2>&1 || fail "the handoff job failed: $(tail -3 "$work/watch-handoff.out")"
[ "$(field "$handoff" 's["state"]')" = SUCCEEDED ] || fail "the handoff job: $(field "$handoff" 's["state"]')"
[ "$(field "$handoff" 's.get("restarts", 0)')" = 0 ] || fail "the handoff job was restarted"
"$CTL" events "$handoff" > "$work/handoff.events"
grep -q "joins as a backup .* the primary drains" "$work/handoff.events" \
  || fail "no backup joined for the draining primary: $(tail -5 "$work/handoff.events")"
echo "unreplicated primary drained: $(grep -m1 'failed over' "$work/handoff.events" | cut -c1-160)"
expect_same_parameters "$work/handoff.safetensors" "$work/clean.safetensors" \
  "after an unreplicated primary's drain (a backup joined for it) vs the same job without faults"
echo PASS
