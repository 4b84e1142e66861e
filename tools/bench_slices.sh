# tools/bench.sh slices (sourced by tools/bench.sh: uses its $out_dir and
# build_service_bins).
# What several slices per shard daemon cost: the same BERT-mini job (2
# shards, replicas: 2, 2 train workers, BSP) on 4 shard daemons of one
# slice and on 2 daemons of 2 slices (bertps_server --slices 2), alternating
# runs; for each, the shard daemons' resident memory and threads at step 20
# (/proc), the steady step time (steps 10 to 30, wall clock) and the
# coordinator's estimate per shard.
#
#   tools/bench.sh slices [runs]   (default: 3)
bench_slices() {
  local runs="${1:-3}"
  build_service_bins
  local dir="$out_dir/slices" results="$out_dir/slices/runs.jsonl"
  rm -rf "$dir"; mkdir -p "$dir/data"
  bazel-bin/tools/bert_local synthetic-data --config mini --out "$dir/data" \
      --steps 40 >/dev/null
  : > "$results"
  local r layout
  for r in $(seq 1 "$runs"); do
    for layout in 4x1 2x2; do
      bench_slices_run "$dir/$layout-$r" "${layout%x*}" "${layout#*x}" \
          >> "$results" || return 1
    done
  done
  /usr/bin/python3 - "$results" <<'PY' | tee "$out_dir/slices.jsonl"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
med = lambda v: statistics.median(v) if v else None
def pick(layout, key):
    return [x[key] for x in rows if x["layout"] == layout and x.get(key) is not None]
out = {"bench": "slices", "model": "mini", "shards": 2, "replicas": 2, "workers": 2}
for layout in ("4x1", "2x2"):
    out[layout] = {k: med(pick(layout, k)) for k in
                   ("shard_rss_mb_total", "shard_threads_total", "step_ms")}
    out[layout]["daemon_rss_mb_all"] = pick(layout, "daemon_rss_mb")
    out[layout]["step_ms_all"] = [round(x, 1) for x in pick(layout, "step_ms")]
out["estimate_mb_per_shard"] = med(pick("4x1", "estimate_mb_per_shard") + pick("2x2", "estimate_mb_per_shard"))
a, b = out["4x1"], out["2x2"]
out["rss_2x2_over_4x1"] = b["shard_rss_mb_total"] / a["shard_rss_mb_total"] if a["shard_rss_mb_total"] else None
out["step_2x2_over_4x1"] = b["step_ms"] / a["step_ms"] if a["step_ms"] and b["step_ms"] else None
print(json.dumps(out))
PY
}

# bench_slices_run DIR DAEMONS SLICES: one run; prints one JSON line.
bench_slices_run() {
  local dir="$1" daemons="$2" slices="$3"
  mkdir -p "$dir"
  local pids=() spids=() coord d job
  bazel-bin/server/coordinator/bertps_coordinator --port 0 \
      --address_file "$dir/coord.address" --member_timeout_s 6 \
      > "$dir/coordinator.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 200); do [ -s "$dir/coord.address" ] && break; sleep 0.05; done
  coord=$(cat "$dir/coord.address")
  for d in $(seq 1 "$daemons"); do
    bazel-bin/server/ps/bertps_server --coordinator "$coord" --port 0 \
        --slices "$slices" > "$dir/ps-$d.log" 2>&1 &
    pids+=($!); spids+=($!)
  done
  for d in 1 2; do
    bazel-bin/worker/bertps_worker --role=train --coordinator "$coord" \
        > "$dir/w-$d.log" 2>&1 &
    pids+=($!)
  done
  # shellcheck disable=SC2064
  trap "kill ${pids[*]} 2>/dev/null || true" RETURN
  sleep 2
  printf '%s\n' "name: \"slices-${daemons}x$slices\"" "task: PRETRAIN" \
      'model: "mini"' "data: \"$(dirname "$dir")/data/*.tfrecord\"" \
      "batch_size: 8" "steps: 40" "num_ps_shards: 2" "num_workers: 2" \
      "replicas: 2" "optimizer { learning_rate: 1e-4 }" > "$dir/job.pbtxt"
  job=$(bazel-bin/tools/bertpsctl --coordinator "$coord" submit "$dir/job.pbtxt") || return 1
  /usr/bin/python3 - "$coord" "$job" "${daemons}x$slices" "${spids[@]}" <<'PY'
import json, subprocess, sys, time
coord, job, layout, pids = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
def status():
    out = subprocess.run(["bazel-bin/tools/bertpsctl", "--coordinator", coord,
                          "status", job, "--json"], capture_output=True, text=True)
    return json.loads(out.stdout) if out.returncode == 0 else {}
def step(s):
    return int(s.get("progress", {}).get("step", 0))
def wait(n):
    deadline = time.time() + 600
    while time.time() < deadline:
        s = status()
        if step(s) >= n or s.get("state") in ("FAILED", "CANCELLED", "SUCCEEDED"):
            return s
        time.sleep(0.05)
    return status()
s = wait(10); t0, n0 = time.time(), step(s)
s = wait(20)
rss, threads = [], 0
for p in pids:
    with open(f"/proc/{p}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss.append(int(line.split()[1]) / 1024)
            if line.startswith("Threads:"):
                threads += int(line.split()[1])
s = wait(30); t1, n1 = time.time(), step(s)
est = (s.get("memory") or {}).get("shard_bytes")
print(json.dumps({"layout": layout, "daemon_rss_mb": [round(x, 1) for x in rss],
                  "shard_rss_mb_total": round(sum(rss), 1),
                  "shard_threads_total": threads,
                  "step_ms": (t1 - t0) * 1000 / max(1, n1 - n0),
                  "estimate_mb_per_shard": int(est) / 2**20 if est else None}))
PY
}
