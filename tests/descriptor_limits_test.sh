#!/usr/bin/env bash
# Descriptor limits (issue 56, item 4), with real processes over 127.0.0.1:
#  1. every daemon (coordinator, shard, train worker) started with a soft
#     limit of 256 under a hard one of 4096 raises it to 4096 and says so.
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
source "$(dirname "$0")/process_lib.sh"
init_work descriptor_limits

nofile() {  # nofile PID: "SOFT HARD" of its descriptor limit
  awk '/^Max open files/ {print $4, $5}' "/proc/$1/limits"
}
# limited SOFT:HARD BINARY ARGS...: BINARY under that limit (prlimit execs it,
# so $! is the daemon's pid).
limited() { local l="$1"; shift; exec prlimit --nofile="$l" "$@"; }

# 1. Every daemon raises its soft limit to the hard one.
cat > "$work/coordinator-256.sh" <<EOF
#!/bin/sh
exec prlimit --nofile=256:4096 "$COORD" "\$@"
EOF
chmod +x "$work/coordinator-256.sh"
start_coordinator "$work/coordinator-256.sh" 0 "$work/coordinator.log"
coord="$BERTPS_COORDINATOR"
(limited 256:4096 "$SERVER" --coordinator "$coord" --port 0 \
   --address_file "$work/ps.address") > "$work/ps.log" 2>&1 &
ps_pid=$!; pids+=($ps_pid)
(limited 256:4096 "$WORKER" --role=train --coordinator "$coord") \
  > "$work/w-raised.log" 2>&1 &
w_raised=$!; pids+=($w_raised)
for _ in $(seq 1 200); do [ -s "$work/ps.address" ] && break; sleep 0.05; done
sleep 0.5
for d in "coordinator $coord_pid $work/coordinator.log" \
         "shard $ps_pid $work/ps.log" "worker $w_raised $work/w-raised.log"; do
  set -- $d
  [ "$(nofile "$2")" = "4096 4096" ] \
    || fail "$1: descriptor limit $(nofile "$2"), not raised to 4096"
  grep -q "raised the descriptor limit from 256 to 4096" "$3" \
    || fail "$1 does not say it raised its descriptor limit: $(head -3 "$3")"
  echo "$1: raised the descriptor limit from 256 to 4096"
done
stop_gently "$w_raised" "the worker"

stop_gently "$ps_pid" "the shard"
stop_gently "$coord_pid" "the coordinator"
echo "PASS"
