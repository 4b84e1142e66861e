#!/usr/bin/env bash
# A lost shard is found at once, with real processes over 127.0.0.1: the
# coordinator's member timeout is 60 s, yet after a kill -9 of a shard the
# train worker that could not reach it says so on its next heartbeat, the
# coordinator probes the job's shards, and the one that does not answer is
# lost within seconds: the job starts again from its newest checkpoint on the
# spare shard daemon, succeeds, and its final parameters equal, bit for bit,
# those of the same job run with no fault.
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
source "$(dirname "$0")/process_lib.sh"
init_work probe
tiny_model_data "$BERT_LOCAL"
start_coordinator "$COORD" 0 "$work/coordinator.log" --member_timeout_s 60 \
  --jobs_root "$work/jobs"
coord="$BERTPS_COORDINATOR"
start_ps_daemons a b c  # two for the job, one spare
start_train_daemons a b
spec() {  # spec NAME [CKPT EXPORT]: without them, the job's directory holds both
  tiny_spec "$1" 300 "num_ps_shards: 2" "num_workers: 2" \
      "checkpoint { ${2:+dir: \"$2\"} every_steps: 10 }" \
      "${3:+export_path: \"$3\"}"
}
spec probe "$work/ckpt" "$work/probe.safetensors" > "$work/probe.pbtxt"
job=$("$CTL" submit "$work/probe.pbtxt") || fail "submit"
for _ in $(seq 1 600); do
  [ "$(field "$job" 's.get("progress", {}).get("step", 0)')" -ge 40 ] && break
  sleep 0.1
done
victim=$(field "$job" 's["ps_addresses"][1]')
for s in a b c; do
  [ "$(cat "$work/ps-$s.address")" = "$victim" ] && victim_pid=${ps_daemon_pid[$s]}
done
[ -n "${victim_pid:-}" ] || fail "no shard daemon at $victim"
kill -9 "$victim_pid"
killed=$(date +%s%N)
for _ in $(seq 1 200); do
  [ "$(field "$job" 's.get("restarts", 0)')" -ge 1 ] && break
  sleep 0.1
done
[ "$(field "$job" 's.get("restarts", 0)')" -ge 1 ] \
  || fail "no restart within 20 s of the kill (member timeout 60 s)"
echo "shard 1 ($victim) lost $(( ($(date +%s%N) - killed) / 1000000 )) ms after its kill -9 (member timeout 60 s)"
"$CTL" watch "$job" > "$work/watch.out" 2>&1 || fail "the job failed: $(tail -3 "$work/watch.out")"
grep -q "restart 1 of 10: parameter-server shard 1 .* did not answer a probe .* could not reach the shards" "$work/watch.out" \
  || fail "no probe restart event: $(grep -i restart "$work/watch.out")"
grep -o "restart 1 of 10: .*" "$work/watch.out" | head -1 | sed 's/(member [^)]*) //' | cut -c1-200

# The same job with no fault, its outputs in its own directory
# (--jobs_root/<job id>: checkpoints/, model.safetensors, tensorboard/).
spec clean > "$work/clean.pbtxt"
clean=$("$CTL" submit "$work/clean.pbtxt") || fail "submit clean"
"$CTL" watch "$clean" > "$work/watch-clean.out" 2>&1 || fail "the clean job failed"
export="$work/jobs/$clean/model.safetensors"
for _ in $(seq 1 100); do [ -f "$export" ] && [ -f "$work/probe.safetensors" ] && break; sleep 0.1; done
ls "$work/jobs/$clean/checkpoints/ckpt-300/manifest.json" "$work/jobs/$clean"/tensorboard/events.out.tfevents.* \
  > /dev/null || fail "the job's directory lacks its checkpoints or TensorBoard files: $(ls -R "$work/jobs" | head)"
echo "job directory $work/jobs/$clean: $(ls "$work/jobs/$clean" | tr '\n' ' ')"
worst=$(max_relative_difference "$work/probe.safetensors" "$export") \
  || fail "cannot compare the exports"
echo "after the lost shard vs the same job without faults: worst relative difference $worst"
[ "$worst" = "0.000e+00" ] || fail "the parameters differ ($worst)"
echo PASS
