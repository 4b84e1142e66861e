#!/usr/bin/env bash
# Distributed evaluation end to end, real processes over 127.0.0.1: a
# coordinator, a parameter-server shard, a train worker and three eval
# workers, on BERT instances made from the package-description corpus.
#  1. A pretraining job with eval every 4 steps: rounds at steps 4, 8 and 12
#     (the last is the final eval), each over the whole eval set, and each
#     equal to `bert_local eval` of the checkpoint of that step: counts
#     identical, loss sums to 1e-9 (a round that mixed versions would not
#     match: the parameters change every step).
#  2. An EVAL job of the step-8 checkpoint in 12 items with three eval
#     workers, one caught holding an item (frozen with SIGSTOP while its log
#     shows the item started, not done) and killed with SIGKILL: that item is
#     given back and redone, both survivors produce results, every example is
#     counted once, the counts identical to round step-8 (loss sums to 1e-9:
#     the GEMM library may round differently between runs).
#  3. The same EVAL job with one eval worker: the same.
set -euo pipefail
export LC_ALL=C
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
source "$(dirname "$0")/process_lib.sh"
init_work eval
if [ -z "${BERTPS_DATA_DIR:-}" ]; then
  root="$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)"
  BERTPS_DATA_DIR="$root/data"
fi
vocab="$BERTPS_DATA_DIR/vocab/bert-base-uncased-vocab.txt"
corpus="$BERTPS_DATA_DIR/corpus/small"
for f in "$vocab" "$corpus/part-00.txt" "$corpus/part-01.txt"; do
  [ -f "$f" ] || { echo "FAIL: $f is missing: run tools/get_data.sh first"; exit 1; }
done

# The first documents of two corpus files (cut at a blank line): ~100 KB of
# text each, so that five full evaluations stay quick.
first_docs() { awk -v max="$2" '{ n += length($0) + 1; print } /^$/ && n > max { exit }' "$1"; }
first_docs "$corpus/part-00.txt" 100000 > "$work/train.txt"
first_docs "$corpus/part-01.txt" 100000 > "$work/eval.txt"
common=(--vocab "$vocab" --max_seq_length 64 --max_predictions_per_seq 10 --dupe_factor 1)
"$BERT_LOCAL" create-pretraining-data "${common[@]}" --input "$work/train.txt" \
  --output "$work/train/part" --num_output_files 2 > "$work/make-train.log"
"$BERT_LOCAL" create-pretraining-data "${common[@]}" --input "$work/eval.txt" \
  --output "$work/evaldata/part" --num_output_files 3 --seed 777 > "$work/make-eval.log"

start_coordinator "$COORD" 0 "$work/coordinator.log" --member_timeout_s 4
coord="$BERTPS_COORDINATOR"
"$SERVER" --coordinator "$coord" --port 0 > "$work/ps.log" 2>&1 &
pids+=($!)
"$WORKER" --role=train --coordinator "$coord" > "$work/train.log" 2>&1 &
pids+=($!)
eval_pids=()
for i in 0 1 2; do
  "$WORKER" --role=eval --coordinator "$coord" > "$work/eval$i.log" 2>&1 &
  pids+=($!); eval_pids+=($!)
done

# 1. Training with eval rounds.
cat > "$work/train.pbtxt" <<EOF2
name: "train-with-eval"
task: PRETRAIN
model: "tiny"
data: "$work/train/*.tfrecord"
batch_size: 8
steps: 12
no_dropout: true
optimizer { learning_rate: 1e-3 warmup_steps: 2 }
checkpoint { dir: "$work/ckpt" }
eval { data: "$work/evaldata/*.tfrecord" every_steps: 4 }
EOF2
job=$("$CTL" submit "$work/train.pbtxt") || fail "submit"
"$CTL" watch "$job" > "$work/watch-train.out" 2>&1 || fail "train job: $(tail -3 "$work/watch-train.out")"
"$CTL" status "$job" --json > "$work/train-status.json"
"$CTL" status "$job" > "$work/train-status.txt"
grep -q "eval.*step-4" "$work/train-status.txt" || fail "status shows no eval: $(cat "$work/train-status.txt")"

# bert_local eval of each checkpoint, batch 8 like the job's items.
for s in 4 8 12; do
  m="$work/ckpt/ckpt-$s/manifest.json"
  [ -f "$m" ] || fail "no checkpoint at step $s"
  "$BERT_LOCAL" eval --config tiny --weights "$m" --data "$work/evaldata/*.tfrecord" \
    --batch 8 > "$work/local-$s.json" || fail "bert_local eval $s"
done
/usr/bin/python3 - "$work" <<'PY' || fail "eval rounds"
import json, sys
w = sys.argv[1]
st = json.load(open(f"{w}/train-status.json"))
assert st["state"] == "SUCCEEDED", st["state"]
rounds = st.get("evals", [])
got = [(r["round"], int(r["step"])) for r in rounds]
assert got == [("step-4", 4), ("step-8", 8), ("step-12", 12)], got
for r in rounds:
    s = r["stats"]; step = int(r["step"])
    local = json.load(open(f"{w}/local-{step}.json"))
    assert int(s["examples"]) == local["examples"], (step, s["examples"], local["examples"])
    assert int(s["mlm_correct"]) == local["mlm_correct"], (step, s, local)
    assert int(s["nsp_correct"]) == local["nsp_correct"], (step, s, local)
    assert abs(s["mlm_weight"] - local["mlm_weight"]) < 1e-9 * local["mlm_weight"]
    assert abs(s["mlm_loss_sum"] - local["mlm_loss_sum"]) < 1e-9 * local["mlm_loss_sum"], (s, local)
    assert abs(r["mlm_accuracy"] - local["mlm_accuracy"]) < 1e-12
print("rounds:", [(r["round"], round(r["mlm_accuracy"], 4), round(r["mlm_loss"], 4)) for r in rounds])
# The loss must move between rounds (one version per round, and they differ).
losses = [r["mlm_loss"] for r in rounds]
assert len(set(losses)) == 3, losses
PY

# 2. EVAL job of the step-8 checkpoint; kill an eval worker mid-item.
cat > "$work/eval.pbtxt" <<EOF2
name: "eval-ckpt-8"
task: EVAL
data: "$work/evaldata/*.tfrecord"
batch_size: 8
eval_checkpoint: "$work/ckpt/ckpt-8/manifest.json"
EOF2
cp "$work/eval.pbtxt" "$work/eval-kill.pbtxt"
echo "eval { shards: 12 }" >> "$work/eval-kill.pbtxt"  # 12 items: time to catch one
job2=$("$CTL" submit "$work/eval-kill.pbtxt") || fail "submit eval"
# Catch an eval worker while it holds an item: freeze it (SIGSTOP), and if
# its log shows an item started and not done, kill it; else let it go on.
holds() {  # holds LOG JOB: the item it started last is not done
  local last
  last=$(grep -o "$2 item [0-9]* started" "$1" | tail -1 | grep -o "item [0-9]*") || return 1
  ! grep -q "$2 $last done" "$1"
}
victim=""
for _ in $(seq 1 400); do
  for i in 0 1 2; do
    kill -STOP "${eval_pids[$i]}"
    if holds "$work/eval$i.log" "$job2"; then victim=$i; break 2; fi
    kill -CONT "${eval_pids[$i]}"
  done
  sleep 0.01
done
[ -n "$victim" ] || fail "no eval worker was caught holding an item"
held=$(grep -o "$job2 item [0-9]* started" "$work/eval$victim.log" | tail -1 | grep -o "item [0-9]*")
kill -9 "${eval_pids[$victim]}"
echo "killed eval worker $victim holding $held"
"$CTL" watch "$job2" > "$work/watch-eval.out" 2>&1 || fail "eval job: $(tail -3 "$work/watch-eval.out")"
grep -q "$held (member [^)]*) given back; it will be redone" "$work/watch-eval.out" ||
    fail "the killed worker's $held was not given back: $(grep -i "given back" "$work/watch-eval.out")"
producers=0
for i in 0 1 2; do
  [ "$i" = "$victim" ] && continue
  grep -q "$job2 item [0-9]* done" "$work/eval$i.log" && producers=$((producers + 1))
done
[ "$producers" -ge 2 ] || fail "only $producers surviving eval workers produced results"
echo "the 12 items were done by the $producers surviving workers"
"$CTL" status "$job2" --json > "$work/eval-status.json"

# 3. The same with one eval worker.
for i in 0 1 2; do
  [ "$i" = "$victim" ] || { survivor=$i; break; }
done
for i in 0 1 2; do
  [ "$i" = "$victim" ] || [ "$i" = "$survivor" ] || stop_gently "${eval_pids[$i]}" "eval worker $i"
done
job3=$("$CTL" submit "$work/eval.pbtxt") || fail "submit eval 1"
"$CTL" watch "$job3" > "$work/watch-eval1.out" 2>&1 || fail "eval job (1 worker)"
"$CTL" status "$job3" --json > "$work/eval1-status.json"
/usr/bin/python3 - "$work" <<'PY' || fail "eval jobs"
import json, sys
w = sys.argv[1]
train = json.load(open(f"{w}/train-status.json"))
r8 = [r for r in train["evals"] if r["round"] == "step-8"][0]
three = json.load(open(f"{w}/eval-status.json"))
one = json.load(open(f"{w}/eval1-status.json"))
for st in (three, one):
    assert st["state"] == "SUCCEEDED", st
    [r] = st["evals"]
    assert int(r["step"]) == 8, r["step"]
    a, b = r["stats"], r8["stats"]
    for k in ("examples", "mlm_correct", "nsp_correct", "mlm_weight"):
        assert a[k] == b[k], (k, a, b)  # counts: identical
    for k in ("mlm_loss_sum", "nsp_loss_sum"):
        assert abs(a[k] - b[k]) <= 1e-9 * abs(b[k]), (k, a, b)
print("EVAL jobs (3 workers with a kill, 1 worker) == round step-8:", r8["stats"]["examples"], "examples")
PY
echo PASS
