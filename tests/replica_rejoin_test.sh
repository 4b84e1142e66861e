#!/usr/bin/env bash
# A lost backup is replaced while the job runs, with real processes over
# 127.0.0.1: a job with replicas: 2 runs on 4 shard daemons (2 indices, a
# primary and a backup each) and 2 train workers. A spare shard daemon
# started with the test-only crash point "snapshot" (it dies by SIGKILL
# once it received its primary's snapshot) waits idle. kill -9 of shard 1's
# backup: the coordinator gives the index the spare, whose primary streams
# it a snapshot while the job goes on; the spare dies in its catch-up
# (proven by its own line); the primary reports the join failed. A second
# spare then joins, takes the snapshot and the steps since, and catches up
# (the primary's log and the job's events say so). Then kill -9 of shard
# 1's primary: the caught-up spare is promoted (no restart). The job ends
# with parameters equal, bit for bit, to the same job run with no fault and
# no replicas.
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
source "$(dirname "$0")/process_lib.sh"
init_work rejoin
tiny_model_data "$BERT_LOCAL"
start_coordinator "$COORD" 0 "$work/coordinator.log" --member_timeout_s 6 \
  --jobs_root "$work/jobs"
start_ps_daemons a b c d
start_train_daemons a b
spec() { replicated_spec "$1" "$2" "$3" 1000 'checkpoint { every_steps: 50 }'; }  # spec NAME REPLICAS EXPORT
spec replicated 2 "$work/replicated.safetensors" > "$work/replicated.pbtxt"
job=$("$CTL" submit "$work/replicated.pbtxt") || fail "submit"
for _ in $(seq 1 600); do
  [ "$(field "$job" 's.get("progress", {}).get("step", 0)')" -ge 20 ] && break
  sleep 0.1
done
# The daemon of shard 1's backup and of its primary, from their logs.
backup_of_1=""; primary_of_1=""
for s in a b c d; do
  grep -q "holding a backup of shard 1 of job" "$work/ps-$s.log" && backup_of_1=$s
  grep -q "serving shard 1 of job" "$work/ps-$s.log" && primary_of_1=$s
done
[ -n "$backup_of_1" ] && [ -n "$primary_of_1" ] || fail "no daemon holds shard 1's backup or primary"
# The first spare dies once it has its primary's snapshot.
BERTPS_CRASH_AT='snapshot:*:1' start_ps_daemons e
sleep 0.5
kill -9 "${ps_daemon_pid[$backup_of_1]}"
for _ in $(seq 1 300); do
  grep -q "crash point snapshot of version" "$work/ps-e.log" && break
  sleep 0.05
done
grep -q "crash point snapshot of version" "$work/ps-e.log" \
  || fail "the first spare never reached its crash point: $(tail -3 "$work/ps-e.log")"
echo "the first spare joined and died in its catch-up: $(grep -m1 -o 'crash point.*' "$work/ps-e.log")"
for _ in $(seq 1 300); do
  grep -q "could not join" "$work/ps-$primary_of_1.log" && break
  sleep 0.05
done
grep -q "could not join" "$work/ps-$primary_of_1.log" \
  || fail "the primary did not report the failed join"
# A second spare joins and catches up while the job runs.
start_ps_daemons f
for _ in $(seq 1 400); do
  [ "$(field "$job" 's.get("backups_added", 0)')" -ge 1 ] && break
  sleep 0.05
done
[ "$(field "$job" 's.get("backups_added", 0)')" -ge 1 ] \
  || fail "no backup caught up: $("$CTL" status "$job" | grep -E '^(replicas|state)')"
grep -q "installed the primary's snapshot of version" "$work/ps-f.log" \
  || fail "the second spare took no snapshot"
at=$(field "$job" 'int(s.get("progress", {}).get("step", 0))')
echo "the second spare caught up at step $at: $(grep -m1 -o 'backup 127.0.0.1:[0-9]* installed the snapshot.*' "$work/ps-$primary_of_1.log" | cut -c1-160)"
"$CTL" status "$job" | grep -E "^(replicas|re-replicated)" || fail "status shows no re-replication"
[ "$(field "$job" 's["shards"][1]["backups"][0]')" != "" ] || fail "shard 1 has no backup"
[ "$(field "$job" 's.get("restarts", 0)')" = 0 ] || fail "restarted"
# Its primary is lost: the new backup takes over.
applied=$(field "$job" 'int(s["shards"][1].get("applied", 0))')
for _ in $(seq 1 200); do
  [ "$(field "$job" 'int(s["shards"][1].get("backups_applied", [0])[0])')" -gt "$applied" ] && break
  sleep 0.05
done
kill -9 "${ps_daemon_pid[$primary_of_1]}"
for _ in $(seq 1 300); do
  [ "$(field "$job" 's.get("failovers", 0)')" -ge 1 ] && break
  sleep 0.05
done
[ "$(field "$job" 's.get("failovers", 0)')" -ge 1 ] || fail "no failover to the joined backup"
[ "$(field "$job" 's["ps_addresses"][1]')" = "$(cat "$work/ps-f.address")" ] \
  || fail "shard 1 did not fail over to the joined spare"
echo "shard 1's primary killed: failed over to the joined spare"
"$CTL" watch "$job" > "$work/watch.out" 2>&1 || fail "the job failed: $(tail -3 "$work/watch.out")"
[ "$(field "$job" 's.get("restarts", 0)')" = 0 ] || fail "the job was restarted: $(grep -i restart "$work/watch.out" | head -3)"
[ "$(field "$job" 's.get("incarnation", 0)')" = 1 ] || fail "the incarnation changed"
grep -q "could not be brought up to date by its primary" "$work/watch.out" \
  || fail "no event of the failed join"
grep -o "shard 1: member [^ ]* at [0-9.:]* caught up.*" "$work/watch.out" | head -1 | cut -c1-200

# The same job with no fault and no replicas.
spec clean 1 "$work/clean.safetensors" > "$work/clean.pbtxt"
clean=$("$CTL" submit "$work/clean.pbtxt") || fail "submit clean"
"$CTL" watch "$clean" > "$work/watch-clean.out" 2>&1 || fail "the clean job failed"
for _ in $(seq 1 100); do [ -f "$work/clean.safetensors" ] && [ -f "$work/replicated.safetensors" ] && break; sleep 0.1; done
worst=$(max_relative_difference "$work/replicated.safetensors" "$work/clean.safetensors") \
  || fail "cannot compare the exports"
echo "after a backup replaced while training and a failover to it vs the same job without faults or replicas: worst relative difference $worst"
[ "$worst" = "0.000e+00" ] || fail "the parameters differ ($worst)"
echo PASS
