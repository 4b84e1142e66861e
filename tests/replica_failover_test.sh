#!/usr/bin/env bash
# A lost primary costs no restart, with real processes over 127.0.0.1: a job
# with replicas: 2 runs on 4 shard daemons (2 shard indices, a primary and a
# backup each) and 2 train workers, no spare. A kill -9 of shard 1's primary
# mid-job makes the coordinator promote its backup (term 1) at once (the
# workers that could not reach it report it, a probe confirms); the workers
# go on at the new address, the job's incarnation does not change and it is
# never restarted; shard 1 runs on without a backup. Later shard 0's
# primary is stopped (SIGSTOP): found by its missed heartbeats (member
# timeout 6 s), its backup promoted, the workers' calls waiting on it
# cancelled; resumed (SIGCONT) after the failover, the deposed primary
# applies and serves nothing (its next replicated step is refused, and the
# coordinator tells it to leave the job). The final parameters equal, bit
# for bit, those of the same job run with no fault and no replicas.
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
source "$(dirname "$0")/process_lib.sh"
init_work replicas
tiny_model_data "$BERT_LOCAL"
start_coordinator "$COORD" 0 "$work/coordinator.log" --member_timeout_s 6 \
  --jobs_root "$work/jobs"
coord="$BERTPS_COORDINATOR"
start_ps_daemons a b c d
start_train_daemons a b
spec() { replicated_spec "$1" "$2" "$3" 400 'checkpoint { every_steps: 50 }'; }  # spec NAME REPLICAS EXPORT
spec replicated 2 "$work/replicated.safetensors" > "$work/replicated.pbtxt"
job=$("$CTL" submit "$work/replicated.pbtxt") || fail "submit"
wait_for_step "$job" 30
[ "$(field "$job" 'len(s.get("shards", []))')" = 2 ] || fail "no replica status: $("$CTL" status "$job" --json | head -c 600)"
victim=$(field "$job" 's["ps_addresses"][1]')
for s in a b c d; do
  [ "$(cat "$work/ps-$s.address")" = "$victim" ] && victim_pid=${ps_daemon_pid[$s]}
done
[ -n "${victim_pid:-}" ] || fail "no shard daemon at $victim"
at=$(field "$job" 'int(s["shards"][1].get("backups_applied", [0])[0])')
kill -9 "$victim_pid"
killed=$(date +%s%N)
for _ in $(seq 1 300); do
  [ "$(field "$job" 's.get("failovers", 0)')" -ge 1 ] && break
  sleep 0.05
done
[ "$(field "$job" 's.get("failovers", 0)')" -ge 1 ] \
  || fail "no failover within 15 s of the kill (member timeout 60 s): $(tail -5 "$work/coordinator.log")"
failed_over=$(( ($(date +%s%N) - killed) / 1000000 ))
# The new primary reports (on its heartbeats) steps applied past the kill.
for _ in $(seq 1 300); do
  [ "$(field "$job" 'int(s["shards"][1].get("applied", 0))')" -gt $((at + 2)) ] && break
  sleep 0.05
done
stepped=$(( ($(date +%s%N) - killed) / 1000000 ))
[ "$(field "$job" 'int(s["shards"][1].get("applied", 0))')" -gt $((at + 2)) ] \
  || fail "shard 1 applied no step after the failover"
echo "shard 1's primary ($victim) killed with its backup at version $at: failed over after $failed_over ms; the new primary reported step $((at + 3)) applied $stepped ms after the kill (member timeout 6 s)"
new=$(field "$job" 's["ps_addresses"][1]')
[ "$new" != "$victim" ] || fail "shard 1's address did not change"
[ "$(field "$job" 's["shards"][1]["term"]')" = 1 ] || fail "shard 1's term is not 1"
"$CTL" status "$job" | grep -E "^(replicas|failovers)" || fail "status shows no replicas"

# Shard 0's primary stops (SIGSTOP) while the job runs.
stopped=$(field "$job" 's["ps_addresses"][0]')
for s in a b c d; do
  [ "$(cat "$work/ps-$s.address")" = "$stopped" ] && stopped_pid=${ps_daemon_pid[$s]} && stopped_log="$work/ps-$s.log"
done
[ -n "${stopped_pid:-}" ] || fail "no shard daemon at $stopped"
kill -STOP "$stopped_pid"
stop_at=$(date +%s%N)
for _ in $(seq 1 400); do
  [ "$(field "$job" 's.get("failovers", 0)')" -ge 2 ] && break
  sleep 0.05
done
[ "$(field "$job" 's.get("failovers", 0)')" -ge 2 ] || fail "no failover of the stopped primary"
echo "shard 0's primary stopped: failed over after $(( ($(date +%s%N) - stop_at) / 1000000 )) ms (member timeout 6 s)"
at0=$(field "$job" 'int(s["shards"][0].get("applied", 0))')
for _ in $(seq 1 400); do
  [ "$(field "$job" 'int(s["shards"][0].get("applied", 0))')" -gt $((at0 + 2)) ] && break
  sleep 0.05
done
[ "$(field "$job" 'int(s["shards"][0].get("applied", 0))')" -gt $((at0 + 2)) ] \
  || fail "shard 0 applied no step after the stopped primary's failover"
echo "the new primary of shard 0 applied steps $(( ($(date +%s%N) - stop_at) / 1000000 )) ms after the stop"
kill -CONT "$stopped_pid"
for _ in $(seq 1 200); do
  grep -q "left job" "$stopped_log" && break
  sleep 0.05
done
grep -q "left job" "$stopped_log" || fail "the resumed primary did not leave the job: $(tail -3 "$stopped_log")"
echo "resumed after the failover, the deposed primary left the job: $(grep -m1 -o 'left job.*' "$stopped_log")"
"$CTL" watch "$job" > "$work/watch.out" 2>&1 || fail "the job failed: $(tail -3 "$work/watch.out")"
[ "$(field "$job" 's.get("restarts", 0)')" = 0 ] || fail "the job was restarted: $(grep -i restart "$work/watch.out" | head -3)"
[ "$(field "$job" 's.get("incarnation", 0)')" = 1 ] || fail "the incarnation changed"
grep -q "shard 1: primary .* failed over to its backup member .* (term 1, .* no restart" "$work/watch.out" \
  || fail "no failover event: $(grep -i 'shard 1' "$work/watch.out" | head -3)"
grep -o "shard 1: primary .*" "$work/watch.out" | head -1 | sed 's/(member [^)]*) //' | cut -c1-240

# The same job with no fault and no replicas.
spec clean 1 "$work/clean.safetensors" > "$work/clean.pbtxt"
clean=$("$CTL" submit "$work/clean.pbtxt") || fail "submit clean"
"$CTL" watch "$clean" > "$work/watch-clean.out" 2>&1 || fail "the clean job failed"
for _ in $(seq 1 100); do [ -f "$work/clean.safetensors" ] && [ -f "$work/replicated.safetensors" ] && break; sleep 0.1; done
worst=$(max_relative_difference "$work/replicated.safetensors" "$work/clean.safetensors") \
  || fail "cannot compare the exports"
echo "after the failover vs the same job without faults or replicas: worst relative difference $worst"
[ "$worst" = "0.000e+00" ] || fail "the parameters differ ($worst)"
echo PASS
