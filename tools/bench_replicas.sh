# tools/bench.sh replicas (sourced by tools/bench.sh: uses its $out_dir).
# What replicated shards cost and what they buy, with real processes over
# loopback: one cluster (a coordinator, 4 shard daemons, 2 train daemons)
# runs the same BERT-mini job (2 shards, 2 workers, BSP) with replicas: 1
# and replicas: 2, alternating; for each, the steady step time (wall clock
# between two step counts the coordinator reports) and the CPU seconds per
# step of the shard daemons and of the workers (/proc). Then
# tests/replica_failover_test.sh, repeated: a primary's kill -9 to its
# backup's promotion and to the new primary's next applied steps.
#
#   tools/bench.sh replicas [runs] [steps]   (default: 3 40)
bench_replicas() {
  local runs="${1:-3}" steps="${2:-40}"
  bazel build -c opt //tools:bert_local //server/coordinator:bertps_coordinator \
      //server/ps:bertps_server //worker:bertps_worker //tools:bertpsctl >/dev/null 2>&1
  local bins=(bazel-bin/tools/bert_local bazel-bin/server/coordinator/bertps_coordinator
              bazel-bin/server/ps/bertps_server bazel-bin/worker/bertps_worker
              bazel-bin/tools/bertpsctl)
  local dir="$out_dir/replicas"
  rm -rf "$dir"; mkdir -p "$dir/data"
  bazel-bin/tools/bert_local synthetic-data --config mini --out "$dir/data" \
      --steps 40 >/dev/null
  local cpids=() spids=() wpids=()
  bazel-bin/server/coordinator/bertps_coordinator --port 0 --metrics_port 0 \
      --address_file "$dir/coord.address" --member_timeout_s 60 \
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
  local logs=()
  for r in $(seq 1 "$runs"); do
    TEST_TMPDIR="$dir/failover-$r" bash tests/replica_failover_test.sh "${bins[@]}" \
        > "$dir/failover-$r.log" 2>&1 || { tail -5 "$dir/failover-$r.log"; return 1; }
    logs+=("$dir/failover-$r.log")
  done
  /usr/bin/python3 - "$results" "${logs[@]}" <<'PY' | tee "$out_dir/replicas.jsonl"
import json, re, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
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
    "member_timeout_ms": 60000}))
PY
}
