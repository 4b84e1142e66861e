#!/usr/bin/env bash
# One run of tools/bench.sh spot: a chaos soak of an elastic BSP job with
# replicated shards, real processes over 127.0.0.1 and real compute of the
# process tests' small BERT (tests/process_lib.sh: 2 layers, hidden size
# 32; simulated gradients are the same for every slot and step and could
# not show a slot computed on the wrong data).
#
# The job: 8 slots (min_workers 2), 2 shard indices with replicas: 2, a
# checkpoint every 100 steps, exported at its end. Its step count is set so
# that it runs about MINUTES without faults (from a 20 s calibration).
#  1. The same spec runs with no fault on 8 train daemons: the reference
#     parameters and the no-chaos throughput.
#  2. It runs again, starting on 4 train daemons, while at random intervals
#     of 10-40 s a random train or shard daemon gets SIGTERM (a drain) or
#     kill -9, and replacements start at random later times (5-40 s): never
#     fewer than min_workers train daemons, never more than 8; a shard
#     daemon is drained or killed only while every index has a primary and a
#     caught-up backup (else a train daemon is picked), so that no index
#     loses its last copy; a spare shard daemon waits to become a backup.
# Checks at the end: the job SUCCEEDED; its export equals the reference's
# bit for bit; the ledger holds every example exactly once; no drain made
# the job restart (no step redone). Prints the counts (drains, kills, joins,
# failovers, backups added, restarts) and the throughput against the
# no-chaos run with the floor: at least 0.8 of it, scaled by the
# time-weighted share of slots that had a member (all slots of an elastic
# job are held while any train daemon lives: the share is the time with at
# least one live train daemon, 1 here as there are always 2). One JSON line
# on stdout; the actions in $work/chaos.jsonl.
#
#   tools/spot_run.sh BERT_LOCAL COORD SERVER WORKER CTL [MINUTES] [SEED]
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
minutes="${6:-20}"; seed="${7:-1}"
RANDOM=$seed
source "$(dirname "$0")/../tests/process_lib.sh"
init_work spot
tiny_model_data "$BERT_LOCAL" > /dev/null
start_coordinator "$COORD" 0 "$work/coordinator.log" --member_timeout_s 3 \
  --jobs_root "$work/jobs"
slots=8; min_workers=2; per_slot=8  # tiny_spec's batch_size (per slot)
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
spec() {  # spec NAME STEPS
  tiny_spec "$1" "$2" "num_ps_shards: 2" "num_workers: $slots" \
    "min_workers: $min_workers" "replicas: 2" \
    "export_path: \"$work/$1.safetensors\"" \
    "checkpoint { dir: \"$work/ckpt-$1\" every_steps: 100 }"
}
step_of() { field "$1" 's.get("progress", {}).get("step", 0)'; }
state_of() { field "$1" 's["state"]'; }

# Daemons by name: kind (train/ps) and pid; the live ones.
declare -A kind pid_of
live=()
n=0
start_daemon() {  # start_daemon KIND
  n=$((n + 1))
  local name="$1$n"
  if [ "$1" = ps ]; then
    start_ps_daemons "$name"; pid_of[$name]=${ps_daemon_pid[$name]}
  else
    start_train_daemons "$name"; pid_of[$name]=${pids[-1]}
  fi
  kind[$name]=$1; live+=("$name")
}
live_of() {  # live_of KIND: the live daemons of KIND
  local d
  for d in "${live[@]}"; do [ "${kind[$d]}" = "$1" ] && echo "$d"; done
  return 0
}
forget() {  # forget NAME: no longer live
  local d keep=()
  for d in "${live[@]}"; do [ "$d" != "$1" ] && keep+=("$d"); done
  live=("${keep[@]}")
}
stop_all() {  # every live daemon killed (between the runs)
  local d
  for d in "${live[@]}"; do kill -9 "${pid_of[$d]}" 2>/dev/null || true; done
  for d in "${live[@]}"; do wait "${pid_of[$d]}" 2>/dev/null || true; done
  live=()
  sleep 4  # the coordinator loses them (--member_timeout_s 3)
}
run_to_end() {  # run_to_end JOB: waits for its end; prints its state
  local st
  while true; do
    st=$(state_of "$1" 2>/dev/null) || st=RUNNING
    case "$st" in SUCCEEDED|FAILED|CANCELLED) echo "$st"; return 0 ;; esac
    sleep 1
  done
}

# 0. Calibration: steps per second of the job with no fault.
for _ in 1 2 3 4 5; do start_daemon ps; done
for _ in $(seq 1 $slots); do start_daemon train; done
spec calibrate 1000000 > "$work/calibrate.pbtxt"
job=$("$CTL" submit "$work/calibrate.pbtxt")
for _ in $(seq 1 600); do [ "$(step_of "$job")" -ge 20 ] && break; sleep 0.1; done
s0=$(step_of "$job"); t0=$(now_ms); sleep 20; s1=$(step_of "$job"); t1=$(now_ms)
"$CTL" cancel "$job" > /dev/null
steps=$(/usr/bin/python3 -c "print(max(200, int(($s1 - $s0) * 1000.0 / ($t1 - $t0) * $minutes * 60 / 100) * 100))")
echo "calibration: $((s1 - s0)) steps in $((t1 - t0)) ms; the job runs $steps steps" >&2
stop_all

# 1. The reference: no fault, 8 train daemons.
for _ in 1 2 3 4 5; do start_daemon ps; done
for _ in $(seq 1 $slots); do start_daemon train; done
spec reference "$steps" > "$work/reference.pbtxt"
t0=$(now_ms)
ref=$("$CTL" submit "$work/reference.pbtxt")
[ "$(run_to_end "$ref")" = SUCCEEDED ] || fail "the reference job: $(field "$ref" 's.get("reason", "")')"
ref_ms=$(( $(now_ms) - t0 ))
echo "reference: $steps steps in $ref_ms ms" >&2
stop_all

# 2. The chaos run.
for _ in 1 2 3 4 5; do start_daemon ps; done
for _ in 1 2 3 4; do start_daemon train; done
spec chaos "$steps" > "$work/chaos.pbtxt"
t_start=$(now_ms)
job=$("$CTL" submit "$work/chaos.pbtxt")
drains=0; kills=0; joins=0; drain_restarts=0
pending=()  # replacements due: "KIND AT_MS"
next_at=$(( $(now_ms) + 10000 + RANDOM % 30001 ))
: > "$work/chaos.jsonl"
log_action() {  # log_action JSON-FIELDS
  echo "{\"t_ms\": $(( $(now_ms) - t_start )), \"step\": $(step_of "$job" 2>/dev/null || echo -1), $1}" >> "$work/chaos.jsonl"
}
# Every index has a primary and a caught-up backup, none joining.
shards_whole() {
  [ "$(field "$job" 'int(all(x.get("primary") and x.get("backups") and not x.get("joining") for x in s.get("shards", [])) and len(s.get("shards", [])) == 2)')" = 1 ]
}
while true; do
  st=$(state_of "$job" 2>/dev/null) || st=RUNNING
  case "$st" in SUCCEEDED|FAILED|CANCELLED) break ;; esac
  now=$(now_ms)
  # Replacements due.
  keep=()
  for p in "${pending[@]}"; do
    read -r k at <<<"$p"
    if [ "$now" -ge "$at" ]; then
      if [ "$k" = ps ] || [ "$(live_of train | wc -l)" -lt "$slots" ]; then
        start_daemon "$k"; joins=$((joins + 1))
        log_action "\"action\": \"join\", \"kind\": \"$k\", \"daemon\": \"${live[-1]}\""
      fi
    else
      keep+=("$p")
    fi
  done
  pending=("${keep[@]}")
  if [ "$now" -ge "$next_at" ]; then
    next_at=$(( now + 10000 + RANDOM % 30001 ))
    trains=($(live_of train)); shards=($(live_of ps))
    k=train
    if [ $((RANDOM % 10)) -lt 4 ] && shards_whole; then k=ps; fi
    if [ "$k" = train ] && [ "${#trains[@]}" -le "$min_workers" ]; then
      # None to spare: a replacement comes sooner.
      pending+=("train $(( now + 2000 ))")
      continue
    fi
    if [ "$k" = ps ]; then victim=${shards[$((RANDOM % ${#shards[@]}))]}; else victim=${trains[$((RANDOM % ${#trains[@]}))]}; fi
    vpid=${pid_of[$victim]}
    if [ $((RANDOM % 2)) = 0 ]; then
      r0=$(field "$job" 's.get("restarts", 0)')
      t_term=$(now_ms)
      kill -TERM "$vpid" 2>/dev/null || true
      rc=0
      for _ in $(seq 1 700); do kill -0 "$vpid" 2>/dev/null || break; sleep 0.05; done
      wait "$vpid" 2>/dev/null || rc=$?
      exit_ms=$(( $(now_ms) - t_term ))
      forget "$victim"; drains=$((drains + 1))
      sleep 3
      r1=$(field "$job" 's.get("restarts", 0)')
      [ "$r1" = "$r0" ] || drain_restarts=$((drain_restarts + r1 - r0))
      log_action "\"action\": \"drain\", \"kind\": \"$k\", \"daemon\": \"$victim\", \"exit_code\": $rc, \"exit_ms\": $exit_ms, \"restarts_after\": $((r1 - r0))"
    else
      kill -9 "$vpid" 2>/dev/null || true
      wait "$vpid" 2>/dev/null || true
      forget "$victim"; kills=$((kills + 1))
      log_action "\"action\": \"kill\", \"kind\": \"$k\", \"daemon\": \"$victim\""
    fi
    pending+=("$k $(( $(now_ms) + 5000 + RANDOM % 35001 ))")
  fi
  sleep 0.5
done
chaos_ms=$(( $(now_ms) - t_start ))
[ "$st" = SUCCEEDED ] || fail "the chaos job ended $st: $(field "$job" 's.get("reason", "")')"
worst=$(max_relative_difference "$work/chaos.safetensors" "$work/reference.safetensors")
cmp -s "$work/chaos.safetensors" "$work/reference.safetensors" && same=true || same=false
read -r examples twice failovers added restarts < <(field "$job" '"%d %d %d %d %d" % (int(s["progress"].get("examples", 0)), int(s["progress"].get("examples_applied_twice", 0)), s.get("failovers", 0), s.get("backups_added", 0), s.get("restarts", 0))')
/usr/bin/python3 - <<PY
import json
steps, ref_ms, chaos_ms = $steps, $ref_ms, $chaos_ms
ref_rate, chaos_rate = steps * 1000.0 / ref_ms, steps * 1000.0 / chaos_ms
share = 1.0  # every slot held while a train daemon lives (always >= $min_workers)
floor = 0.8 * ref_rate * share
print(json.dumps({"bench": "spot", "minutes": round(chaos_ms / 60000.0, 2), "seed": $seed,
  "steps": steps, "slots": $slots, "min_workers": $min_workers,
  "state": "$st", "export_bit_equal": "$same" == "true", "worst_relative_difference": "$worst",
  "examples": $examples, "examples_expected": steps * $slots * $per_slot, "examples_applied_twice": $twice,
  "drains": $drains, "kills": $kills, "joins": $joins, "failovers": $failovers,
  "backups_added": $added, "restarts": $restarts, "drain_restarts": $drain_restarts,
  "steps_per_s": round(chaos_rate, 3), "no_chaos_steps_per_s": round(ref_rate, 3),
  "ratio": round(chaos_rate / ref_rate, 3), "slot_share": share, "floor_ratio": 0.8 * share,
  "above_floor": chaos_rate >= floor}))
PY
