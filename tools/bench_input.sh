# tools/bench.sh input (sourced by tools/bench.sh: uses its $out_dir).
# Plain and GZIP TFRecord records read through the record index, against the
# rate a BERT-base training step consumes them, and a real job's input wait.
bench_input() {
  local records="${1:-100000}"
  bazel build -c opt //tools:input_bench //tools:bert_local \
      //server/ps:bertps_server //worker:bertps_worker >/dev/null
  local tmp="${TMPDIR:-/tmp}/bertps_input_bench.$$"
  local runs=() keep=""
  for r in 1 2 3; do
    [ "$r" = 3 ] && keep="--keep"
    bazel-bin/tools/input_bench --dir "$tmp" --records "$records" $keep \
        > "$out_dir/input-$r.jsonl"
    runs+=("$out_dir/input-$r.jsonl")
  done
  # The compute rate the input must keep up with: a BERT-base step (batch
  # 32, seq 128, one thread) on the same data; its second step's time.
  bazel-bin/tools/bert_local train --config base --data "$tmp/part-*.tfrecord" \
      --batch 32 --steps 2 --log_every 1 --threads 1 --dropout=false \
      --out "$tmp/base.safetensors" 2>/dev/null | tail -1 > "$out_dir/input-base.json"
  # The input wait per step in a real job: a shard and a train worker (tiny
  # model, batch 32, ASP: no announce, so a step reads its batch itself),
  # steps 21-60's mean input_ms, with the read-ahead and without it (depth 1
  # reads one step ahead).
  local depth sp
  for depth in 4 1; do
    rm -f "$tmp/ps.address"
    bazel-bin/server/ps/bertps_server --mode asp --workers 1 --port 0 --metrics_port -1 \
        --address_file "$tmp/ps.address" --config tiny > "$tmp/shard.log" 2>&1 &
    sp=$!
    for _ in $(seq 1 200); do [ -s "$tmp/ps.address" ] && break; sleep 0.05; done
    bazel-bin/worker/bertps_worker --role=train --mode asp --ps "$(cat "$tmp/ps.address")" \
        --data "$tmp/part-*.tfrecord" --config tiny --batch 32 --steps 60 --log_every 20 \
        --threads 1 --prefetch_batches "$depth" --metrics_port -1 --health_port -1 2>/dev/null |
      grep '"step":' | tail -2 > "$out_dir/input-job-$depth.jsonl" || true
    kill "$sp" 2>/dev/null; wait "$sp" 2>/dev/null || true
  done
  rm -rf "$tmp"
  # The median of three runs of each figure, and the read rates over the
  # records a BERT-base step consumes per second.
  /usr/bin/python3 - "$out_dir/input-base.json" "${runs[@]}" <<'PY' | tee "$out_dir/input.jsonl"
import json, platform, statistics, sys
base = json.load(open(sys.argv[1]))
base_rate = 32 / ((base["compute_ms"] + base.get("optimizer_ms", 0)) / 1e3)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
            if l.startswith("model name")), platform.processor())
flags = open("/proc/cpuinfo").read()
isa = "AMX-BF16" if "amx_bf16" in flags else ("AVX512-BF16" if "avx512_bf16" in flags else "neither")
print(json.dumps({"bench": "machine", "cpu": cpu, "bf16": isa,
                  "bert_base_step_ms": round(base["compute_ms"], 1),
                  "bert_base_records_per_s": round(base_rate, 3)}))
import os
for depth in (4, 1):
    f = os.path.join(os.path.dirname(sys.argv[1]), "input-job-%d.jsonl" % depth)
    lines = [json.loads(l) for l in open(f)] if os.path.exists(f) else []
    if lines:
        print(json.dumps({"bench": "job_input_wait", "prefetch_batches": depth,
                          "steps": "21-60",
                          "input_ms_per_step": round(statistics.mean(l["input_ms"] for l in lines), 4),
                          "compute_ms_per_step": round(statistics.mean(l["compute_ms"] for l in lines), 1)}))
runs = [[json.loads(l) for l in open(f)] for f in sys.argv[2:]]
for rows in zip(*runs):
    out = {}
    for k, v in rows[0].items():
        vals = [r[k] for r in rows]
        out[k] = round(statistics.median(vals), 4) if isinstance(v, float) else v
    if "records_per_s" in out:
        out["times_bert_base_rate"] = round(out["records_per_s"] / base_rate)
    out["runs"] = len(rows)
    print(json.dumps(out))
PY
}

