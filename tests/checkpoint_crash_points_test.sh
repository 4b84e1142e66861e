#!/usr/bin/env bash
# Asynchronous checkpoints with real processes over 127.0.0.1 (2 shard
# daemons, 1 train worker, BSP, a checkpoint every 10 of 30 steps):
#  - the background checkpoint of a step is bit-equal to the synchronous one
#    (--checkpoint_sync) of the same step, and both runs end with the same
#    model;
#  - a process killed (kill -9 from inside: BERTPS_CRASH_AT) at each stage of
#    the write of step 20's checkpoint -- shard 1 with its state copied, its
#    file written but not fsynced, fsynced but not renamed, renamed but not
#    in a manifest; worker 0 with every file durable and the manifest not
#    written -- leaves step 10's checkpoint the newest valid one: LATEST
#    names it, ckpt-20 has no manifest, and `bertpsctl export` of the
#    directory verifies and exports step 10.
set -euo pipefail
BERT_LOCAL="$1"; SERVER="$2"; WORKER="$3"; CTL="$4"
source "$(dirname "$0")/process_lib.sh"
init_work ckptcrash

cat > "$work/config.json" <<'JSON'
{"vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 2,
 "num_attention_heads": 2, "intermediate_size": 64,
 "max_position_embeddings": 128, "hidden_act": "gelu"}
JSON
"$BERT_LOCAL" synthetic-data --config "$work/config.json" --out "$work/data" --steps 40

# run NAME SHARD_ENV WORKER_ENV [WORKER FLAGS...]: returns the worker's exit.
run() {
  local name="$1" shard_env="$2" worker_env="$3"; shift 3
  local p0 p1 peers rc=0
  p0=$(free_port); p1=$(free_port)
  peers="127.0.0.1:$p0,127.0.0.1:$p1"
  local ports=("$p0" "$p1") mine=()
  for s in 0 1; do
    local e=()
    [ "$s" = 1 ] && [ -n "$shard_env" ] && e=("$shard_env")
    env "${e[@]}" "$SERVER" --port "${ports[$s]}" --shard $s --num_shards 2 \
        --peers "$peers" --config "$work/config.json" --workers 1 --lr 1e-3 \
        --total_steps 30 --optimizer adam_weight_decay \
        > "$work/$name-server$s.log" 2>&1 &
    pids+=($!); mine+=($!)
  done
  local we=()
  [ -n "$worker_env" ] && we=("$worker_env")
  env "${we[@]}" "$WORKER" --role=train --ps "$peers" --worker_index 0 \
      --num_workers 1 --data "$work/data/*.tfrecord" \
      --config "$work/config.json" --batch 8 --steps 30 --log_every 10 \
      --rpc_timeout_s 60 --checkpoint_dir "$work/$name" --checkpoint_every 10 \
      "$@" > "$work/$name-worker.log" 2>&1 || rc=$?
  for p in "${mine[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait "${mine[@]}" 2>/dev/null || true
  return $rc
}

run async "" "" --export_path "$work/async.safetensors" \
  || fail "the asynchronous run failed"
run sync "" "" --checkpoint_sync --export_path "$work/sync.safetensors" \
  || fail "the synchronous run failed"
for v in 10 20 30; do
  for s in 0 1; do
    f="ckpt-$v/shard-$s-of-2.safetensors"
    cmp -s "$work/async/$f" "$work/sync/$f" \
      || fail "step $v shard $s: the background checkpoint differs from the synchronous one"
  done
  test -s "$work/async/ckpt-$v/manifest.json" || fail "async: no manifest of step $v"
done
grep -q ckpt-30 "$work/async/LATEST" || fail "async: LATEST is not step 30"
worst=$(max_relative_difference "$work/async.safetensors" "$work/sync.safetensors")
[ "$worst" = "0.000e+00" ] || fail "async vs sync: the models differ ($worst)"
grep -q '"copy_ms"' "$work/async-worker.log" || fail "async: no completion line"
echo "async vs sync: checkpoints of steps 10, 20, 30 byte-equal, models equal"

for point in ckpt_copy ckpt_written ckpt_synced ckpt_renamed ckpt_manifest; do
  if [ "$point" = ckpt_manifest ]; then
    run "$point" "" "BERTPS_CRASH_AT=$point:20:0" && fail "$point: the worker did not die"
    log="$work/$point-worker.log"
  else
    run "$point" "BERTPS_CRASH_AT=$point:20:1" "" || true
    log="$work/$point-server1.log"
  fi
  grep -q "crash point $point of version 20 hit" "$log" \
    || fail "$point: the crash point was not hit"
  grep -qx "ckpt-10" "$work/$point/LATEST" \
    || fail "$point: LATEST is $(cat "$work/$point/LATEST"), not ckpt-10"
  [ ! -e "$work/$point/ckpt-20/manifest.json" ] \
    || fail "$point: step 20 has a manifest"
  out=$("$CTL" export "$work/$point" "$work/$point-export" 2>&1) \
    || fail "$point: export of the newest checkpoint failed: $out"
  case "$out" in
    "exported step 10 "*) ;;
    *) fail "$point: $out" ;;
  esac
  left=$(ls "$work/$point/ckpt-20" 2>/dev/null | tr '\n' ' ')
  echo "$point: killed there; the newest valid checkpoint is step 10 (ckpt-20 holds: ${left:-nothing})"
done
echo PASS
