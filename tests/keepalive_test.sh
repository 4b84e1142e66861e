#!/usr/bin/env bash
# Real processes over 127.0.0.1: a BSP shard for 2 workers and only worker 0,
# whose pull then waits for a version that never comes. The shard's process
# is frozen (SIGSTOP): with keepalive pings (--keepalive_ms 1000) the worker's
# call fails UNAVAILABLE within seconds, where without them (--keepalive_ms 0)
# it would wait for its deadline (--rpc_timeout_s 60): a shard gone or frozen
# is found by a worker that only waits, and the shard answers pings at any
# rate while it runs (no GOAWAY for pings).
set -euo pipefail
BERT_LOCAL="$1"; SERVER="$2"; WORKER="$3"
source "$(dirname "$0")/process_lib.sh"
init_work keepalive

tiny_model_data "$BERT_LOCAL"

# run KEEPALIVE_MS: a shard, worker 0, 4 s of waiting (pings every second
# must not make the shard close the connection), the shard frozen, then the
# seconds until the worker ended (or 12 if it did not); the worker's log.
run() {
  local ka="$1" port spid wpid t
  port=$(free_port)
  "$SERVER" --port "$port" --shard 0 --num_shards 1 --peers "127.0.0.1:$port" \
      --config "$work/model.json" --workers 2 --total_steps 4 \
      > "$work/server$ka.log" 2>&1 &
  spid=$!; pids+=($spid)
  "$WORKER" --role=train --ps "127.0.0.1:$port" --worker_index 0 --num_workers 2 \
      --data "$work/data/*.tfrecord" --config "$work/model.json" --batch 4 \
      --steps 4 --rpc_timeout_s 60 --keepalive_ms "$ka" > "$work/worker$ka.log" 2>&1 &
  wpid=$!; pids+=($wpid)
  sleep 4
  kill -0 "$wpid" 2>/dev/null || fail "keepalive $ka: the worker ended before the shard froze"
  kill -STOP "$spid"
  t=12
  for i in $(seq 1 120); do
    if ! kill -0 "$wpid" 2>/dev/null; then t=$((i / 10)); break; fi
    sleep 0.1
  done
  kill -9 "$wpid" "$spid" 2>/dev/null || true
  kill -CONT "$spid" 2>/dev/null || true
  echo "$t"
}

t=$(run 1000)
echo "keepalive 1000 ms: the worker ended ${t} s after the shard froze"
[ "$t" -lt 12 ] || fail "with keepalive the worker still waited after 12 s"
grep -q "UNAVAILABLE" "$work/worker1000.log" || fail "the worker did not say UNAVAILABLE"
grep -q "GOAWAY\|too_many_pings" "$work/worker1000.log" &&
    fail "the shard refused the pings"
t=$(run 0)
echo "no keepalive: the worker ended ${t} s after the shard froze (12: still waiting)"
[ "$t" -ge 12 ] || fail "without keepalive the worker ended after ${t} s: the test shows nothing"
echo PASS
