#!/usr/bin/env bash
# A job started from another job's checkpoint with a changed spec
# (docs/jobs.md "A new phase from a checkpoint"), real processes over
# 127.0.0.1. Phase 1: 2 workers x batch 8, 12 steps, checkpoints every 6.
#  A. Continued (restore_as CONTINUE, the default) from its step-6
#     checkpoint by 1 worker x batch 4 to step 16: the data position goes on
#     where phase 1's ledger ends (96 examples) in the new geometry; the job
#     SUCCEEDS with every example of [0, 96 + 10 x 4) applied once (before:
#     it trained to the end and FAILED "data accounting").
#  B. A new phase (restore_as NEW_PHASE) from phase 1's last checkpoint:
#     1 worker x batch 16, 5 steps with a schedule of its own: the step
#     count, the schedule and the ledger start at 0, the parameters are
#     phase 1's (its first loss is phase 1's last, not an untrained
#     model's), the Adam moments carried; again with reset_optimizer.
#  C. Refused: a model of another shape (the job fails naming a tensor),
#     restore_as without a restore (at submit).
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
source "$(dirname "$0")/process_lib.sh"
init_work new_phase
tiny_model_data "$BERT_LOCAL"
start_coordinator "$COORD" 0 "$work/coordinator.log"
start_ps_daemons a b
start_train_daemons 0 1
run() {  # run SPEC-FILE: submits it and waits for its end; prints the id
  local job
  job=$("$CTL" submit "$1") || fail "submit $1"
  timeout 300 "$CTL" watch "$job" > "$work/$(basename "$1").watch" 2>&1 || true
  echo "$job"
}
ledger() {  # ledger JOB: "examples twice per_epoch" of its status
  field "$1" '"%d %d" % (int(s["progress"].get("examples", 0)), int(s["progress"].get("examples_applied_twice", 0)))'
}

tiny_spec phase1 12 "num_ps_shards: 2" "num_workers: 2" \
  "checkpoint { dir: \"$work/ckpt-1\" every_steps: 6 }" \
  "export_path: \"$work/phase1.safetensors\"" > "$work/phase1.pbtxt"
p1=$(run "$work/phase1.pbtxt")
[ "$(field "$p1" 's["state"]')" = SUCCEEDED ] || fail "phase 1: $(field "$p1" 's.get("reason")')"
echo "phase 1: $(ledger "$p1") (examples, twice)"
p1_last_loss=$(field "$p1" '[h["loss"] for h in s["history"]][-1]')
p1_first_loss=$(field "$p1" '[h["loss"] for h in s["history"]][0]')

# A. Continued in another geometry.
tiny_spec continued 16 "num_ps_shards: 2" "num_workers: 1" "batch_size: 4" \
  "checkpoint { dir: \"$work/ckpt-a\" every_steps: 4 restore: \"$work/ckpt-1/ckpt-6/manifest.json\" }" \
  | sed '/^batch_size: 8$/d' > "$work/a.pbtxt"
a=$(run "$work/a.pbtxt")
state=$(field "$a" 's["state"]')
[ "$state" = SUCCEEDED ] || fail "A: $state: $(field "$a" 's.get("reason")')"
[ "$(ledger "$a")" = "136 0" ] || fail "A: ledger $(ledger "$a"), want 136 examples (96 + 10 x 4), none twice"
echo "A: continued at step 6 by 1 worker x batch 4 to step 16: SUCCEEDED, ledger $(ledger "$a")"

# B. A new phase from phase 1's last checkpoint, then the same with the
# optimizer's moments reset.
for reset in false true; do
  tiny_spec "phase2-$reset" 5 "num_ps_shards: 2" "num_workers: 1" "batch_size: 16" \
    "checkpoint { dir: \"$work/ckpt-b-$reset\" restore: \"$work/ckpt-1\" restore_as: NEW_PHASE reset_optimizer: $reset }" \
    "export_path: \"$work/phase2-$reset.safetensors\"" \
    | sed '/^batch_size: 8$/d; s/warmup_steps: 2/warmup_steps: 1/' > "$work/b-$reset.pbtxt"
  b=$(run "$work/b-$reset.pbtxt")
  state=$(field "$b" 's["state"]')
  [ "$state" = SUCCEEDED ] || fail "B ($reset): $state: $(field "$b" 's.get("reason")')"
  [ "$(field "$b" 's["progress"]["step"]')" = 5 ] || fail "B ($reset): not 5 steps"
  [ "$(ledger "$b")" = "80 0" ] || fail "B ($reset): ledger $(ledger "$b"), want 80 examples (5 x 16 from position 0)"
  [ "$(field "$b" 's["spec"]["checkpoint"]["restore"]')" = "$work/ckpt-1/ckpt-12/manifest.json" ] \
    || fail "B ($reset): the directory did not become its newest manifest"
  first=$(field "$b" '[h["loss"] for h in s["history"]][0]')
  lr=$(field "$b" '[h["learning_rate"] for h in s["history"]][0]')
  echo "B (reset_optimizer $reset): 5 steps from step 0 (first rate $lr), ledger $(ledger "$b"), first loss $first (phase 1's last $p1_last_loss)"
  # Phase 1's weights, not a fresh model's: the first loss is nearer phase
  # 1's last than its first (an untrained model's).
  /usr/bin/python3 -c "import sys; a = $first; sys.exit(0 if abs(a - $p1_last_loss) < abs(a - $p1_first_loss) else 1)" \
    || fail "B ($reset): the first loss $first is nearer phase 1's first ($p1_first_loss) than its last ($p1_last_loss): the weights did not carry over"
done
max_relative_difference "$work/phase2-false.safetensors" "$work/phase2-true.safetensors" > "$work/b-diff"
[ "$(cat "$work/b-diff")" != "0.000e+00" ] || fail "B: resetting the optimizer's moments changed nothing"

# C. Refused: another model's shape; restore_as without a restore.
sed 's/"hidden_size": 32/"hidden_size": 16/' "$work/model.json" > "$work/model16.json"
tiny_spec other 5 "num_ps_shards: 2" \
  "checkpoint { dir: \"$work/ckpt-c\" restore: \"$work/ckpt-1\" restore_as: NEW_PHASE }" \
  | sed "s|$work/model.json|$work/model16.json|" > "$work/c.pbtxt"
c=$(run "$work/c.pbtxt")
[ "$(field "$c" 's["state"]')" = FAILED ] || fail "C: a model of another shape was not refused"
echo "C: another model's shape: $(field "$c" 's.get("reason")' | cut -c1-200)"
tiny_spec bare 5 "checkpoint { dir: \"$work/ckpt-d\" restore_as: NEW_PHASE }" > "$work/d.pbtxt"
if out=$("$CTL" submit "$work/d.pbtxt" 2>&1); then fail "C: restore_as without a restore was taken"; fi
echo "C: $out"
echo PASS
