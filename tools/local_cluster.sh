# The local cluster of tools/quickstart.sh and tools/pretrain_two_phase.sh,
# sourced by them: a coordinator on loopback, 2 parameter-server shards, 2
# train workers, a preprocess and an eval worker, every one logging under
# $out and shut down by stop_all (on exit too). Needs `bin` (bazel-bin) and
# `out`; sets BERTPS_COORDINATOR.

pids=()
stop_all() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
  bazel shutdown >/dev/null 2>&1 || true
}

# abs PATH: the absolute path of PATH (its directory must exist).
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }

# start_local_cluster NAME: the daemons, once the coordinator listens.
start_local_cluster() {
  # The coordinator takes any free port and writes its address once it
  # listens: nothing is submitted before that, and no other process can
  # race it for a port picked in advance.
  "$bin/server/coordinator/bertps_coordinator" --port 0 --metrics_port 0 \
      --address_file "$out/coordinator.address" > "$out/coordinator.log" 2>&1 &
  local coordinator_pid=$!
  pids+=($coordinator_pid)
  for _ in $(seq 1 600); do
    [ -s "$out/coordinator.address" ] && break
    kill -0 "$coordinator_pid" 2>/dev/null || break
    sleep 0.05
  done
  if [ ! -s "$out/coordinator.address" ]; then
    echo "$1: the coordinator did not start:"; tail -5 "$out/coordinator.log"; exit 1
  fi
  export BERTPS_COORDINATOR="$(cat "$out/coordinator.address")"
  echo "$1: coordinator on $BERTPS_COORDINATOR, 2 parameter-server shards, 2 train workers, a preprocess and an eval worker"
  local s w role
  for s in 0 1; do
    "$bin/server/ps/bertps_server" --coordinator "$BERTPS_COORDINATOR" --port 0 \
        --metrics_port 0 > "$out/ps$s.log" 2>&1 &
    pids+=($!)
  done
  for w in 0 1; do
    "$bin/worker/bertps_worker" --role=train --coordinator "$BERTPS_COORDINATOR" \
        --metrics_port 0 > "$out/worker$w.log" 2>&1 &
    pids+=($!)
  done
  for role in preprocess eval; do
    "$bin/worker/bertps_worker" --role=$role --coordinator "$BERTPS_COORDINATOR" \
        > "$out/$role.log" 2>&1 &
    pids+=($!)
  done
}

# preprocess_text NAME TAG GLOB VOCAB [PREPROCESS-FIELDS]: a PREPROCESS job
# on the cluster (cleaning, WordPiece, MLM/NSP instances) from the text
# files GLOB into $out/data/TAG; waits for it and prints its items line.
preprocess_text() {
  local name=$1 tag=$2 glob=$3 vocab=$4 more=${5:-} pjob
  cat > "$out/preprocess-$tag.pbtxt" <<EOF2
name: "$name-$tag-data"
task: PREPROCESS
data: "$glob"
output_dir: "$(abs "$out")/data/$tag"
preprocess { vocab: "$(abs "$vocab")" dupe_factor: 1 shards: 4 clean { dedup_exact: true } $more }
EOF2
  pjob=$("$bin/tools/bertpsctl" submit "$out/preprocess-$tag.pbtxt")
  "$bin/tools/bertpsctl" watch "$pjob" > /dev/null || { echo "$name: preprocessing failed"; "$bin/tools/bertpsctl" status "$pjob"; exit 1; }
  "$bin/tools/bertpsctl" status "$pjob" | grep items
}
