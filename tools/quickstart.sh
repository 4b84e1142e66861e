#!/usr/bin/env bash
# The main job on an embedded default: a local cluster on loopback (2
# parameter-server shards, 2 train workers) pretrains BERT-Tiny under BSP,
# checkpoints, exports the model as Hugging Face safetensors and evaluates it.
#
# Today the training data is synthetic (random token ids with a learnable
# pattern, from `bert_local synthetic-data`): the preprocess role that turns
# real text into BERT's TFRecord files has not landed yet (README "Status").
#
# Environment: STEPS (default 100), OUT (default out/quickstart).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh

steps="${STEPS:-100}"
out="${OUT:-out/quickstart}"
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
  bazel shutdown >/dev/null 2>&1 || true
}
trap stop_all EXIT
trap 'echo "quickstart: interrupted, stopping the cluster"; exit 130' INT TERM

echo "quickstart: building"
bazel build //server/ps:bertps_server //worker:bertps_worker //tools:bert_local \
  2>&1 | tail -1
bin=bazel-bin
rm -rf "$out"
mkdir -p "$out/data"

echo "quickstart: writing synthetic pretraining data (2 files x 256 examples, seq 128)"
"$bin/tools/bert_local" synthetic-data --config tiny --out "$out/data" --steps 256

ports=($(/usr/bin/python3 -c '
import socket
ss=[socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1",0))
print(" ".join(str(s.getsockname()[1]) for s in ss))'))
peers="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}"
echo "quickstart: starting 2 parameter-server shards on $peers"
for s in 0 1; do
  "$bin/server/ps/bertps_server" --port "${ports[$s]}" --shard $s --num_shards 2 \
      --peers "$peers" --config tiny --workers 2 --mode bsp \
      --lr 2e-3 --warmup_steps 10 --total_steps "$steps" \
      > "$out/server$s.log" 2>&1 &
  pids+=($!)
done

echo "quickstart: 2 train workers, batch 2 x 16, $steps steps (BSP)"
wpids=()
for w in 0 1; do
  extra=()
  [ $w = 0 ] && extra=(--checkpoint_dir "$out/ckpt" --checkpoint_every 20 \
                       --export_path "$out/bert-tiny.safetensors")
  "$bin/worker/bertps_worker" --role=train --ps "$peers" --worker_index $w \
      --num_workers 2 --data "$out/data/*.tfrecord" --config tiny --batch 16 \
      --steps "$steps" --log_every 10 "${extra[@]}" > "$out/worker$w.log" 2>&1 &
  wpids+=($!)
  pids+=($!)
done
tail -n +1 -f "$out/worker0.log" --pid "${wpids[0]}" | grep --line-buffered '"step"' &
for p in "${wpids[@]}"; do
  if ! wait "$p"; then
    echo "quickstart: a worker failed"; tail -5 "$out"/worker*.log "$out"/server*.log
    echo '{"state":"FAILED"}'; exit 1
  fi
done

echo "quickstart: evaluating the exported model"
eval_json=$("$bin/tools/bert_local" eval --config tiny \
    --weights "$out/bert-tiny.safetensors" --data "$out/data/*.tfrecord" --batch 32)
stop_all
last=$(grep '"step"' "$out/worker0.log" | tail -1)
/usr/bin/python3 - "$last" "$eval_json" "$out" <<'PY'
import json, sys
last, ev, out = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
print(json.dumps({"state": "SUCCEEDED", "data": "synthetic", "model": "bert-tiny",
                  "shards": 2, "workers": 2, "steps": last["step"],
                  "final_train_loss": round(last["loss"], 4),
                  "examples_per_sec": round(last["examples_per_sec"], 1),
                  "eval": ev, "export": out + "/bert-tiny.safetensors"}))
PY
