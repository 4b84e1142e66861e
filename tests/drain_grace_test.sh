#!/usr/bin/env bash
# After SIGTERM a daemon hands its work off within --drain_grace_s and no
# longer (docs/deploy.md): real processes over 127.0.0.1. With the
# coordinator stopped (SIGSTOP) a train daemon's leave cannot complete:
# with a 1 s grace it exits 1 after about a second, saying the grace ended;
# with a long grace, a second SIGTERM makes it exit at once, saying so; with
# the coordinator there, SIGTERM lets it leave and exit 0.
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
source "$(dirname "$0")/process_lib.sh"
init_work drain_grace

start_coordinator "$COORD" 0 "$work/coordinator.log"
wait_registered() {  # LOG
  for _ in $(seq 1 100); do grep -q "registered as member" "$1" 2>/dev/null && return 0; sleep 0.05; done
  fail "the daemon did not register: $(tail -3 "$1")"
}
# exits_within PID SECONDS: waits for the daemon (a child of this shell);
# its exit status in $rc, or fails.
exits_within() {
  local pid=$1 limit=$2 t=0
  while kill -0 "$pid" 2>/dev/null && [ "$(ps -o stat= -p "$pid" | cut -c1)" != Z ]; do
    sleep 0.1; t=$((t + 1))
    [ "$t" -le $((limit * 10)) ] || fail "pid $pid still running after ${limit}s"
  done
  rc=0; wait "$pid" || rc=$?
}

# start_worker NAME GRACE: a train daemon, registered; its pid in $w.
start_worker() {
  "$WORKER" --role=train --coordinator "$BERTPS_COORDINATOR" --drain_grace_s "$2" \
    > "$work/$1.log" 2>&1 &
  w=$!; pids+=($w)
  wait_registered "$work/$1.log"
}
# sigterm_stopped_coordinator PID [SECOND]: stops the coordinator, sends
# SIGTERM (and with SECOND, another 0.3 s later), waits for the exit; $rc,
# and $ms from the last signal to the exit.
sigterm_stopped_coordinator() {
  kill -STOP "$coord_pid"
  sleep 0.3
  kill -TERM "$1"
  if [ -n "${2:-}" ]; then sleep 0.3; kill -TERM "$1"; fi
  local start; start=$(date +%s%N)
  exits_within "$1" 5
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  kill -CONT "$coord_pid"
}

# 1. The grace ends.
start_worker w1 1; w1=$w
sigterm_stopped_coordinator "$w1"
[ "$rc" = 1 ] || fail "grace: exit status $rc, want 1: $(tail -3 "$work/w1.log")"
grep -q "drain grace (1s) ended" "$work/w1.log" || fail "grace: no reason given: $(tail -3 "$work/w1.log")"
[ "$ms" -lt 2500 ] || fail "grace: exited after $ms ms with a 1 s grace"
echo "grace 1 s: exited 1 after $ms ms"

# 2. A second SIGTERM.
start_worker w2 60; w2=$w
sigterm_stopped_coordinator "$w2" second
[ "$rc" = 1 ] || fail "second signal: exit status $rc, want 1"
grep -q "again while handing work off" "$work/w2.log" || fail "second signal: no reason given: $(tail -3 "$work/w2.log")"
[ "$ms" -lt 1500 ] || fail "second signal: exited after $ms ms"
echo "second SIGTERM: exited 1 after $ms ms"

# 3. The coordinator there: it leaves and exits 0.
start_worker w3 60; w3=$w
kill -TERM "$w3"
exits_within "$w3" 10
[ "$rc" = 0 ] || fail "a normal leave exited $rc: $(tail -3 "$work/w3.log")"
echo "with the coordinator: left and exited 0"
echo PASS
