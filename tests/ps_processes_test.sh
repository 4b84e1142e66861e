#!/usr/bin/env bash
# Real processes over 127.0.0.1: two bertps_server shards and two
# bertps_worker train workers run a small BSP job (2 x batch 8, dropout on);
# worker 0 checkpoints and exports; the exported model equals what
# bert_local train (one process, batch 16, the same seed) ends with; the
# shards stop cleanly on SIGTERM.
set -euo pipefail
BERT_LOCAL="$1"; SERVER="$2"; WORKER="$3"
source "$(dirname "$0")/process_lib.sh"
init_work ps

cat > "$work/config.json" <<'JSON'
{"vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 2,
 "num_attention_heads": 2, "intermediate_size": 64,
 "max_position_embeddings": 128, "hidden_act": "gelu"}
JSON
"$BERT_LOCAL" synthetic-data --config "$work/config.json" --out "$work/data" --steps 64

ports=($(/usr/bin/python3 -c '
import socket
ss=[socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1",0))
print(" ".join(str(s.getsockname()[1]) for s in ss))'))
peers="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}"
for s in 0 1; do
  "$SERVER" --port "${ports[$s]}" --shard $s --num_shards 2 --peers "$peers" \
      --config "$work/config.json" --workers 2 --lr 1e-3 --total_steps 20 \
      > "$work/server$s.log" 2>&1 &
  pids+=($!)
done
for w in 0 1; do
  extra=()
  [ $w = 0 ] && extra=(--checkpoint_dir "$work/ckpt" --checkpoint_every 10 \
                       --export_path "$work/final.safetensors")
  "$WORKER" --role=train --ps "$peers" --worker_index $w --num_workers 2 \
      --data "$work/data/*.tfrecord" --config "$work/config.json" --batch 8 \
      --steps 20 --log_every 5 --rpc_timeout_s 60 "${extra[@]}" \
      > "$work/worker$w.log" 2>&1 &
  wpids+=($!)
done
for p in "${wpids[@]}"; do
  if ! wait "$p"; then
    echo "a worker failed:"; cat "$work"/worker*.log "$work"/server*.log; exit 1
  fi
done
cat "$work/worker0.log"
first=$(grep '"step":5,' "$work/worker0.log" | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
last=$(grep '"step":20,' "$work/worker0.log" | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
/usr/bin/python3 -c "import sys; f,l=$first,$last; sys.exit(0 if l < f else 1)" \
  || { echo "loss did not go down: $first -> $last"; exit 1; }
test -s "$work/final.safetensors" || { echo "no export"; exit 1; }
# The same training in one process: same init and dropout seed (12345),
# optimizer, schedule and data order.
"$BERT_LOCAL" train --config "$work/config.json" --data "$work/data/*.tfrecord" \
    --steps 20 --batch 16 --lr 1e-3 --seed 12345 --log_every 20 \
    --out "$work/local.safetensors" > "$work/local.log" 2>&1 || fail "bert_local train"
worst=$(max_relative_difference "$work/final.safetensors" "$work/local.safetensors") ||
    fail "compare with bert_local"
echo "2 workers x 8 on 2 shards vs bert_local train x 16: worst relative difference $worst"
/usr/bin/python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < 1e-5 else 1)" "$worst" ||
    fail "the job's model differs from bert_local's: $worst"
test -s "$work/ckpt/ckpt-20/manifest.json" || { echo "no checkpoint"; exit 1; }
grep -q ckpt-20 "$work/ckpt/LATEST"
for p in "${pids[@]}"; do kill -TERM "$p"; done
for p in "${pids[@]}"; do
  wait "$p" || { echo "a shard did not exit cleanly"; cat "$work"/server*.log; exit 1; }
done
pids=()
echo "processes: job finished, loss $first -> $last, shards stopped on SIGTERM"
echo PASS
