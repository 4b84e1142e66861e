#!/usr/bin/env bash
# The Grafana dashboard against a real Prometheus: a local cluster (a
# coordinator, a parameter-server daemon, a train worker with simulated
# compute, an eval worker) runs a pretraining job with checkpoints and eval
# rounds while Debian's Prometheus server (data/bin/prometheus, unpacked by
# tools/get_data.sh promtool) scrapes every daemon each second; then every
# panel of deploy/grafana/bertps-dashboard.json must have a query that
# returns data for that job (its job_id variable set to the job), and the
# variable's own query (label_values) must list the job.
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"; DASHBOARD="$6"
source "$(dirname "$0")/process_lib.sh"
init_work prometheus
data_dir="${BERTPS_DATA_DIR:-$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)/data}"
prometheus="$data_dir/bin/prometheus"
[ -x "$prometheus" ] || fail "$prometheus is missing: run tools/get_data.sh promtool"
tiny_model_data "$BERT_LOCAL"
start_coordinator "$COORD" 0 "$work/coordinator.log" --member_timeout_s 5
coord="$BERTPS_COORDINATOR"
metrics_port() {  # metrics_port LOG: the port the daemon printed
  for _ in $(seq 1 100); do
    p=$(sed -n 's/.*metrics on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$1" | head -1)
    [ -n "$p" ] && { echo "$p"; return 0; }
    sleep 0.1
  done
  fail "no metrics port in $1"
}
"$SERVER" --coordinator "$coord" --port 0 --metrics_port 0 > "$work/ps.log" 2>&1 &
pids+=($!)
"$WORKER" --role=train --coordinator "$coord" --metrics_port 0 --threads 1 \
  --simulate_compute_ms 25 > "$work/worker.log" 2>&1 &
pids+=($!)
"$WORKER" --role=eval --coordinator "$coord" --threads 1 > "$work/eval.log" 2>&1 &
pids+=($!)
targets=""
for log in coordinator ps worker; do
  targets="$targets'127.0.0.1:$(metrics_port "$work/$log.log")', "
done
cat > "$work/prometheus.yml" <<EOF2
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: bertps
    static_configs:
      - targets: [${targets%, }]
EOF2
pport=$(free_port)
"$prometheus" --config.file "$work/prometheus.yml" --storage.tsdb.path "$work/tsdb" \
  --web.listen-address "127.0.0.1:$pport" > "$work/prometheus.log" 2>&1 &
pids+=($!)

cat > "$work/job.pbtxt" <<EOF2
name: "dashboard"
task: PRETRAIN
model: "$work/model.json"
data: "$work/data/*.tfrecord"
batch_size: 4
steps: 240
optimizer { learning_rate: 1e-3 warmup_steps: 2 }
checkpoint { dir: "$work/ckpt" every_steps: 80 }
eval { data: "$work/data/*.tfrecord" every_steps: 80 }
EOF2
job=$("$CTL" submit "$work/job.pbtxt") || fail "submit"
"$CTL" watch "$job" > "$work/watch.out" 2>&1 || fail "the job: $(tail -3 "$work/watch.out")"
sleep 3  # the last values scraped

/usr/bin/python3 - "$DASHBOARD" "$pport" "$job" <<'PY' || fail "dashboard queries"
import json, sys, time, urllib.parse, urllib.request
dashboard, port, job = sys.argv[1], sys.argv[2], sys.argv[3]
d = json.load(open(dashboard))
def query(expr):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    r = json.load(urllib.request.urlopen(url, timeout=10))
    if r.get("status") != "success":
        raise SystemExit(f"query failed: {expr}: {r}")
    return r["data"]["result"]
# The variable's query: label_values(metric, label) lists the job.
var = next(v for v in d["templating"]["list"] if v["name"] == "job_id")
metric = var["query"].split("(")[1].split(",")[0].strip()
listed = {s["metric"].get("job_id") for s in query(metric)}
if job not in listed:
    raise SystemExit(f"label_values({metric}, job_id) lacks {job}: {listed}")
bad = []
for panel in d["panels"]:
    exprs = [t["expr"] for t in panel.get("targets", []) if t.get("expr")]
    got = {}
    for e in exprs:
        got[e] = len(query(e.replace("$job_id", job)))
    if not any(got.values()):
        bad.append(f"{panel.get('title')}: {got}")
    else:
        print(f"ok  {panel.get('title')}: {sum(1 for n in got.values() if n)} of {len(exprs)} queries with data")
if bad:
    raise SystemExit("panels with no data:\n  " + "\n  ".join(bad))
print(f"{len(d['panels'])} panels have data for {job}")
PY
echo "PASS: every dashboard panel has data from a real Prometheus"
