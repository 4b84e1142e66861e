#!/usr/bin/env bash
# The main job on an embedded default: a local cluster on loopback (the
# coordinator, 2 parameter-server shards, 2 train workers, a preprocess and
# an eval worker), preprocessing jobs that turn raw text into BERT instances,
# a BERT-Tiny pretraining job submitted with bertpsctl, its progress bar,
# eval rounds on held-out data (every 100 steps and at the end), final
# metrics and the loss plot. Every process is
# shut down at the end, also on Ctrl-C. The last line is one JSON object.
#
# Data: Debian package descriptions (tools/get_data.sh corpus_small) and the
# bert-base-uncased vocabulary, turned into BERT's TFRecord instances by
# PREPROCESS jobs on the preprocess worker (parts 00-02 train, part 03 held
# out for evaluation).
#
# Environment: STEPS (default 200), OUT (default out/quickstart).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh

steps="${STEPS:-200}"
out="${OUT:-out/quickstart}"
source tools/local_cluster.sh
trap stop_all EXIT
trap 'echo; echo "quickstart: interrupted, stopping the cluster"; exit 130' INT TERM

echo "quickstart: building"
bazel build //server/coordinator:bertps_coordinator //server/ps:bertps_server \
  //worker:bertps_worker //tools:bert_local //tools:bertpsctl 2>&1 | tail -1
bin=bazel-bin
rm -rf "$out"
mkdir -p "$out/data"

echo "quickstart: fetching the vocabulary and a small real corpus"
tools/get_data.sh vocab corpus_small
vocab=data/vocab/bert-base-uncased-vocab.txt
corpus=data/corpus/small
start_local_cluster quickstart

# Preprocessing on the cluster: cleaning, WordPiece, MLM/NSP instances
# (seq 128, 20 masked positions), parts 00-02 for training, 03 held out.
for set in train:"part-0[0-2].txt" heldout:"part-03.txt"; do
  preprocess_text quickstart "${set%%:*}" "$(abs "$corpus")/${set#*:}" "$vocab"
done

cat > "$out/job.pbtxt" <<EOF2
name: "quickstart-bert-tiny"
task: PRETRAIN
model: "tiny"
data: "$out/data/train/pretrain-*.tfrecord"
batch_size: 16
steps: $steps
num_ps_shards: 2
num_workers: 2
consistency { mode: BSP }
optimizer { kind: "adam_weight_decay" learning_rate: 2e-3 warmup_steps: 10 }
checkpoint { dir: "$out/ckpt" every_steps: 25 }
eval { data: "$out/data/heldout/pretrain-*.tfrecord" every_steps: 100 }
export_path: "$out/bert-tiny"
vocab: "$(abs "$vocab")"
tensorboard_dir: "$out/tensorboard"
EOF2
job=$("$bin/tools/bertpsctl" submit "$out/job.pbtxt")
echo "quickstart: submitted $job ($out/job.pbtxt)"
rc=0
"$bin/tools/bertpsctl" watch "$job" || rc=$?
"$bin/tools/bertpsctl" status "$job"
"$bin/tools/bertpsctl" plot "$job" -o "$out/loss.svg"
"$bin/tools/bertpsctl" metrics "$job" --json > "$out/metrics.json"
if [ "$rc" -ne 0 ]; then
  echo "{\"job\": \"$job\", \"state\": \"FAILED\", \"logs\": \"$out\"}"
  exit 1
fi
stop_all
/usr/bin/python3 - "$job" "$out" <<'PY'
import json, sys
job, out = sys.argv[1], sys.argv[2]
m = json.load(open(out + "/metrics.json"))
evals = m.get("evals", [])
ev = {}
if evals:
    e = evals[-1]
    ev = {k: (round(e[k], 4) if isinstance(e.get(k), float) else e.get(k))
          for k in ("round", "step", "examples", "mlm_accuracy", "mlm_loss",
                    "mlm_perplexity", "nsp_accuracy")}
p = m["progress"]
hist = m.get("history", [])
print(json.dumps({
    "job": job, "state": m["state"], "data": "debian package descriptions",
    "model": "bert-tiny",
    "shards": 2, "workers": 2, "steps": p.get("step"),
    "examples_per_epoch": p.get("examples_per_epoch"),
    "first_loss": round(hist[0]["loss"], 4) if hist else None,
    "final_loss": round(p.get("loss", 0), 4),
    "examples_per_sec": round(p.get("examples_per_sec", 0), 1),
    # A worker's forward + backward per step: wall, and CPU on its compute
    # threads (wall above CPU: waiting for a core the other daemons held).
    "compute_ms": round(p.get("compute_ms", 0), 1),
    "compute_cpu_ms": round(p.get("compute_cpu_ms", 0), 1),
    "heldout_eval": ev, "plot": out + "/loss.svg", "tensorboard": out + "/tensorboard",
    "grafana_dashboard": "deploy/grafana/bertps-dashboard.json",
    "export": out + "/bert-tiny (Hugging Face model directory: config.json, "
              "model.safetensors, vocab.txt, tokenizer_config.json)"}))
PY
