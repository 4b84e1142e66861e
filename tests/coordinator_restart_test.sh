#!/usr/bin/env bash
# The coordinator keeps its jobs in SQLite (--state_db) and survives kill -9,
# real processes over 127.0.0.1: a coordinator, one parameter-server shard
# and one train daemon.
#  1. A short job finishes; a long job (checkpoints every 10 steps) runs.
#  2. The coordinator is killed with SIGKILL mid-job and started again on the
#     same port and database: the finished job is still listed SUCCEEDED; the
#     running one's members (which trained on meanwhile) register again
#     announcing what they run, are adopted, and the job goes on with the
#     same incarnation and no restart, to SUCCEEDED, with parameters equal
#     bit for bit to the same job run with no kill.
#  3. The coordinator is killed again mid-job, and so is the shard daemon: a
#     shard that nobody re-announces cannot be adopted, so the job resumes
#     from its newest checkpoint on a new shard daemon (a new incarnation: no
#     push of the old worker reaches the reinstalled shard) and its final
#     parameters equal those of a job started from that same checkpoint
#     without any kill.
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
source "$(dirname "$0")/process_lib.sh"
init_work restart
tiny_model_data "$BERT_LOCAL"
port=$(free_port)
coord="127.0.0.1:$port"
restart_coordinator() {  # restart_coordinator N: same port, same database
  start_coordinator "$COORD" "$port" "$work/coordinator-$1.log" \
    --member_timeout_s 3 --state_db "$work/state.sqlite"
}
restart_coordinator 1
"$SERVER" --coordinator "$coord" --port 0 > "$work/ps.log" 2>&1 &
ps_pid=$!; pids+=($ps_pid)
"$WORKER" --role=train --coordinator "$coord" > "$work/train.log" 2>&1 &
pids+=($!)

spec() {  # spec NAME STEPS CKPT-DIR EXPORT [RESTORE]
  tiny_spec "$1" "$2" "no_dropout: true" \
      "checkpoint { dir: \"$3\" every_steps: 10 ${5:+restore: \"$5\"} }" \
      "export_path: \"$4\""
}
spec short 3 "$work/ckpt-short" "$work/short.safetensors" > "$work/short.pbtxt"
short=$("$CTL" submit "$work/short.pbtxt") || fail "submit short"
"$CTL" watch "$short" > /dev/null 2>&1 || fail "short job"
spec long 300 "$work/ckpt-long" "$work/long.safetensors" > "$work/long.pbtxt"
long=$("$CTL" submit "$work/long.pbtxt") || fail "submit long"
wait_step() {  # wait_step JOB N
  for i in $(seq 1 600); do
    # (a transient failure of one poll is another poll, not the test's end)
    step=$("$CTL" metrics "$1" --json 2>/dev/null | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["progress"].get("step",0))' 2>/dev/null) || step=0
    [ "$step" -ge "$2" ] && return 0
    sleep 0.1
  done
  fail "no progress of $1"
}
wait_step "$long" 25
kill -9 "$coord_pid"
echo "killed the coordinator at step $step of $long"
sleep 1
restart_coordinator 2
"$CTL" watch "$long" > "$work/watch-long.out" 2>&1 || fail "long job after the restart: $(tail -3 "$work/watch-long.out")"
"$CTL" status "$short" | grep -q SUCCEEDED || fail "the finished job was lost: $("$CTL" status "$short")"
"$CTL" list | grep -q "$short" || fail "list lacks $short"
[ "$(field "$long" 's.get("incarnation", 0)')" = 1 ] || fail "the job started again: incarnation $(field "$long" 's.get("incarnation", 0)')"
[ "$(field "$long" 's.get("restarts", 0)')" = 0 ] || fail "the job restarted"
grep -q "goes on with no restart" "$work/watch-long.out" || fail "no adoption event: $(cat "$work/watch-long.out")"
echo "adopted: $(grep -o 'every shard re-announced[^"]*' "$work/watch-long.out" | head -1)"
# The same job, no kill.
spec nokill 300 "$work/ckpt-nokill" "$work/nokill.safetensors" > "$work/nokill.pbtxt"
nokill=$("$CTL" submit "$work/nokill.pbtxt") || fail "submit nokill"
"$CTL" watch "$nokill" > /dev/null 2>&1 || fail "job with no kill"
expect_same_parameters "$work/long.safetensors" "$work/nokill.safetensors" \
  "adopted after the coordinator's kill -9 vs no kill"

# 3. The coordinator and the shard daemon killed together: resumed from the
#    newest checkpoint on a new shard daemon.
spec lost 80 "$work/ckpt" "$work/lost.safetensors" > "$work/lost.pbtxt"
lost=$("$CTL" submit "$work/lost.pbtxt") || fail "submit lost"
wait_step "$lost" 25
kill -9 "$coord_pid" "$ps_pid"
# The newest complete checkpoint at the kill: the resume starts there or later
# (the job store may lag the checkpoint directory; the directory is the truth).
# (A checkpoint still being written has no manifest yet: skipped, and the
# loop's status stays 0 under pipefail.)
newest=$(ls "$work/ckpt" | sed -n 's/^ckpt-\([0-9]*\)$/\1/p' | sort -n | while read -r v; do
  if [ -f "$work/ckpt/ckpt-$v/manifest.json" ]; then echo "$v"; fi; done | tail -1)
echo "killed the coordinator and the shard at step $step, newest checkpoint ${newest:-none}"
sleep 1
restart_coordinator 3
"$SERVER" --coordinator "$coord" --port 0 > "$work/ps-2.log" 2>&1 &
pids+=($!)
"$CTL" watch "$lost" > "$work/watch-lost.out" 2>&1 || fail "lost job after the restart: $(tail -3 "$work/watch-lost.out")"
from=$(grep -o "resuming from the checkpoint of step [0-9]*" "$work/watch-lost.out" | head -1 | grep -o "[0-9]*$") \
  || fail "no resume event: $(cat "$work/watch-lost.out")"
echo "resumed from the checkpoint of step $from"
[ "$from" -ge 10 ] || fail "resumed from step $from"
[ "$from" -ge "${newest:-0}" ] || fail "resumed from step $from, older than the checkpoint of step $newest"

# The same job started from that checkpoint, no kill.
cp -r "$work/ckpt/ckpt-$from" "$work/ckpt-from"
spec again 80 "$work/ckpt-again" "$work/again.safetensors" "$work/ckpt-from/manifest.json" > "$work/again.pbtxt"
again=$("$CTL" submit "$work/again.pbtxt") || fail "submit again"
"$CTL" watch "$again" > /dev/null 2>&1 || fail "job from the checkpoint"
for i in $(seq 1 100); do [ -f "$work/again.safetensors" ] && [ -f "$work/lost.safetensors" ] && break; sleep 0.1; done
worst=$(max_relative_difference "$work/lost.safetensors" "$work/again.safetensors") \
  || fail "cannot compare the exports"
echo "resumed vs started from the same checkpoint: worst relative difference $worst"
[ "$worst" = "0.000e+00" ] || fail "resumed != restarted from the checkpoint ($worst)"
echo PASS
