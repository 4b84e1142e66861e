#!/usr/bin/env bash
# Per-example predictions of classification evals, with real processes over
# 127.0.0.1: labelled text (a word decides the label) becomes classify
# records (`bert_local create-classify-data`); a CLASSIFY job (a shard, a
# train worker, two eval workers) evaluates the dev split during training
# and at its end with eval.predictions_dir set; an EVAL job of the final
# checkpoint writes its own. Each round's TSV files hold one line per dev
# example, each record once, with its true label (the records' own), a
# predicted label that is the argmax of probabilities summing to 1, and the
# round's accuracy equal to the job's reported one. A PRETRAIN spec with
# predictions_dir is refused naming the field.
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
source "$(dirname "$0")/process_lib.sh"
init_work predictions
if [ -z "${BERTPS_DATA_DIR:-}" ]; then  # the repository's data/
  BERTPS_DATA_DIR="$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)/data"
fi
vocab="$BERTPS_DATA_DIR/vocab/bert-base-uncased-vocab.txt"
[ -f "$vocab" ] || fail "no vocab at $vocab (tools/get_data.sh vocab)"
/usr/bin/python3 - "$work/labelled.jsonl" <<'PY'
import json, random, sys
rng = random.Random(7)
words = "the cat dog house tree river stone cloud paper music water light".split()
with open(sys.argv[1], "w") as f:
    for i in range(400):
        label = "yes" if i % 2 else "no"
        text = " ".join(rng.choice(words) for _ in range(12))
        # The word that tells the label is there 3 times in 4 (the rest:
        # a coin toss), so rounds are neither all right nor all wrong.
        if rng.random() < 0.75:
            text += " green" if label == "yes" else " blue"
        else:
            text += rng.choice([" green", " blue"])
        f.write(json.dumps({"id": f"doc-{i}", "label": label, "text": text}) + "\n")
PY
"$BERT_LOCAL" create-classify-data --input "$work/labelled.jsonl" --vocab "$vocab" \
  --labels no,yes --output_dir "$work/records" --max_seq_length 32 \
  --dev_fraction 0.25 --test_fraction 0 > "$work/records.json"
cat > "$work/model.json" <<'JSON'
{"vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 1,
 "num_attention_heads": 2, "intermediate_size": 64,
 "max_position_embeddings": 64, "num_labels": 2}
JSON
start_coordinator "$COORD" 0 "$work/coordinator.log"
start_ps_daemons a
start_train_daemons a
for e in 0 1; do
  "$WORKER" --role=eval --coordinator "$BERTPS_COORDINATOR" > "$work/eval$e.log" 2>&1 &
  pids+=($!)
done
cat > "$work/classify.pbtxt" <<EOF2
name: "predict"
task: CLASSIFY
model: "$work/model.json"
num_labels: 2
label_names: "no" label_names: "yes"
data: "$work/records/train.tfrecord"
batch_size: 16
steps: 60
optimizer { learning_rate: 5e-3 warmup_steps: 5 }
checkpoint { dir: "$work/ckpt" every_steps: 30 }
eval { data: "$work/records/dev.tfrecord" every_steps: 30 shards: 2
       predictions_dir: "$work/predictions" }
EOF2
job=$("$CTL" submit "$work/classify.pbtxt") || fail "submit"
"$CTL" watch "$job" > "$work/watch.out" 2>&1 || fail "the job failed: $(tail -3 "$work/watch.out")"
"$CTL" status "$job" --json > "$work/status.json"
# The EVAL job of the final checkpoint.
cat > "$work/eval.pbtxt" <<EOF2
name: "predict-eval"
task: EVAL
num_labels: 2
data: "$work/records/dev.tfrecord"
batch_size: 16
eval_checkpoint: "$work/ckpt"
output_dir: "$work/eval-out"
eval { predictions_dir: "$work/predictions-eval" }
EOF2
ejob=$("$CTL" submit "$work/eval.pbtxt") || fail "submit eval"
"$CTL" watch "$ejob" > "$work/watch-eval.out" 2>&1 || fail "the eval job failed: $(tail -3 "$work/watch-eval.out")"
"$CTL" status "$ejob" --json > "$work/eval-status.json"
/usr/bin/python3 - "$work" <<'PY' || fail "predictions"
import collections, glob, json, os, sys
work = sys.argv[1]
dev = os.path.join(work, "records/dev.tfrecord")
# The dev records' labels, read straight from the TFRecord file.
def records(path):
    out = []
    b = open(path, "rb").read()
    i = 0
    while i < len(b):
        n = int.from_bytes(b[i:i + 8], "little")
        out.append(b[i + 12:i + 12 + n])
        i += 12 + n + 4
    return out
def label_of(rec):
    # tf.train.Example: find the "label_ids" feature's int64 value.
    k = rec.find(b"label_ids")
    assert k >= 0, "no label_ids"
    j = rec.find(b"\x1a", k)  # int64_list
    j += 2
    assert rec[j] == 0x0a
    j += 2
    v, shift = 0, 0
    while True:
        c = rec[j]; j += 1
        v |= (c & 0x7f) << shift; shift += 7
        if not c & 0x80: break
    return v
labels = [label_of(r) for r in records(dev)]
def check(pattern, status_path, name):
    rounds = collections.defaultdict(list)
    for path in sorted(glob.glob(pattern)):
        lines = open(path).read().splitlines()
        assert lines[0] == "file\trecord\tlabel\tpredicted\tp_0\tp_1", lines[0]
        base = os.path.basename(path)  # predictions-ROUND-ITEM.tsv
        rnd = base[len("predictions-"):base.rindex("-")]
        rounds[rnd] += [l.split("\t") for l in lines[1:]]
    evals = json.load(open(status_path))["evals"]
    assert rounds, "no predictions files"
    for rnd, rows in rounds.items():
        recs = sorted(int(r[1]) for r in rows)
        assert recs == list(range(len(labels))), f"{name} {rnd}: records {recs[:5]}... of {len(labels)}"
        correct = 0
        for f, rec, lab, pred, p0, p1 in rows:
            assert f == dev, f
            assert int(lab) == labels[int(rec)], (rec, lab)
            p = [float(p0), float(p1)]
            assert abs(sum(p) - 1) < 1e-4, p
            assert int(pred) == (1 if p[1] > p[0] else 0), (pred, p)
            correct += int(lab) == int(pred)
        acc = correct / len(rows)
        reported = [e for e in evals if e["round"] == rnd]
        assert reported, (rnd, [e["round"] for e in evals])
        assert abs(reported[-1]["accuracy"] - acc) < 1e-9, (rnd, acc, reported[-1]["accuracy"])
        print(f"{name} round {rnd}: {len(rows)} dev examples, accuracy {acc:.4f} (reported {reported[-1]['accuracy']:.4f})")
check(os.path.join(work, "predictions/predictions-*.tsv"), os.path.join(work, "status.json"), "classify")
check(os.path.join(work, "predictions-eval/predictions-*.tsv"), os.path.join(work, "eval-status.json"), "eval job")
PY
# Refused: predictions of a PRETRAIN job.
sed -e 's/task: CLASSIFY/task: PRETRAIN/' "$work/classify.pbtxt" > "$work/bad.pbtxt"
if "$CTL" submit "$work/bad.pbtxt" > "$work/bad.out" 2>&1; then fail "a PRETRAIN job with predictions_dir was accepted"; fi
grep -q "eval.predictions_dir" "$work/bad.out" || fail "the refusal does not name the field: $(cat "$work/bad.out")"
echo "refused: $(head -1 "$work/bad.out" | cut -c1-160)"
echo PASS
