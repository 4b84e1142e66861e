# tools/bench.sh replicas (sourced by tools/bench.sh: uses its $out_dir and
# build_service_bins).
# What replicated shards cost and what they buy, with real processes over
# loopback: one cluster (a coordinator, 4 shard daemons, 2 train daemons)
# runs the same BERT-mini job (2 shards, 2 workers, BSP) with replicas: 1
# and replicas: 2, alternating; for each, the steady step time (wall clock
# between two step counts the coordinator reports) and the CPU seconds per
# step of the shard daemons and of the workers (/proc). Then
# re-replication: a backup's kill -9 to a spare daemon caught up (snapshot
# size and time, step time before and while it joins); then
# tests/replica_failover_test.sh, repeated: a primary's kill -9 to its
# backup's promotion and to the new primary's next applied steps.
#
#   tools/bench.sh replicas [runs] [steps]   (default: 3 40)
bench_replicas() {
  local runs="${1:-3}" steps="${2:-40}"
  build_service_bins
  local dir="$out_dir/replicas"
  rm -rf "$dir"; mkdir -p "$dir/data"
  bazel-bin/tools/bert_local synthetic-data --config mini --out "$dir/data" \
      --steps 40 >/dev/null
  local cpids=() spids=() wpids=()
  bazel-bin/server/coordinator/bertps_coordinator --port 0 --metrics_port 0 \
      --address_file "$dir/coord.address" --member_timeout_s 6 \
      > "$dir/coordinator.log" 2>&1 &
  cpids+=($!)
  for _ in $(seq 1 200); do [ -s "$dir/coord.address" ] && break; sleep 0.05; done
  local coord
  coord=$(cat "$dir/coord.address")
  for s in a b c d; do
    bazel-bin/server/ps/bertps_server --coordinator "$coord" --port 0 \
        --address_file "$dir/ps-$s.address" > "$dir/ps-$s.log" 2>&1 &
    spids+=($!)
  done
  for w in a b; do
    bazel-bin/worker/bertps_worker --role=train --coordinator "$coord" \
        > "$dir/w-$w.log" 2>&1 &
    wpids+=($!)
  done
  # shellcheck disable=SC2064
  trap "kill ${cpids[*]} ${spids[*]} ${wpids[*]} 2>/dev/null || true" RETURN
  sleep 2
  local results="$dir/steps.jsonl"
  : > "$results"
  for r in $(seq 1 "$runs"); do
    for replicas in 1 2; do
      cat > "$dir/job.pbtxt" <<EOF
name: "bench-r$replicas-$r"
task: PRETRAIN
model: "mini"
data: "$dir/data/*.tfrecord"
batch_size: 8
steps: $steps
num_ps_shards: 2
num_workers: 2
replicas: $replicas
optimizer { learning_rate: 1e-4 }
EOF
      local job
      job=$(bazel-bin/tools/bertpsctl --coordinator "$coord" submit "$dir/job.pbtxt")
      /usr/bin/python3 - "$coord" "$job" "$replicas" "$steps" \
          "${spids[*]}" "${wpids[*]}" >> "$results" <<'PY'
import json, os, subprocess, sys, time
coord, job, replicas, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
shards = [int(p) for p in sys.argv[5].split()]
workers = [int(p) for p in sys.argv[6].split()]
tick = os.sysconf("SC_CLK_TCK")
def cpu(pids):
    total = 0
    for p in pids:
        with open(f"/proc/{p}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / tick
def status():
    out = subprocess.run(["bazel-bin/tools/bertpsctl", "--coordinator", coord,
                          "status", job, "--json"], capture_output=True, text=True)
    return json.loads(out.stdout)
first, last = 5, steps - 5
mark = {}
while True:
    s = status()
    step = int(s.get("progress", {}).get("step", 0))
    now = time.monotonic()
    if step >= first and "a" not in mark:
        mark["a"] = (step, now, cpu(shards), cpu(workers))
    if step >= last and "b" not in mark:
        mark["b"] = (step, now, cpu(shards), cpu(workers))
    if s.get("state") in ("SUCCEEDED", "FAILED", "CANCELLED"):
        break
    time.sleep(0.05)
if s.get("state") != "SUCCEEDED" or "b" not in mark:
    print(json.dumps({"replicas": replicas, "error": s.get("reason", s.get("state"))}))
    sys.exit(0)
(sa, ta, ca, wa), (sb, tb, cb, wb) = mark["a"], mark["b"]
n = sb - sa
print(json.dumps({"replicas": replicas, "steps": n,
                  "step_ms": 1000 * (tb - ta) / n,
                  "shard_cpu_ms_per_step": 1000 * (cb - ca) / n,
                  "worker_cpu_ms_per_step": 1000 * (wb - wa) / n}))
PY
      tail -1 "$results"
    done
  done
  # Re-replication: a spare daemon joins; a backup of shard 1 is killed at
  # step 10 of a replicated job; the spare is brought up to date while the
  # job runs. Time from the kill to the spare caught up, the snapshot's
  # size and transfer, and the step time before and while it joins.
  for r in $(seq 1 "$runs"); do
    # A spare per run (the run before killed one of the daemons).
    bazel-bin/server/ps/bertps_server --coordinator "$coord" --port 0 \
        --address_file "$dir/ps-e$r.address" > "$dir/ps-e$r.log" 2>&1 &
    spids+=($!)
    # shellcheck disable=SC2064
    trap "kill ${cpids[*]} ${spids[*]} ${wpids[*]} 2>/dev/null || true" RETURN
    for _ in $(seq 1 200); do [ -s "$dir/ps-e$r.address" ] && break; sleep 0.05; done
    sleep 1
    sed -e "s/^name: .*/name: \"bench-rejoin-$r\"/" -e "s/^replicas: .*/replicas: 2/" \
        -e "s/^steps: .*/steps: $((steps + 20))/" "$dir/job.pbtxt" > "$dir/rejoin.pbtxt"
    local rjob
    rjob=$(bazel-bin/tools/bertpsctl --coordinator "$coord" submit "$dir/rejoin.pbtxt")
    /usr/bin/python3 - "$coord" "$rjob" "$dir" >> "$dir/rejoin.jsonl" <<'PY'
import glob, json, os, re, signal, subprocess, sys, time
coord, job, d = sys.argv[1:4]
def status():
    out = subprocess.run(["bazel-bin/tools/bertpsctl", "--coordinator", coord,
                          "status", job, "--json"], capture_output=True, text=True)
    return json.loads(out.stdout)
def pid_of(address):
    out = subprocess.run(["pgrep", "-f", "bertps_server"], capture_output=True, text=True)
    for p in out.stdout.split():
        try:
            cmd = open(f"/proc/{p}/cmdline").read().split("\0")
        except OSError:
            continue
        if "--address_file" in cmd:
            f = cmd[cmd.index("--address_file") + 1]
            if os.path.exists(f) and open(f).read().strip() == address:
                return int(p)
    return None
marks = []
killed = joined = None
while True:
    s = status()
    step = int(s.get("progress", {}).get("step", 0))
    now = time.monotonic()
    marks.append((now, step))
    if killed is None and step >= 10:
        backup = None
        for log in glob.glob(f"{d}/ps-*.log"):
            if re.search(rf"holding a backup of shard 1 of job {job} ", open(log, errors="replace").read()):
                backup = open(log[:-4] + ".address").read().strip()
        pid = pid_of(backup) if backup else None
        if pid is None:
            print(json.dumps({"error": "no backup of shard 1 found"})); sys.exit(0)
        os.kill(pid, signal.SIGKILL)
        killed, killed_step = now, step
    if killed is not None and joined is None and s.get("backups_added", 0) >= 1:
        joined, joined_step = now, step
    if s.get("state") in ("SUCCEEDED", "FAILED", "CANCELLED"):
        break
    time.sleep(0.05)
if s.get("state") != "SUCCEEDED" or joined is None:
    print(json.dumps({"error": s.get("reason", s.get("state")), "joined": joined is not None}))
    sys.exit(0)
def rate(t0, t1):
    pts = [(t, st) for t, st in marks if t0 <= t <= t1]
    return 1000 * (pts[-1][0] - pts[0][0]) / max(1, pts[-1][1] - pts[0][1]) if len(pts) > 1 else None
before = [(t, st) for t, st in marks if st >= 3 and t <= killed]
snap = None
for log in glob.glob(f"{d}/ps-*.log"):
    for m in re.finditer(r"installed the snapshot of version (\d+) \(([\d.]+) MB in ([\d.]+) ms[:)]", open(log, errors="replace").read()):
        snap = (int(m.group(1)), float(m.group(2)), float(m.group(3)))
print(json.dumps({"kill_to_caught_up_ms": 1000 * (joined - killed),
                  "steps_during_join": joined_step - killed_step,
                  "snapshot_mb": snap[1] if snap else None,
                  "snapshot_ms": snap[2] if snap else None,
                  "step_ms_before": rate(before[0][0], killed) if before else None,
                  "step_ms_while_joining": rate(killed, joined + 2)}))
PY
    tail -1 "$dir/rejoin.jsonl"
    sleep 7  # the killed daemon is declared dead before the next job starts
  done
  local logs=()
  for r in $(seq 1 "$runs"); do
    TEST_TMPDIR="$dir/failover-$r" bash tests/replica_failover_test.sh "${service_bins[@]}" \
        > "$dir/failover-$r.log" 2>&1 || { tail -5 "$dir/failover-$r.log"; return 1; }
    logs+=("$dir/failover-$r.log")
  done
  /usr/bin/python3 - "$results" "$dir/rejoin.jsonl" "${logs[@]}" <<'PY' | tee "$out_dir/replicas.jsonl"
import json, re, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rejoin = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
rejoin = [x for x in rejoin if "error" not in x]
sys.argv = sys.argv[:2] + sys.argv[3:]  # then the failover logs from argv[2]
med = lambda v: statistics.median(v) if v else None
def pick(r, key):
    return [x[key] for x in rows if x.get("replicas") == r and key in x]
promoted, applied = [], []
for path in sys.argv[2:]:
    for line in open(path, errors="replace"):
        m = re.search(r"failed over after (\d+) ms; the new primary reported "
                      r"step \d+ applied (\d+) ms after the kill", line)
        if m:
            promoted.append(int(m.group(1)))
            applied.append(int(m.group(2)))
s1, s2 = med(pick(1, "step_ms")), med(pick(2, "step_ms"))
c1, c2 = med(pick(1, "shard_cpu_ms_per_step")), med(pick(2, "shard_cpu_ms_per_step"))
w1 = med(pick(1, "worker_cpu_ms_per_step"))
print(json.dumps({"bench": "replicas", "model": "mini", "shards": 2, "workers": 2,
    "runs": len(pick(2, "step_ms")),
    "step_ms_r1": s1, "step_ms_r2": s2,
    "r2_over_r1": s2 / s1 if s1 and s2 else None,
    "step_ms_r1_all": pick(1, "step_ms"), "step_ms_r2_all": pick(2, "step_ms"),
    "shard_cpu_ms_per_step_r1": c1, "shard_cpu_ms_per_step_r2": c2,
    "replication_cpu_ms_per_step": c2 - c1 if c1 is not None and c2 is not None else None,
    "worker_cpu_ms_per_step_r1": w1,
    "kill_to_promotion_ms": med(promoted), "kill_to_promotion_ms_all": promoted,
    "kill_to_new_primary_step_ms": med(applied),
    "kill_to_new_primary_step_ms_all": applied,
    "member_timeout_ms": 6000,
    "rejoins": len(rejoin),
    "kill_to_backup_caught_up_ms": med([x["kill_to_caught_up_ms"] for x in rejoin]),
    "kill_to_backup_caught_up_ms_all": [round(x["kill_to_caught_up_ms"]) for x in rejoin],
    "snapshot_mb": med([x["snapshot_mb"] for x in rejoin if x["snapshot_mb"]]),
    "snapshot_ms": med([x["snapshot_ms"] for x in rejoin if x["snapshot_ms"]]),
    "step_ms_before_join": med([x["step_ms_before"] for x in rejoin if x["step_ms_before"]]),
    "step_ms_while_joining": med([x["step_ms_while_joining"] for x in rejoin if x["step_ms_while_joining"]])}))
PY
}
