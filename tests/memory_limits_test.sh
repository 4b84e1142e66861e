#!/usr/bin/env bash
# Memory limits (issue 56, item 6), with real processes over 127.0.0.1: a
# train daemon, then a parameter-server daemon, started under address-space
# limits (ulimit -v) from a little above what the daemon maps idle to
# plenty, each with a BERT-mini job (a worker needs ~244 MiB, a shard
# ~344 MiB). Whatever the limit, the job either succeeds, or fails with a
# reason that names what the member needs and what it may use, or waits
# saying that the idle daemon has too little memory; the daemon never
# dies (it exits 0 on SIGTERM afterwards). Before: a oneDNN CHECK
# ("dnnl_sgemm failed"), an uncaught std::system_error (a thread that could
# not start), an uncaught std::bad_alloc (the shard's update) or a crash
# killed the daemon, and the job waited "for an idle train worker for slot
# 0" for ever without saying why.
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
source "$(dirname "$0")/process_lib.sh"
init_work memory_limits

"$BERT_LOCAL" synthetic-data --config mini --out "$work/data" --steps 6 > /dev/null
cat > "$work/job.pbtxt" <<EOF
name: "mini"
task: PRETRAIN
model: "mini"
data: "$work/data/*.tfrecord"
batch_size: 8
steps: 4
optimizer { learning_rate: 1e-3 warmup_steps: 1 }
EOF
start_coordinator "$COORD" 0 "$work/coordinator.log" --member_timeout_s 3

vm_kib() { awk '/^VmSize:/ {print $2}' "/proc/$1/status"; }
# start_daemon ROLE LIMIT_KIB NAME: a train ("worker") or shard ("shard")
# daemon under `ulimit -v LIMIT_KIB` ("-": none); daemon_pid.
start_daemon() {
  local role="$1" limit="$2" name="$3"
  (
    [ "$limit" = "-" ] || ulimit -v "$limit"
    if [ "$role" = worker ]; then
      exec "$WORKER" --role=train --coordinator "$BERTPS_COORDINATOR"
    else
      exec "$SERVER" --coordinator "$BERTPS_COORDINATOR" --port 0
    fi
  ) > "$work/$name.log" 2>&1 &
  daemon_pid=$!; pids+=($daemon_pid)
}
# The address space an idle daemon of each role maps.
start_daemon worker - idle-worker; w=$daemon_pid
start_daemon shard - idle-shard; s=$daemon_pid
sleep 2
worker_base=$(vm_kib "$w"); shard_base=$(vm_kib "$s")
echo "idle: a train daemon maps $((worker_base / 1024)) MiB, a shard daemon $((shard_base / 1024)) MiB"
stop_gently "$w" "the idle train daemon"

succeeded=0; refused=0
# run_case ROLE EXTRA_MIB: a job with the other role's daemon idle and
# unlimited, and ROLE's daemon started under its idle size + EXTRA_MIB.
run_case() {
  local role="$1" extra="$2" limit job state reason waiting outcome=""
  if [ "$role" = worker ]; then
    limit=$((worker_base + extra * 1024))
  else
    limit=$((shard_base + extra * 1024))
  fi
  job=$("$CTL" submit "$work/job.pbtxt") || fail "submit"
  start_daemon "$role" "$limit" "$role-$extra"
  local pid=$daemon_pid
  for _ in $(seq 1 300); do
    state=$(field "$job" 's["state"]')
    reason=$(field "$job" 's.get("reason", "")')
    waiting=$(field "$job" 's.get("waiting", "")')
    if ! kill -0 "$pid" 2>/dev/null; then
      fail "$role under +$extra MiB died ($(grep -m1 -E 'Check failed|terminate|SIG[A-Z]+ ' "$work/$role-$extra.log" || tail -1 "$work/$role-$extra.log")); the job: $state, waiting: $waiting"
    fi
    case "$state" in
      SUCCEEDED) outcome="succeeded"; succeeded=$((succeeded + 1)); break ;;
      FAILED)
        grep -q "needs ~" <<<"$reason" && grep -qE "may use|limit of" <<<"$reason" \
          || fail "$role under +$extra MiB: the job failed without naming the need and the limit: $reason"
        outcome="failed: $reason"; refused=$((refused + 1)); break ;;
    esac
    if grep -q "too little memory" <<<"$waiting"; then
      grep -q "needs ~" <<<"$waiting" || fail "waiting without the need: $waiting"
      "$CTL" cancel "$job" > /dev/null
      outcome="waits: ${waiting#*; }"; refused=$((refused + 1)); break
    fi
    sleep 0.2
  done
  [ -n "$outcome" ] || fail "$role under +$extra MiB: neither succeeded, failed nor said why it waits within 60 s: $state, waiting: $waiting"
  echo "$role, idle size + $extra MiB: $outcome"
  stop_gently "$pid" "the $role daemon under +$extra MiB"
  for _ in $(seq 1 100); do
    case "$(field "$job" 's["state"]')" in SUCCEEDED|FAILED|CANCELLED) break ;; esac
    sleep 0.1
  done
}

for extra in 60 200 260 300 330 800; do run_case worker "$extra"; done
stop_gently "$s" "the idle shard daemon"
start_daemon worker - idle-worker-2; w=$daemon_pid
for extra in 60 300 360 420 1000; do run_case shard "$extra"; done
stop_gently "$w" "the idle train daemon"
[ "$succeeded" -ge 2 ] || fail "only $succeeded job(s) succeeded: the largest limits should fit"
[ "$refused" -ge 2 ] || fail "no limit was too small: the test proves nothing"
stop_gently "$coord_pid" "the coordinator"
echo "PASS"
