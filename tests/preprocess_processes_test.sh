#!/usr/bin/env bash
# Distributed preprocessing end to end, real processes over 127.0.0.1: a
# coordinator and preprocess daemons turn the package-description corpus
# (tools/get_data.sh corpus_small) into BERT pretraining TFRecords.
#  1. one preprocess worker: the reference output
#  2. three workers: byte-identical files, same record count
#  3. three workers, one killed with SIGKILL mid-job: its item is redone by
#     another, the output is again byte-identical and counted once
# Plus: a bad spec names its field; a missing vocab fails the job with a
# reason naming the item.
set -euo pipefail
export LC_ALL=C
COORD="$1"; WORKER="$2"; CTL="$3"
work="${TEST_TMPDIR:-$(mktemp -d)}/preprocess"
rm -rf "$work"; mkdir -p "$work"
if [ -z "${BERTPS_DATA_DIR:-}" ]; then
  root="$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)"
  BERTPS_DATA_DIR="$root/data"
fi
vocab="$BERTPS_DATA_DIR/vocab/bert-base-uncased-vocab.txt"
corpus="$BERTPS_DATA_DIR/corpus/small"
for f in "$vocab" "$corpus/part-00.txt"; do
  [ -f "$f" ] || { echo "FAIL: $f is missing: run tools/get_data.sh first"; exit 1; }
done
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "== $f"; tail -20 "$f"; done; exit 1; }

rm -f "$work/coordinator.address"
"$COORD" --port 0 --metrics_port 0 --address_file "$work/coordinator.address" \
  --member_timeout_s 2 > "$work/coordinator.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 400); do  # until it listens and says where
  [ -s "$work/coordinator.address" ] && break
  sleep 0.05
done
[ -s "$work/coordinator.address" ] || { echo "FAIL: the coordinator did not start: $(tail -3 "$work/coordinator.log")"; exit 1; }
coord=$(cat "$work/coordinator.address")
export BERTPS_COORDINATOR="$coord"

spec() {  # spec NAME OUTDIR [VOCAB [COMPRESSION]]
  cat <<EOF2
name: "$1"
task: PREPROCESS
data: "$corpus/part-0*.txt"
output_dir: "$2"
preprocess {
  vocab: "${3:-$vocab}"
  compression: "${4:-none}"
  shards: 8
  dupe_factor: 2
  whole_word_mask: true
  clean { dedup_exact: true dedup_near: true min_words: 3 }
}
EOF2
}

start_workers() {  # start_workers N: sets worker_pids
  worker_pids=()
  for i in $(seq 1 "$1"); do
    "$WORKER" --role=preprocess --coordinator "$coord" > "$work/worker-$RANDOM.log" 2>&1 &
    pids+=($!); worker_pids+=($!)
  done
}
stop_workers() {
  for p in "${worker_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${worker_pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
run_job() {  # run_job NAME OUTDIR [COMPRESSION] -> prints the job id
  spec "$1" "$2" "$vocab" "${3:-none}" > "$work/$1.pbtxt"
  local job
  job=$("$CTL" submit "$work/$1.pbtxt") || fail "submit $1"
  echo "$job"
}
records_of() { "$CTL" status "$1" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin).get("records_written","0"))'; }
digest() { (cd "$1" && ls | grep -v '^\.' | sort | xargs sha256sum); }

# Bad spec: the field is named, nothing runs.
printf 'task: PREPROCESS\ndata: "%s/part-00.txt"\noutput_dir: "%s/x"\npreprocess { vocab: "%s" input_format: "pdf" }\n' \
  "$corpus" "$work" "$vocab" > "$work/bad.pbtxt"
if "$CTL" submit "$work/bad.pbtxt" > "$work/bad.out" 2>&1; then fail "bad spec accepted"; fi
grep -q input_format "$work/bad.out" || fail "bad spec error: $(cat "$work/bad.out")"
spec badz "$work/x" "$vocab" zstd > "$work/badz.pbtxt"
if "$CTL" submit "$work/badz.pbtxt" > "$work/badz.out" 2>&1; then fail "compression zstd accepted"; fi
grep -q "preprocess.compression" "$work/badz.out" || fail "bad compression error: $(cat "$work/badz.out")"

# 1. One worker.
start_workers 1
job1=$(run_job one "$work/out1")
"$CTL" watch "$job1" > "$work/watch1.out" 2>&1 || fail "job one: $(tail -3 "$work/watch1.out")"
stop_workers
n1=$(records_of "$job1")
[ "$n1" -gt 1000 ] || fail "job one wrote $n1 records"
ls "$work/out1" | grep -c '^pretrain-.*\.tfrecord$' | grep -qx 8 || fail "job one: not 8 output files: $(ls "$work/out1")"
"$CTL" status "$job1" > "$work/status1.out"
grep -q "8 of 8 done" "$work/status1.out" || fail "status: $(cat "$work/status1.out")"
grep -q '"dedup_exact"\|dedup' "$work/status1.out" || fail "no cleaning report: $(cat "$work/status1.out")"
echo "one worker: $n1 records"

# 2. Three workers: the same bytes.
start_workers 3
job3=$(run_job three "$work/out3")
"$CTL" watch "$job3" > "$work/watch3.out" 2>&1 || fail "job three"
stop_workers
[ "$(records_of "$job3")" = "$n1" ] || fail "three workers: $(records_of "$job3") records, one worker: $n1"
diff <(digest "$work/out1") <(digest "$work/out3") > /dev/null || fail "1 vs 3 workers: outputs differ"
echo "three workers: identical"

# GZIP output: the same records, in standard gzip (gzip -dc gives the plain
# files' bytes).
start_workers 2
jobz=$(run_job gz "$work/outz" gzip)
"$CTL" watch "$jobz" > "$work/watchz.out" 2>&1 || fail "job gz: $(tail -3 "$work/watchz.out")"
stop_workers
[ "$(records_of "$jobz")" = "$n1" ] || fail "gzip: $(records_of "$jobz") records, expected $n1"
ls "$work/outz" | grep -c '^pretrain-.*\.tfrecord\.gz$' | grep -qx 8 || fail "gzip: not 8 .tfrecord.gz files: $(ls "$work/outz")"
for f in "$work"/out1/pretrain-*.tfrecord; do
  z="$work/outz/$(basename "$f").gz"
  cmp -s "$f" <(gzip -dc "$z") || fail "gzip -dc $z differs from $f"
done
plain_bytes=$(cat "$work"/out1/pretrain-*.tfrecord | wc -c)
gz_bytes=$(cat "$work"/outz/pretrain-*.tfrecord.gz | wc -c)
[ "$gz_bytes" -lt "$plain_bytes" ] || fail "gzip output ($gz_bytes bytes) not smaller than plain ($plain_bytes)"
echo "gzip: identical records, $gz_bytes of $plain_bytes bytes"

# 3. Three workers, one killed mid-item.
start_workers 3
jobk=$(run_job killed "$work/outk")
for i in $(seq 1 300); do
  "$CTL" status "$jobk" | grep -q RUNNING && break
  sleep 0.05
done
sleep 0.5  # every worker holds an item now (an item takes about a second)
done_items=$("$CTL" status "$jobk" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin).get("items_done",0))')
kill -9 "${worker_pids[0]}"
echo "killed a worker after $done_items item(s)"
"$CTL" watch "$jobk" > "$work/watchk.out" 2>&1 || fail "job killed: $(tail -3 "$work/watchk.out")"
grep -q "given back; it will be redone" "$work/watchk.out" || fail "no item was redone: $(cat "$work/watchk.out")"
stop_workers
[ "$(records_of "$jobk")" = "$n1" ] || fail "after a kill: $(records_of "$jobk") records, expected $n1 (counted once)"
diff <(digest "$work/out1") <(digest "$work/outk") > /dev/null || fail "after a kill: outputs differ"
echo "killed worker: identical, counted once"

# A job whose items cannot be done fails with a reason naming the item.
start_workers 1
spec missing "$work/outm" "$work/no-such-vocab.txt" > "$work/missing.pbtxt"
jobm=$("$CTL" submit "$work/missing.pbtxt") || fail "submit missing"
if "$CTL" watch "$jobm" > "$work/watchm.out" 2>&1; then fail "a missing vocab succeeded"; fi
"$CTL" status "$jobm" | grep -q "reason.*item .*no-such-vocab" || fail "reason: $("$CTL" status "$jobm")"
stop_workers
echo PASS
