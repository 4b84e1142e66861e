# tools/bench.sh soak coordinator (sourced by tools/bench.sh: uses its
# $out_dir and build_service_bins).
# The control plane under chaos: a coordinator with a job store
# (--state_db), 2 shard daemons and 2 train daemons over loopback; for
# MINUTES a client submits small BERT-Tiny jobs, cancels some and watches
# their states, while the coordinator is killed with SIGKILL at random
# moments (every 4 to 15 s) and started again on the same port and store.
# Afterwards (a last clean start, the jobs left to finish) every
# acknowledged submit must be listed, every acknowledged cancel CANCELLED,
# and every final state a client saw still that state. Prints one JSON line:
# the counts, the violations (0 expected) and the jobs' restarts (a running
# job adopted by the restarted coordinator goes on with none).
#
#   tools/bench.sh soak coordinator [minutes] [seed]   (default: 5 1)
bench_soak_coordinator() {
  local minutes="${1:-5}" seed="${2:-1}"
  build_service_bins
  local bin=bazel-bin dir="$out_dir/soak-coordinator"
  rm -rf "$dir"; mkdir -p "$dir/data" "$dir/jobs"
  "$bin"/tools/bert_local synthetic-data --config tiny --out "$dir/data" \
      --steps 40 >/dev/null
  local port
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  local coord="127.0.0.1:$port" coord_pid="" daemons=()
  local ctl=("$bin/tools/bertpsctl" --coordinator "$coord" --timeout_s 5)
  start_coord() {
    "$bin"/server/coordinator/bertps_coordinator --port "$port" --metrics_port -1 \
        --member_timeout_s 5 --state_db "$dir/state.sqlite" \
        --jobs_root "$dir/jobs" >> "$dir/coordinator.log" 2>&1 &
    coord_pid=$!
    local i
    for i in $(seq 1 100); do
      "${ctl[@]}" list >/dev/null 2>&1 && return 0
      kill -0 "$coord_pid" 2>/dev/null || { sleep 0.2; continue; }
      sleep 0.1
    done
  }
  start_coord
  local i
  for i in 0 1; do
    "$bin"/server/ps/bertps_server --coordinator "$coord" --port 0 \
        > "$dir/shard$i.log" 2>&1 &
    daemons+=("$!")
    "$bin"/worker/bertps_worker --role=train --coordinator "$coord" --threads 1 \
        > "$dir/worker$i.log" 2>&1 &
    daemons+=("$!")
  done
  # The client's record: what it was told.
  local acked="$dir/acked.txt" cancelled="$dir/cancelled.txt" seen="$dir/seen.txt"
  : > "$acked"; : > "$cancelled"; : > "$seen"
  local kills=0 refused=0 n=0
  RANDOM=$seed
  local end=$((SECONDS + minutes * 60)) next_kill=$((SECONDS + 4 + RANDOM % 12))
  while [ "$SECONDS" -lt "$end" ]; do
    n=$((n + 1))
    local steps=$((20 + RANDOM % 40))
    cat > "$dir/job.pbtxt" <<EOF2
name: "chaos-$n"
task: PRETRAIN
model: "tiny"
data: "$dir/data/*.tfrecord"
batch_size: 4
steps: $steps
no_dropout: true
optimizer { learning_rate: 1e-4 }
checkpoint { every_steps: 10 }
EOF2
    local id
    if id=$("${ctl[@]}" submit "$dir/job.pbtxt" 2>>"$dir/client.err"); then
      echo "$id" >> "$acked"
    else
      refused=$((refused + 1))
    fi
    # A cancel now and then, of a job that may be running.
    if [ $((RANDOM % 4)) = 0 ] && [ -s "$acked" ]; then
      local victim
      victim=$(shuf -n 1 --random-source=<(yes "$RANDOM") "$acked")
      if "${ctl[@]}" cancel "$victim" >/dev/null 2>>"$dir/client.err"; then
        echo "$victim" >> "$cancelled"
      fi
    fi
    # Final states the client sees.
    local j state
    for j in $(tail -n 8 "$acked"); do
      state=$("${ctl[@]}" status "$j" --json 2>/dev/null | /usr/bin/python3 -c \
        'import json,sys; print(json.load(sys.stdin)["state"])' 2>/dev/null) || continue
      case "$state" in SUCCEEDED|FAILED|CANCELLED) echo "$j $state" >> "$seen" ;; esac
    done
    if [ "$SECONDS" -ge "$next_kill" ]; then
      kill -9 "$coord_pid" 2>/dev/null || true
      wait "$coord_pid" 2>/dev/null || true
      kills=$((kills + 1))
      sleep "0.$((RANDOM % 10))"
      start_coord
      next_kill=$((SECONDS + 4 + RANDOM % 12))
    fi
    sleep 1
  done
  # A last clean start; the jobs left get 3 minutes to end.
  kill -9 "$coord_pid" 2>/dev/null || true
  wait "$coord_pid" 2>/dev/null || true
  start_coord
  local deadline=$((SECONDS + 180))
  while [ "$SECONDS" -lt "$deadline" ]; do
    "${ctl[@]}" list 2>/dev/null | grep -qE "PENDING|RUNNING" || break
    sleep 2
  done
  "${ctl[@]}" list --json > "$dir/final.json" 2>/dev/null || \
    "${ctl[@]}" list > "$dir/final.txt" 2>/dev/null
  local jobs_json="$dir/jobs.jsonl"
  : > "$jobs_json"
  for j in $(sort -u "$acked"); do
    "${ctl[@]}" status "$j" --json 2>/dev/null | /usr/bin/python3 -c \
      'import json,sys; s=json.load(sys.stdin); print(json.dumps({"id": s["id"], "state": s["state"], "restarts": s.get("restarts", 0), "incarnation": s.get("incarnation", 0)}))' \
      >> "$jobs_json" 2>/dev/null || echo "{\"id\": \"$j\", \"state\": \"MISSING\"}" >> "$jobs_json"
  done
  kill -TERM "$coord_pid" "${daemons[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  /usr/bin/python3 - "$jobs_json" "$acked" "$cancelled" "$seen" "$kills" "$refused" "$minutes" <<'PY' | tee "$out_dir/soak-coordinator.json"
import json, sys
jobs_path, acked_path, cancelled_path, seen_path, kills, refused, minutes = sys.argv[1:]
jobs = {j["id"]: j for j in (json.loads(l) for l in open(jobs_path) if l.strip())}
acked = sorted(set(l.strip() for l in open(acked_path) if l.strip()))
cancelled = sorted(set(l.strip() for l in open(cancelled_path) if l.strip()))
seen = [l.split() for l in open(seen_path) if l.strip()]
violations = []
for j in acked:
    if jobs.get(j, {}).get("state", "MISSING") == "MISSING":
        violations.append(f"acknowledged submit {j} is gone")
for j in cancelled:
    st = jobs.get(j, {}).get("state")
    if st != "CANCELLED":
        violations.append(f"acknowledged cancel of {j}: now {st}")
for j, st in seen:
    now = jobs.get(j, {}).get("state")
    if now != st:
        violations.append(f"{j} was seen {st}, now {now}")
states = {}
for j in jobs.values():
    states[j["state"]] = states.get(j["state"], 0) + 1
restarted = sum(1 for j in jobs.values() if j.get("restarts", 0) > 0)
print(json.dumps({
    "bench": "soak-coordinator", "minutes": int(minutes),
    "coordinator_kills": int(kills), "submits_acknowledged": len(acked),
    "submits_refused": int(refused), "cancels_acknowledged": len(cancelled),
    "final_states_seen": len(seen), "states_at_end": states,
    "jobs_restarted": restarted, "violations": len(violations),
    "violation_list": violations[:20]}))
PY
}
