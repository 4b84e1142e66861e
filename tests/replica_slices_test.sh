#!/usr/bin/env bash
# Replicas on shard daemons of several slices, with real processes over
# 127.0.0.1: 2 shard daemons of 2 slices each (bertps_server --slices 2)
# hold a job with replicas: 2 over 2 shard indices, each daemon the primary
# of one index and the backup of the other, never both replicas of one index
# (the status names each replica's daemon). kill -9 of the daemon of shard
# 1's primary takes shard 0's backup with it: shard 1 fails over to the
# other daemon (no restart, the incarnation unchanged) and shard 0 runs on
# without a backup. The job ends with parameters equal, bit for bit, to the
# same job run with no fault and no replicas (on the surviving daemon's two
# slices).
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
source "$(dirname "$0")/process_lib.sh"
init_work slices
tiny_model_data "$BERT_LOCAL"
start_coordinator "$COORD" 0 "$work/coordinator.log" --member_timeout_s 6 \
  --jobs_root "$work/jobs"
ps_daemon_flags=(--slices 2)
start_ps_daemons a b
ps_daemon_flags=()
start_train_daemons a b
for s in a b; do
  grep -q "listening on .*,.* (2 slices)" "$work/ps-$s.log" \
    || fail "daemon $s does not serve 2 slices: $(head -3 "$work/ps-$s.log")"
done
# daemon_of ADDRESS: the daemon (a or b) one of whose slices listens there.
daemon_of() {
  local s
  for s in a b; do
    tr ',' '\n' < "$work/ps-$s.address" | grep -qx "$1" && { echo "$s"; return; }
  done
  fail "no daemon listens at $1"
}
spec() { replicated_spec "$1" "$2" "$3" 300 'checkpoint { every_steps: 50 }'; }  # spec NAME REPLICAS EXPORT
spec replicated 2 "$work/replicated.safetensors" > "$work/replicated.pbtxt"
job=$("$CTL" submit "$work/replicated.pbtxt") || fail "submit"
wait_for_step "$job" 30
[ "$(field "$job" 'len(s.get("shards", []))')" = 2 ] || fail "no replica status: $("$CTL" status "$job" --json | head -c 600)"
for i in 0 1; do
  primary=$(field "$job" "s['shards'][$i].get('primary_daemon', '')")
  backup=$(field "$job" "(s['shards'][$i].get('backup_daemons') or [''])[0]")
  [ -n "$primary" ] && [ -n "$backup" ] || fail "shard $i names no daemons: $("$CTL" status "$job" --json | head -c 800)"
  [ "$primary" != "$backup" ] || fail "shard $i has both replicas in daemon $primary"
  echo "shard $i: primary in daemon $primary, backup in daemon $backup"
done
[ "$(field "$job" 's["shards"][0]["primary_daemon"]')" != "$(field "$job" 's["shards"][1]["primary_daemon"]')" ] \
  || fail "both primaries in one daemon"
"$CTL" status "$job" | grep -E "^replicas .*\[[0-9.:]+\]" || fail "status names no daemon"
victim=$(daemon_of "$(field "$job" 's["ps_addresses"][1]')")
survivor=a; [ "$victim" = a ] && survivor=b
kill -9 "${ps_daemon_pid[$victim]}"
killed=$(date +%s%N)
for _ in $(seq 1 300); do
  [ "$(field "$job" 's.get("failovers", 0)')" -ge 1 ] && break
  sleep 0.05
done
[ "$(field "$job" 's.get("failovers", 0)')" -ge 1 ] \
  || fail "no failover within 15 s of the kill: $(tail -5 "$work/coordinator.log")"
echo "daemon $victim killed: shard 1 failed over after $(( ($(date +%s%N) - killed) / 1000000 )) ms"
[ "$(daemon_of "$(field "$job" 's["ps_addresses"][1]')")" = "$survivor" ] \
  || fail "shard 1 is not on daemon $survivor"
for _ in $(seq 1 300); do
  [ "$(field "$job" 'len(s["shards"][0].get("backups", []))')" = 0 ] && break
  sleep 0.05
done
[ "$(field "$job" 'len(s["shards"][0].get("backups", []))')" = 0 ] \
  || fail "shard 0 still counts the killed daemon's slice as its backup"
"$CTL" watch "$job" > "$work/watch.out" 2>&1 || fail "the job failed: $(tail -3 "$work/watch.out")"
[ "$(field "$job" 's.get("restarts", 0)')" = 0 ] || fail "the job was restarted: $(grep -i restart "$work/watch.out" | head -3)"
[ "$(field "$job" 's.get("incarnation", 0)')" = 1 ] || fail "the incarnation changed"
grep -o "shard 1: primary .*" "$work/watch.out" | head -1 | sed 's/(member [^)]*) //' | cut -c1-200
grep -o "backup of shard 0 .*" "$work/watch.out" | head -1 | sed 's/(member [^)]*) //' | cut -c1-200

# The same job with no fault and no replicas, on the survivor's slices.
spec clean 1 "$work/clean.safetensors" > "$work/clean.pbtxt"
clean=$("$CTL" submit "$work/clean.pbtxt") || fail "submit clean"
"$CTL" watch "$clean" > "$work/watch-clean.out" 2>&1 || fail "the clean job failed: $(tail -3 "$work/watch-clean.out")"
expect_same_parameters "$work/replicated.safetensors" "$work/clean.safetensors" \
  "after losing a daemon of two slices vs the same job without faults or replicas"
echo PASS
