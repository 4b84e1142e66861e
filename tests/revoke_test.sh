#!/usr/bin/env bash
# Revoking a member (docs/security.md "Capabilities", bertpsctl revoke),
# real processes over 127.0.0.1: a 2-worker BSP job runs on 2 train daemons;
# mid-job an admin revokes the member holding worker 0. That daemon is
# refused at once (its heartbeat answered PERMISSION_DENIED) and exits
# non-zero, its slot is taken over by the other daemon, the shard is told
# the member's capability no longer holds, and the job SUCCEEDS with no
# restart and the same parameters, bit for bit, as the job run without the
# revocation: nothing the revoked member computed is lost or counted twice.
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
source "$(dirname "$0")/process_lib.sh"
init_work revoke
tiny_model_data "$BERT_LOCAL"
stop_all() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; pids=(); }

# The job undisturbed.
start_coordinator "$COORD" 0 "$work/coordinator-plain.log"
start_ps_daemons plain
start_train_daemons p0 p1
tiny_spec plain 200 "num_workers: 2" "export_path: \"$work/plain.safetensors\"" > "$work/plain.pbtxt"
job=$("$CTL" submit "$work/plain.pbtxt") || fail "submit plain"
timeout 300 "$CTL" watch "$job" > "$work/plain.watch" 2>&1 || fail "plain: $(tail -3 "$work/plain.watch")"
stop_all

# The same job; worker 0's member revoked mid-job.
start_coordinator "$COORD" 0 "$work/coordinator-revoke.log" --slot_takeover_s 0
start_ps_daemons revoke
start_train_daemons r0
d0=${pids[-1]}
start_train_daemons r1
d1=${pids[-1]}
tiny_spec revoked 200 "num_workers: 2" "export_path: \"$work/revoked.safetensors\"" > "$work/revoked.pbtxt"
job=$("$CTL" submit "$work/revoked.pbtxt") || fail "submit revoked"
wait_for_step "$job" 20
victim=$(field "$job" '[h["member"] for h in s["slots"] if h.get("slot", 0) == 0][0]')
"$CTL" revoke "$victim" > "$work/revoke.out" || fail "revoke: $(cat "$work/revoke.out")"
echo "revoke: $(cat "$work/revoke.out")"
grep -q "is revoked" "$work/revoke.out" || fail "revoke said: $(cat "$work/revoke.out")"
"$CTL" revoke "$victim" | grep -q "already revoked" || fail "a second revoke of the same member"
# The revoked member's daemon is refused on its next heartbeat and exits
# non-zero; the other daemon goes on.
gone=""
for _ in $(seq 1 100); do
  for p in "$d0" "$d1"; do kill -0 "$p" 2>/dev/null || gone=$p; done
  [ -n "$gone" ] && break
  sleep 0.1
done
[ -n "$gone" ] || fail "no train daemon exited after the revocation"
if wait "$gone"; then fail "the revoked daemon exited 0"; fi
log=$work/w-r0.log; [ "$gone" = "$d1" ] && log=$work/w-r1.log
grep -q "revoked by an admin" "$log" || fail "the revoked daemon did not say why: $(tail -3 "$log")"
timeout 300 "$CTL" watch "$job" > "$work/revoked.watch" 2>&1 || fail "revoked: $(tail -3 "$work/revoked.watch")"
[ "$(field "$job" 's.get("restarts", 0)')" = 0 ] || fail "the job restarted"
"$CTL" events "$job" > "$work/revoked.events"
grep -q "member $victim is revoked by an admin" "$work/revoked.events" || fail "no event of the revocation"
grep -qE "worker 0 is (computed|taken over) by member" "$work/revoked.events" \
  || fail "no member took worker 0 over: $(tail -5 "$work/revoked.events")"
echo "revoke: $(grep -m1 -E "worker 0 is (computed|taken over) by member" "$work/revoked.events" | cut -c1-140)"
expect_same_parameters "$work/plain.safetensors" "$work/revoked.safetensors" \
  "revoked mid-job against undisturbed"
echo PASS
