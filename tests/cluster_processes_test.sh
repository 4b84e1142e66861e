#!/usr/bin/env bash
# The service end to end, real processes over 127.0.0.1: a coordinator, two
# parameter-server daemons and three train daemons (one spare) that take work
# from it; bertpsctl submits a job, one worker is killed with SIGKILL mid-job,
# the spare takes its slot, the job succeeds with exact per-epoch example
# counts and a falling loss; every bertpsctl verb is exercised, bad input
# gets clear errors, and the daemons leave cleanly on SIGTERM.
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
work="${TEST_TMPDIR:-$(mktemp -d)}/cluster"
mkdir -p "$work/data"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "== $f"; tail -20 "$f"; done; exit 1; }

cat > "$work/model.json" <<'JSON'
{"vocab_size": 1200, "hidden_size": 32, "num_hidden_layers": 2,
 "num_attention_heads": 2, "intermediate_size": 64,
 "max_position_embeddings": 128}
JSON
"$BERT_LOCAL" synthetic-data --config "$work/model.json" --out "$work/data" --steps 40

rm -f "$work/coordinator.address"
"$COORD" --port 0 --metrics_port 0 --address_file "$work/coordinator.address" \
  --member_timeout_s 2 > "$work/coordinator.log" 2>&1 &
pids+=($!); coord_pid=$!
for _ in $(seq 1 400); do  # until it listens and says where
  [ -s "$work/coordinator.address" ] && break
  sleep 0.05
done
[ -s "$work/coordinator.address" ] || { echo "FAIL: the coordinator did not start: $(tail -3 "$work/coordinator.log")"; exit 1; }
coord=$(cat "$work/coordinator.address")
for s in 0 1; do
  "$SERVER" --coordinator "$coord" --port 0 --metrics_port 0 > "$work/ps$s.log" 2>&1 &
  pids+=($!)
done
worker_pids=()
for w in 0 1 2; do
  "$WORKER" --role=train --coordinator "$coord" --metrics_port 0 > "$work/worker$w.log" 2>&1 &
  pids+=($!); worker_pids+=($!)
done
export BERTPS_COORDINATOR="$coord"

# Bad input first: a bad spec names the field; unknown jobs are clear errors.
printf 'data: "x"\nsteps: 1\nbatch_size: -4\n' > "$work/bad.pbtxt"
if "$CTL" submit "$work/bad.pbtxt" > "$work/bad.out" 2>&1; then fail "bad spec accepted"; fi
grep -q batch_size "$work/bad.out" || fail "bad spec error does not name batch_size: $(cat "$work/bad.out")"
if "$CTL" status job-999999 > "$work/nojob.out" 2>&1; then fail "unknown job accepted"; fi
grep -q "no job" "$work/nojob.out" || fail "unknown job: $(cat "$work/nojob.out")"

cat > "$work/job.pbtxt" <<EOF2
name: "e2e"
task: PRETRAIN
model: "$work/model.json"
data: "$work/data/*.tfrecord"
batch_size: 4
epochs: 3
num_ps_shards: 2
num_workers: 2
optimizer { learning_rate: 2e-3 warmup_steps: 2 }
export_path: "$work/final.safetensors"
tensorboard_dir: "$work/tb"
EOF2
job=$("$CTL" submit "$work/job.pbtxt") || fail "submit"
echo "submitted $job"

# Kill -9 one running worker once the job has made progress.
for i in $(seq 1 600); do
  step=$("$CTL" metrics "$job" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["progress"].get("step",0))')
  [ "$step" -ge 5 ] && break
  sleep 0.1
done
[ "$step" -ge 5 ] || fail "no progress"
# Slots go to the first train daemons that registered: kill the first.
kill -9 "${worker_pids[0]}"
echo "killed worker pid ${worker_pids[0]} at step $step"

"$CTL" watch "$job" > "$work/watch.out" 2>&1 || fail "watch: $(tail -3 "$work/watch.out")"
tail -2 "$work/watch.out"
"$CTL" status "$job" | tee "$work/status.out" | head -5
grep -q SUCCEEDED "$work/status.out" || fail "job did not succeed"
"$CTL" list | grep -q "$job" || fail "list"
"$CTL" metrics "$job" --json > "$work/metrics.json"
/usr/bin/python3 - "$work/metrics.json" <<'PY' || fail "metrics"
import json, sys
m = json.load(open(sys.argv[1]))
p = m["progress"]
per_epoch = [int(x) for x in p["examples_per_epoch"]]
# Counted by shard 0 from the pushes it applied (each names its examples):
# 80 examples, 3 epochs, each example once although a worker was killed (the
# spare read exactly what the dead one would have; the job would have FAILED
# its data accounting otherwise).
assert per_epoch == [80, 80, 80], per_epoch
assert int(p.get("examples_applied_twice", 0)) == 0, p
h = m["history"]
first, last = h[0]["loss"], h[-1]["loss"]
assert last < first, (first, last)
print("per-epoch examples", per_epoch, "loss", round(first, 3), "->", round(last, 3))
PY
"$CTL" plot "$job" -o "$work/loss.svg" && grep -q "<svg" "$work/loss.svg" || fail "plot"
test -s "$work/final.safetensors" || fail "no export"
if "$CTL" cancel "$job" > "$work/cancel.out" 2>&1; then fail "cancelling a finished job succeeded"; fi
grep -qi "already ended" "$work/cancel.out" || fail "cancel: $(cat "$work/cancel.out")"
# Prometheus text from every live daemon: the conventions promtool checks
# (counters end in _total, base units), the job in a job_id label (a label
# named job would be renamed on scrape), and this job's series.
# promtool: unpacked by tools/get_data.sh ($BERTPS_DATA_DIR, else the data/
# dir of the workspace: the script in the runfiles links into it).
promtool="${BERTPS_DATA_DIR:-$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)/data}/bin/promtool"
[ -x "$promtool" ] || fail "$promtool is missing: run tools/get_data.sh promtool"
scrapes=0
for log in "$work"/coordinator.log "$work"/ps*.log "$work"/worker*.log; do
  mport=$(sed -n 's/.*metrics on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$log" | head -1)
  [ -n "$mport" ] || fail "no metrics port in $log"
  out="$work/metrics-$(basename "$log" .log).txt"
  /usr/bin/python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:$mport/metrics',timeout=5).read().decode())" > "$out" 2>/dev/null || continue  # the killed worker
  scrapes=$((scrapes + 1))
  "$promtool" check metrics < "$out" > "$out.lint" 2>&1 || fail "promtool on $log's metrics: $(cat "$out.lint")"
  if grep -q 'job="' "$out"; then fail "a label named job in $out"; fi
done
[ "$scrapes" -ge 5 ] || fail "only $scrapes daemons answered a scrape"
# Exported values trail the job's end (the coordinator exports every 500 ms,
# a shard every second and when it leaves the job): each check scrapes its
# daemons again for up to 5 s.
rescrape_until() {  # rescrape_until WHAT REGEX LOG...: some LOG's daemon shows it
  local what="$1" regex="$2" log port out; shift 2
  for _ in $(seq 1 25); do
    for log in "$@"; do
      port=$(sed -n 's/.*metrics on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$log" | head -1)
      out="$work/metrics-$(basename "$log" .log).txt"
      /usr/bin/python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:$port/metrics',timeout=5).read().decode())" > "$out.new" 2>/dev/null \
        && mv "$out.new" "$out"
      grep -q "$regex" "$out" 2>/dev/null && return 0
    done
    sleep 0.2
  done
  fail "$what: no daemon's metrics match $regex"
}
rescrape_until "coordinator metrics" "^bertps_job_step{job_id=\"$job\"} 30$" "$work/coordinator.log"
rescrape_until "no shard counted the job's pushes" \
  "^bertps_shard_pushes_total{job_id=\"$job\",result=\"applied\"} [1-9]" "$work"/ps*.log
rescrape_until "no worker's step histogram" \
  "^bertps_worker_step_seconds_count{job_id=\"$job\"} [1-9]" "$work"/worker*.log
echo "metrics: $scrapes daemons pass promtool check metrics"
# TensorBoard: the event file's records, each decoded by protoc --decode_raw
# (TensorFlow's field numbers): the file version first, then the loss of
# the steps under tag train/loss.
for i in $(seq 1 20); do ls "$work"/tb/events.out.tfevents.* >/dev/null 2>&1 && break; sleep 0.5; done
/usr/bin/python3 - "$work"/tb/events.out.tfevents.* "$work/tb-records" <<'PY' || fail "tensorboard records"
import os, struct, sys
path, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
data, at, n = open(path, "rb").read(), 0, 0
while at < len(data):
    (length,) = struct.unpack("<Q", data[at:at + 8])
    open(os.path.join(out, "%05d" % n), "wb").write(data[at + 12:at + 12 + length])
    at += 12 + length + 4
    n += 1
assert n > 30, n
PY
first=$(protoc --decode_raw < "$work/tb-records/00000")
grep -q '^3: "brain.Event:2"$' <<<"$first" || fail "first event: $first"
losses=""
for f in "$work"/tb-records/*; do
  d=$(protoc --decode_raw < "$f")
  if grep -q '1: "train/loss"' <<<"$d"; then
    losses="$losses $(sed -n 's/^2: \([0-9]*\)$/\1/p' <<<"$d")"
  fi
done
# Each step once, in order, from the first; the steps whose half the killed
# worker had not sent yet (reports go with the next heartbeat) have no loss,
# as in the job's history: one run of steps up to the kill (up to the last
# step when, on a busy machine, the kill came after the killed worker had
# pushed its last step), and every step after it.
/usr/bin/python3 - $losses <<'PY' || fail "train/loss steps:$losses"
import sys
s = [int(x) for x in sys.argv[1:]]
assert s == sorted(set(s)) and s[0] == 1 and len(s) >= 5, s
gap = sorted(set(range(1, 31)) - set(s))
assert not gap or gap[-1] - gap[0] + 1 == len(gap), ("more than one gap", gap)
PY
echo "tensorboard: $(ls "$work"/tb-records | wc -l) events, train/loss at steps:$losses"
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
pids=()
echo "cluster: job $job SUCCEEDED with a worker killed mid-job"
echo PASS
