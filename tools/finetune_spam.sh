#!/usr/bin/env bash
# Worked example (issue "eval worker role"): fine-tuning BERT-Tiny on the
# SpamAssassin corpus (spam vs ham), end to end on a local cluster:
#   1. a coordinator, one parameter-server shard, one train worker, one
#      preprocess worker and one eval worker on loopback;
#   2. `bert_local extract-labelled` turns the raw e-mails into JSON lines
#      (headers and MIME parts stripped, exact duplicates removed);
#   3. a PREPROCESS job writes train/dev/test classification records
#      (WordPiece, seq 256, deterministic 80/10/10 split by message id);
#   4. a short PRETRAIN job (masked LM + next sentence) on general English
#      text (Debian package descriptions, never the e-mails) gives the
#      checkpoint the classifier starts from;
#   5. a CLASSIFY job starts from that checkpoint (init_weights), trains the
#      encoder and the classifier head, evaluates the dev split during
#      training and the held-out test split at the end (eval workers,
#      merged sufficient statistics).
# Prints the test metrics and the training time; the last line is one JSON
# object. Environment: OUT (default out/finetune_spam), CLS_EPOCHS (4),
# PRETRAIN_STEPS (200).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
out="${OUT:-out/finetune_spam}"
epochs="${CLS_EPOCHS:-4}"
pre_steps="${PRETRAIN_STEPS:-200}"
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap stop_all EXIT
trap 'echo; echo "finetune_spam: interrupted"; exit 130' INT TERM

bazel build //server/coordinator:bertps_coordinator //server/ps:bertps_server \
  //worker:bertps_worker //tools:bert_local //tools:bertpsctl 2>&1 | tail -1
bin=$(bazel info bazel-bin 2>/dev/null)
tools/get_data.sh vocab corpus_small spamassassin
vocab="$PWD/data/vocab/bert-base-uncased-vocab.txt"
rm -rf "$out"; mkdir -p "$out"
out=$(cd "$out" && pwd)

"$bin/tools/bert_local" extract-labelled --source spamassassin \
  --input data/corpus/spamassassin --output "$out/spam.jsonl" --dedup_exact \
  --report "$out/extract-report.json" > /dev/null
echo "finetune_spam: $(wc -l < "$out/spam.jsonl") messages -> $out/spam.jsonl"

port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export BERTPS_COORDINATOR="127.0.0.1:$port"
"$bin/server/coordinator/bertps_coordinator" --port "$port" --metrics_port 0 > "$out/coordinator.log" 2>&1 &
pids+=($!)
"$bin/server/ps/bertps_server" --coordinator "$BERTPS_COORDINATOR" --port 0 > "$out/ps.log" 2>&1 &
pids+=($!)
for role in train preprocess eval; do
  "$bin/worker/bertps_worker" --role=$role --coordinator "$BERTPS_COORDINATOR" > "$out/$role.log" 2>&1 &
  pids+=($!)
done
ctl="$bin/tools/bertpsctl"
run() {  # run SPEC: submit, watch, print the status
  local job
  job=$("$ctl" submit "$1")
  "$ctl" watch "$job" | tail -1
  "$ctl" status "$job" > "$1.status"
  "$ctl" status "$job" --json > "$1.json"
}

cat > "$out/preprocess.pbtxt" <<EOF2
name: "spam-records"
task: PREPROCESS
data: "$out/spam.jsonl"
output_dir: "$out/records"
preprocess {
  input_format: "jsonl" output: "classify" vocab: "$vocab"
  max_seq_length: 256 labels: "ham" labels: "spam" shards: 4
}
EOF2
run "$out/preprocess.pbtxt"

cat > "$out/pretrain-data.pbtxt" <<EOF2
name: "pretrain-records"
task: PREPROCESS
data: "$PWD/data/corpus/small/part-0*.txt"
output_dir: "$out/pretrain-records"
preprocess { vocab: "$vocab" dupe_factor: 1 shards: 4 }
EOF2
if [ "$pre_steps" -gt 0 ]; then
run "$out/pretrain-data.pbtxt"

cat > "$out/pretrain.pbtxt" <<EOF2
name: "pretrain-tiny"
task: PRETRAIN
model: "tiny"
data: "$out/pretrain-records/pretrain-*.tfrecord"
batch_size: 32
steps: $pre_steps
optimizer { learning_rate: ${PRETRAIN_LR:-1e-4} warmup_steps: 20 }
checkpoint { dir: "$out/pretrain-ckpt" }
EOF2
run "$out/pretrain.pbtxt"
manifest="$out/pretrain-ckpt/ckpt-$pre_steps/manifest.json"
init_line="init_weights: \"$manifest\""
else
  init_line=""  # from the seeded initialisation
fi

cat > "$out/classify.pbtxt" <<EOF2
name: "spam-tiny"
task: CLASSIFY
model: "tiny"
label_names: "ham" label_names: "spam"
data: "$out/records/train-*.tfrecord"
batch_size: 32
epochs: $epochs
$init_line
optimizer { learning_rate: 5e-4 warmup_steps: 60 }
checkpoint { dir: "$out/classify-ckpt" every_steps: 150 }
eval { data: "$out/records/test-*.tfrecord" }
EOF2
start=$(date +%s)
run "$out/classify.pbtxt"
cat "$out/classify.pbtxt.status"
"$ctl" plot "$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$out/classify.pbtxt.json")" -o "$out/loss.svg" > /dev/null || true
/usr/bin/python3 - "$out/classify.pbtxt.json" "$start" <<'PY'
import json, sys, time
st = json.load(open(sys.argv[1]))
final = st["evals"][-1]
ran = (int(st["end_time_ms"]) - int(st["start_time_ms"])) / 1000
print(json.dumps({"state": st["state"], "test_accuracy": round(final["accuracy"], 4),
                  "macro_f1": round(final["macro_f1"], 4),
                  "test_examples": int(final["examples"]),
                  "confusion_true_x_pred": [int(x) for x in final["stats"]["confusion"]],
                  "steps": int(st["progress"]["total_steps"]), "train_seconds": ran}))
PY
