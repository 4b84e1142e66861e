#!/usr/bin/env bash
# BERT's two pretraining phases (google-research/bert: 90% of the steps at
# sequence 128, then 10% at 512 from phase 1's checkpoint with a warm-up and
# decay of their own), end to end on the quick start's cluster and data:
#  1. preprocess the corpus twice, at max_seq_length 128 and 512;
#  2. phase 1: BERT-Tiny at 128 for PHASE1 steps, eval at its end;
#  3. phase 2: a new job at 512 for PHASE2 steps, checkpoint.restore_as
#     NEW_PHASE from phase 1's checkpoint directory (parameters and Adam's
#     moments carry over; steps, schedule, data position start at 0), eval
#     at its end;
#  4. prints one JSON line with both phases' first and last loss and eval.
# docs/jobs.md "A new phase from a checkpoint".
#
# Environment: PHASE1 (default 90), PHASE2 (default 10), OUT (default
# out/two_phase).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh

phase1="${PHASE1:-90}"
phase2="${PHASE2:-10}"
out="${OUT:-out/two_phase}"
source tools/local_cluster.sh
trap stop_all EXIT
trap 'echo; echo "two_phase: interrupted, stopping the cluster"; exit 130' INT TERM

echo "two_phase: building"
bazel build //server/coordinator:bertps_coordinator //server/ps:bertps_server \
  //worker:bertps_worker //tools:bertpsctl 2>&1 | tail -1
bin=bazel-bin
rm -rf "$out"
mkdir -p "$out/data"
tools/get_data.sh vocab corpus_small
vocab=data/vocab/bert-base-uncased-vocab.txt
corpus=data/corpus/small
start_local_cluster two_phase

# Parts 00-02 train, 03 held out; each at 128 and at 512 (up to 76 masked
# positions at 512, as BERT's phase 2).
for seq in 128:20 512:76; do
  len=${seq%%:*}; preds=${seq#*:}
  fields="max_seq_length: $len max_predictions_per_seq: $preds"
  preprocess_text two_phase "train-$len" "$(abs "$corpus")/part-0[0-2].txt" "$vocab" "$fields"
  preprocess_text two_phase "heldout-$len" "$(abs "$corpus")/part-03.txt" "$vocab" "$fields"
done

spec() {  # spec NAME SEQ STEPS BATCH WARMUP LR [CHECKPOINT-FIELDS]
  cat <<EOF2
name: "$1"
task: PRETRAIN
model: "tiny"
data: "$(abs "$out")/data/train-$2/pretrain-*.tfrecord"
batch_size: $4
steps: $3
num_ps_shards: 2
num_workers: 2
optimizer { kind: "adam_weight_decay" learning_rate: $6 warmup_steps: $5 }
checkpoint { dir: "$(abs "$out")/$1/ckpt" every_steps: 25 ${7:-} }
eval { data: "$(abs "$out")/data/heldout-$2/pretrain-*.tfrecord" }
export_path: "$(abs "$out")/$1/bert-tiny"
vocab: "$(abs "$vocab")"
EOF2
}
run() {  # run NAME: submits $out/NAME.pbtxt, follows it; prints the id
  local job rc=0
  job=$("$bin/tools/bertpsctl" submit "$out/$1.pbtxt")
  echo "two_phase: $1 is $job" >&2
  "$bin/tools/bertpsctl" watch "$job" >&2 || rc=$?
  "$bin/tools/bertpsctl" metrics "$job" --json > "$out/$1.metrics.json"
  [ "$rc" -eq 0 ] || { "$bin/tools/bertpsctl" status "$job" >&2; exit 1; }
  echo "$job"
}
spec phase1 128 "$phase1" 16 10 2e-3 > "$out/phase1.pbtxt"
run phase1 > /dev/null
spec phase2 512 "$phase2" 4 2 1e-3 \
  "restore: \"$(abs "$out")/phase1/ckpt\" restore_as: NEW_PHASE" > "$out/phase2.pbtxt"
run phase2 > /dev/null
stop_all
/usr/bin/python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def phase(name):
    m = json.load(open("%s/%s.metrics.json" % (out, name)))
    hist = m.get("history", [])
    ev = (m.get("evals") or [{}])[-1]
    return {"job": m.get("id"), "state": m["state"], "steps": m["progress"].get("step"),
            "first_loss": round(hist[0]["loss"], 4) if hist else None,
            "last_loss": round(hist[-1]["loss"], 4) if hist else None,
            "eval_mlm_accuracy": round(ev.get("mlm_accuracy", 0), 4),
            "eval_mlm_loss": round(ev.get("mlm_loss", 0), 4),
            "eval_nsp_accuracy": round(ev.get("nsp_accuracy", 0), 4)}
print(json.dumps({"phase1": dict(phase("phase1"), seq=128),
                  "phase2": dict(phase("phase2"), seq=512,
                                 restore_as="NEW_PHASE")}))
PY
