#!/usr/bin/env bash
# The coordinator away, or its clock stepped, with real processes over
# 127.0.0.1 (docs/jobs.md "Durability", docs/architecture.md "Members"):
#  A. The coordinator stopped (SIGSTOP) for 8 s mid-job: the shard and the
#     worker train on meanwhile (no member gives up by default) and the job
#     ends SUCCEEDED with no restart.
#  B. The same with daemons started with --coordinator_give_up_s 3: they
#     stop their work after 3 s and keep trying; once the coordinator is
#     back they say so, the job shows it ("gave up") and goes on from its
#     checkpoint to SUCCEEDED; it is never RUNNING with no one working on it
#     and nothing named as awaited.
#  C. A worker killed with kill -9, then the coordinator's wall clock
#     stepped back an hour (libfaketime): liveness is measured on the
#     monotonic clock, so the worker is still found lost within the member
#     timeout and the survivor takes its slot.
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
source "$(dirname "$0")/process_lib.sh"
init_work pause
tiny_model_data "$BERT_LOCAL"
events() { "$CTL" events "$1" 2>/dev/null || true; }
spec() {  # spec NAME STEPS WORKERS
  tiny_spec "$1" "$2" "num_workers: $3" "no_dropout: true" \
      "checkpoint { dir: \"$work/ckpt-$1\" every_steps: 10 }"
}
stop_all() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; pids=(); }

# A. Paused, no give-up.
start_coordinator "$COORD" 0 "$work/coordinator-a.log" --member_timeout_s 3
start_ps_daemons a
start_train_daemons a
spec a 400 1 > "$work/a.pbtxt"
job=$("$CTL" submit "$work/a.pbtxt") || fail "submit a"
wait_for_step "$job" 20
kill -STOP "$coord_pid"
sleep 8
kill -CONT "$coord_pid"
sleep 1
after=$(field "$job" 's.get("progress", {}).get("step", 0)')
echo "A: the coordinator stopped 8 s at step >= 20; step $after a second after it resumed"
[ "$after" -ge 60 ] || fail "A: the members did not train while the coordinator was stopped (step $after)"
timeout 120 "$CTL" watch "$job" > "$work/watch-a.out" 2>&1 || fail "A: $(tail -3 "$work/watch-a.out")"
[ "$(field "$job" 's.get("restarts", 0)')" = 0 ] || fail "A: the job restarted"
stop_all

# B. Paused past the members' give-up.
start_coordinator "$COORD" 0 "$work/coordinator-b.log" --member_timeout_s 3
"$SERVER" --coordinator "$BERTPS_COORDINATOR" --port 0 --coordinator_give_up_s 3 \
  --address_file "$work/ps-b.address" > "$work/ps-b.log" 2>&1 &
pids+=($!)
"$WORKER" --role=train --coordinator "$BERTPS_COORDINATOR" --coordinator_give_up_s 3 \
  > "$work/w-b.log" 2>&1 &
pids+=($!)
spec b 300 1 > "$work/b.pbtxt"
job=$("$CTL" submit "$work/b.pbtxt") || fail "submit b"
wait_for_step "$job" 20
kill -STOP "$coord_pid"
sleep 8
grep -q "stopping this member's work" "$work/ps-b.log" || fail "B: the shard did not give up"
grep -q "stopping this member's work" "$work/w-b.log" || fail "B: the worker did not give up"
kill -CONT "$coord_pid"
# From now on the job is never RUNNING with nothing named as awaited and a
# slot or a shard index without its member.
for _ in $(seq 1 300); do
  verdict=$("$CTL" status "$job" --json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
if s["state"] != "RUNNING":
    print(s["state"]); sys.exit()
held = all(h.get("member") for h in s.get("slots", [])) and \
    all(s.get("ps_addresses", [""])) and s.get("slots")
print("ok" if held or s.get("waiting") else "unaccounted: %s" % json.dumps(
    {k: s.get(k) for k in ("slots", "ps_addresses", "waiting")}))
' 2>/dev/null) || { sleep 0.1; continue; }
  case "$verdict" in
    SUCCEEDED) break ;;
    ok) ;;
    *) fail "B: RUNNING with no one on it and nothing awaited: $verdict" ;;
  esac
  sleep 0.1
done
timeout 120 "$CTL" watch "$job" > "$work/watch-b.out" 2>&1 || fail "B: $(tail -3 "$work/watch-b.out")"
events "$job" > "$work/events-b.out"
grep -q "gave up" "$work/events-b.out" || fail "B: the job does not say a member gave up: $(tail -8 "$work/events-b.out")"
echo "B: $(grep -m1 'gave up' "$work/events-b.out" | cut -c1-160)"
stop_all

# C. The coordinator's wall clock stepped back an hour after a worker died.
preload=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
[ -f "$preload" ] || fail "C: libfaketime is not installed (tools/setup.sh installs faketime)"
echo "+0" > "$work/faketime"
cat > "$work/coordinator-faketime" <<EOF2
#!/bin/sh
LD_PRELOAD=$preload FAKETIME_TIMESTAMP_FILE=$work/faketime FAKETIME_NO_CACHE=1 \
FAKETIME_DONT_FAKE_MONOTONIC=1 exec "$COORD" "\$@"
EOF2
chmod +x "$work/coordinator-faketime"
start_coordinator "$work/coordinator-faketime" 0 "$work/coordinator-c.log" \
  --member_timeout_s 3 --slot_takeover_s 1
start_ps_daemons c
"$WORKER" --role=train --coordinator "$BERTPS_COORDINATOR" > "$work/w-c0.log" 2>&1 &
pids+=($!)
"$WORKER" --role=train --coordinator "$BERTPS_COORDINATOR" > "$work/w-c1.log" 2>&1 &
victim=$!; pids+=($victim)
spec c 300 2 > "$work/c.pbtxt"
job=$("$CTL" submit "$work/c.pbtxt") || fail "submit c"
wait_for_step "$job" 10
kill -9 "$victim"
echo "-1h" > "$work/faketime"
killed_at=$SECONDS
found=0
for _ in $(seq 1 150); do
  if events "$job" | grep -q "stopped answering"; then found=1; break; fi
  sleep 0.1
done
[ "$found" = 1 ] || fail "C: the dead worker was not found lost after the clock step: $(events "$job" | tail -4)"
echo "C: the dead worker was found lost $((SECONDS - killed_at)) s after its kill and a clock step of -1 h"
timeout 120 "$CTL" watch "$job" > "$work/watch-c.out" 2>&1 || fail "C: $(tail -3 "$work/watch-c.out")"
echo PASS
