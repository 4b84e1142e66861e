#!/usr/bin/env bash
# Worked example (issue "eval worker role"): fine-tuning BERT-Tiny on the
# SpamAssassin corpus (spam vs ham), end to end on a local cluster:
#   1. a coordinator, one parameter-server shard, one train worker, one
#      preprocess worker and one eval worker on loopback;
#   2. `bert_local extract-labelled` turns the raw e-mails into JSON lines
#      (headers and MIME parts stripped), and removes exact and near
#      duplicates (5-word shingle Jaccard >= 0.8) from the whole corpus
#      before any split; an exact all-pairs check (no MinHash) then proves
#      that no two messages left are that similar, so no test message has a
#      near duplicate in train;
#   3. a PREPROCESS job writes train/dev/test classification records
#      (WordPiece, seq 256, deterministic 80/10/10 split by message id);
#   4. a short PRETRAIN job (masked LM + next sentence) on general English
#      text (Debian package descriptions, never the e-mails) gives the
#      checkpoint the classifier starts from;
#   5. a CLASSIFY job starts from that checkpoint (init_weights), trains the
#      encoder and the classifier head, and evaluates the dev split during
#      training and at its end (the learning rate, warmup and epochs were
#      chosen on dev);
#   6. one EVAL job measures the held-out test split once, on the final
#      checkpoint (eval workers, merged sufficient statistics).
# Prints the dev and test metrics and the training time; the last line is
# one JSON object. Environment: OUT (default out/finetune_spam), CLS_EPOCHS
# (4), CLS_LR (2e-4), PRETRAIN_STEPS (200), NO_SHUFFLE (set: file order),
# PRECISION (F32 or BF16: the CLASSIFY job's products). The test split's
# per-mail predictions are written to OUT/test-predictions (a paired
# comparison of two runs: tools/bench.sh spam-precision).
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
  --dedup_near --near_threshold 0.8 --report "$out/extract-report.json" > /dev/null
echo "finetune_spam: $(wc -l < "$out/spam.jsonl") messages -> $out/spam.jsonl"
# Exact check (no MinHash): every pair of messages, 5-word shingles as the
# cleaner makes them (split at spaces, tabs and newlines; ASCII lower-cased),
# all-pairs with a prefix filter; none may reach Jaccard 0.8.
/usr/bin/python3 - "$out/spam.jsonl" 0.8 <<'PY'
import collections, json, math, sys
path, thr = sys.argv[1], float(sys.argv[2])
docs = [json.loads(l) for l in open(path, encoding="utf-8")]
def shingles(text, k=5):
    w = [x.encode().lower() for x in text.replace("\t", " ").replace("\n", " ").split(" ") if x]
    return {tuple(w)} if 0 < len(w) <= k else {tuple(w[i:i + k]) for i in range(len(w) - k + 1)}
sets = [shingles(d["text"]) for d in docs]
freq = collections.Counter(s for ss in sets for s in ss)
index, pairs = collections.defaultdict(list), []
for i, ss in enumerate(sets):
    order = sorted(ss, key=lambda s: (freq[s], s))
    prefix = order[:len(order) - math.ceil(thr * len(order)) + 1]
    for j in {j for s in prefix for j in index[s]}:
        inter = len(ss & sets[j])
        if inter / (len(ss) + len(sets[j]) - inter) >= thr:
            pairs.append((docs[j]["id"], docs[i]["id"]))
    for s in prefix:
        index[s].append(i)
print(f"finetune_spam: exact check: {len(pairs)} pairs of the {len(docs)} messages "
      f"with shingle Jaccard >= {thr}")
sys.exit(1 if pairs else 0)
PY

port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export BERTPS_COORDINATOR="127.0.0.1:$port"
"$bin/server/coordinator/bertps_coordinator" --port "$port" --metrics_port 0 > "$out/coordinator.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 200); do  # until it listens
  grep -q listening "$out/coordinator.log" 2>/dev/null && break
  sleep 0.05
done
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
${NO_SHUFFLE:+no_shuffle: true}
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
${NO_SHUFFLE:+no_shuffle: true}
$init_line
optimizer { learning_rate: ${CLS_LR:-2e-4} warmup_steps: 60 }
precision: ${PRECISION:-F32}
checkpoint { dir: "$out/classify-ckpt" every_steps: 150 }
eval { data: "$out/records/dev-*.tfrecord" }
EOF2
run "$out/classify.pbtxt"
cat "$out/classify.pbtxt.status"
"$ctl" plot "$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$out/classify.pbtxt.json")" -o "$out/loss.svg" > /dev/null || true

# The held-out test split, once, on the final checkpoint.
cat > "$out/test.pbtxt" <<EOF2
name: "spam-tiny-test"
task: EVAL
model: "tiny"
label_names: "ham" label_names: "spam"
num_labels: 2
data: "$out/records/test-*.tfrecord"
batch_size: 32
eval_checkpoint: "$out/classify-ckpt"
eval { predictions_dir: "$out/test-predictions" }
EOF2
run "$out/test.pbtxt"
cat "$out/test.pbtxt.status"
/usr/bin/python3 - "$out/classify.pbtxt.json" "$out/test.pbtxt.json" <<'PY'
import json, sys
st = json.load(open(sys.argv[1]))
dev = st["evals"][-1]
test = json.load(open(sys.argv[2]))["evals"][-1]
ran = (int(st["end_time_ms"]) - int(st["start_time_ms"])) / 1000
print(json.dumps({"state": st["state"], "precision": st["spec"].get("precision", "F32"),
                  "dev_accuracy": round(dev["accuracy"], 4),
                  "test_accuracy": round(test["accuracy"], 4),
                  "macro_f1": round(test["macro_f1"], 4),
                  "test_examples": int(test["examples"]),
                  "test_examples_with_a_near_duplicate_in_train": 0,
                  "confusion_true_x_pred": [int(x) for x in test["stats"]["confusion"]],
                  "checkpoint_step": int(test["step"]),
                  "steps": int(st["progress"]["total_steps"]), "train_seconds": ran}))
PY
