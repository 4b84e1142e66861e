#!/usr/bin/env bash
# An elastic job (docs/jobs.md "Elastic jobs"), real processes over
# 127.0.0.1: num_workers 2 with min_workers 1 starts on one train daemon,
# which computes both slots; a second daemon started mid-job takes a slot
# from it (given up at the first daemon's next step boundary, its part not
# started again); the job SUCCEEDS with no restart, and its export equals, bit for
# bit, that of the same job run on 2 train daemons from the start (BSP: the
# slots, not the daemons, define the result). Once the second daemon holds
# its slot it is drained (bertpsctl drain): its slot is handed back to the
# first daemon (taken at its next step boundary, no restart), it computes
# it until that one has, then leaves and exits 0, and the first daemon
# computes both slots to the end. Last, a daemon
# killed during its drain (stopped, told to drain, then kill -9 before it
# could hand anything back) leaves nothing half-handed: its slot goes to
# the other daemon once it is found lost, the job SUCCEEDS with no restart
# and the same bits, and a drain of it afterwards is answered, not an
# error.
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
source "$(dirname "$0")/process_lib.sh"
init_work elastic
tiny_model_data "$BERT_LOCAL"
stop_all() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; pids=(); }

# The same job on 2 fixed daemons.
start_coordinator "$COORD" 0 "$work/coordinator-fixed.log"
start_ps_daemons fixed
start_train_daemons f0 f1
tiny_spec fixed 200 "num_workers: 2" "export_path: \"$work/fixed.safetensors\"" > "$work/fixed.pbtxt"
job=$("$CTL" submit "$work/fixed.pbtxt") || fail "submit fixed"
timeout 300 "$CTL" watch "$job" > "$work/fixed.watch" 2>&1 || fail "fixed: $(tail -3 "$work/fixed.watch")"
stop_all

# Elastic: one daemon, then two.
start_coordinator "$COORD" 0 "$work/coordinator-elastic.log"
start_ps_daemons elastic
start_train_daemons e0
tiny_spec elastic 200 "num_workers: 2" "min_workers: 1" \
  "export_path: \"$work/elastic.safetensors\"" > "$work/elastic.pbtxt"
job=$("$CTL" submit "$work/elastic.pbtxt") || fail "submit elastic"
wait_for_step "$job" 10
[ "$(field "$job" 's["state"]')" = RUNNING ] || fail "elastic: not running on one daemon"
start_train_daemons e1
second_daemon=${pids[-1]}
# Once the second daemon holds slot 1 it is drained: it hands the slot back
# to the first (taken at its next step boundary, no restart), leaves and
# exits 0; the first computes both.
for _ in $(seq 1 300); do
  grep -q "taken back" <("$CTL" events "$job" 2>/dev/null) && break
  sleep 0.1
done
drained=$(field "$job" '[h["member"] for h in s["slots"] if h.get("slot", 0) == 1][0]')
"$CTL" drain "$drained" > "$work/drain.out" || fail "drain: $(cat "$work/drain.out")"
echo "drain: $(cat "$work/drain.out")"
"$CTL" drain "$drained" > /dev/null || fail "a second drain of the same member failed"
for _ in $(seq 1 100); do kill -0 "$second_daemon" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$second_daemon" 2>/dev/null; then fail "the drained daemon did not exit"; fi
wait "$second_daemon" || fail "the drained daemon exited $?"
timeout 300 "$CTL" watch "$job" > "$work/elastic.watch" 2>&1 || fail "elastic: $(tail -3 "$work/elastic.watch")"
[ "$(field "$job" 's.get("restarts", 0)')" = 0 ] || fail "elastic: the job restarted"
"$CTL" events "$job" > "$work/elastic.events"
grep -q "elastic" "$work/elastic.events" || fail "elastic: no event says the job runs elastic"
grep -q "taken back" "$work/elastic.events" || fail "elastic: the second daemon took no slot: $(tail -5 "$work/elastic.events")"
# The first daemon gave slot 1 up at a step boundary, without starting its
# part again (worker/slot_feed.h).
grep -q "slots 0,1 become 0 from the part's next step on (no restart)" "$work/w-e0.log" \
  || fail "elastic: the first daemon did not give slot 1 up in place: $(grep -E 'become|start' "$work/w-e0.log" | tail -5)"
grep -q "worker 0: slots 0,1 become 0 at step" "$work/w-e0.log" \
  || fail "elastic: the first daemon's part did not take the new slots: $(grep -E 'become' "$work/w-e0.log" | tail -5)"
echo "elastic: $(grep -m1 'computed by member' "$work/elastic.events" | cut -c1-140)"
echo "elastic: $(grep -m1 'taken back' "$work/elastic.events" | cut -c1-140)"
# Drained before the end of training (the usual case), its slot was handed
# to the first daemon (which took it at a step boundary, without starting
# again, while the drained one computed it) and it left once that daemon
# had computed a step of it; drained at the very end, its slot was done.
handed_at=$(grep -m1 "worker 1 is handed from member $drained (draining)" "$work/elastic.events" \
            | sed -E 's|.* step ([0-9]+)/.*|\1|')
if [ -n "$handed_at" ] && [ "$handed_at" -lt 200 ]; then
  grep -q "member $drained handed every slot it held over" "$work/elastic.events" \
    || fail "elastic: the drained member left before its slot was taken: $(tail -5 "$work/elastic.events")"
  grep -q "slots 0 become 0,1 from the part's next step on (no restart; handed over by a member that drains)" "$work/w-e0.log" \
    || fail "elastic: the first daemon did not take the handed slot in place: $(grep -E 'become|start' "$work/w-e0.log" | tail -5)"
  echo "elastic: drained at step $handed_at; $(grep -m1 "member $drained handed every slot" "$work/elastic.events" | cut -c1-140)"
else
  echo "elastic: the drained member left after training (step ${handed_at:-?})"
fi
# Members over time: the start on 1, the join (with the time to its first
# step), the drain.
"$CTL" status "$job" --json > "$work/elastic.status.json"
/usr/bin/python3 - "$work/elastic.status.json" <<'PY' || fail "elastic: membership history"
import json, sys
s = json.load(open(sys.argv[1]))
m = s.get("membership", [])
causes = [c.get("cause") for c in m]
assert causes[:1] == ["start"] and m[0].get("members") == 1, m
joined = [c for c in m if c.get("cause") == "joined"]
assert joined and joined[0].get("members") == 2, m
assert int(joined[0].get("first_step_after_ms", 0)) > 0, m
assert "left" in causes, m
print("elastic: membership", " -> ".join("%s %s" % (c.get("cause"), c.get("members", 0)) for c in m),
      "; first step after the join: %s ms" % joined[0].get("first_step_after_ms"))
PY
grep -q "membership: 2 member(s) (joined" "$work/elastic.events" || fail "elastic: no membership event"
expect_same_parameters "$work/fixed.safetensors" "$work/elastic.safetensors" \
  "elastic (1 then 2 daemons) against fixed (2 daemons)"
stop_all

# Killed during its drain.
start_coordinator "$COORD" 0 "$work/coordinator-killed.log" --member_timeout_s 2
start_ps_daemons killed
start_train_daemons k0 k1
victim=${pids[-1]}
tiny_spec killed 200 "num_workers: 2" "min_workers: 1" \
  "export_path: \"$work/killed.safetensors\"" > "$work/killed.pbtxt"
job=$("$CTL" submit "$work/killed.pbtxt") || fail "submit killed"
wait_for_step "$job" 10
member=""
for _ in $(seq 1 50); do
  member=$(sed -n 's/.*registered as member \([^ ]*\) .*/\1/p' "$work/w-k1.log" | head -1)
  [ -n "$member" ] && break; sleep 0.1
done
[ -n "$member" ] || fail "killed: no member id in the daemon's log"
kill -STOP "$victim"
"$CTL" drain "$member" > "$work/killed-drain.out" || fail "killed: drain: $(cat "$work/killed-drain.out")"
kill -9 "$victim"
timeout 300 "$CTL" watch "$job" > "$work/killed.watch" 2>&1 || fail "killed: $(tail -3 "$work/killed.watch")"
[ "$(field "$job" 's["state"]')" = SUCCEEDED ] || fail "killed: $(field "$job" 's["state"]')"
[ "$(field "$job" 's.get("restarts", 0)')" = 0 ] || fail "killed: the job restarted"
"$CTL" events "$job" > "$work/killed.events"
grep -q "member $member) stopped answering" "$work/killed.events" \
  || fail "killed: the drained member was not found lost: $(grep "$member" "$work/killed.events" | tail -3)"
"$CTL" drain "$member" > "$work/killed-drain2.out" 2>&1 \
  || grep -q "no member $member" "$work/killed-drain2.out" \
  || fail "killed: a drain of the lost member: $(cat "$work/killed-drain2.out")"
echo "killed during its drain: $(grep -m1 "member $member) stopped answering" "$work/killed.events" | cut -c1-140)"
expect_same_parameters "$work/fixed.safetensors" "$work/killed.safetensors" \
  "killed during its drain against fixed (2 daemons)"
echo PASS
