# tools/bench.sh checkpoint (sourced by tools/bench.sh: uses its $out_dir,
# preset_json, free_addrs, start_shards/stop_shards and $cpu_model).
# What a checkpoint costs the step, synchronous (the step waits for the
# whole write) vs asynchronous (the step waits for the shards' copy of their
# state; the files are written in the background), with real processes over
# 127.0.0.1: 2 shard daemons (Adam: parameters + 2 moments per parameter)
# and 1 train worker whose compute is simulated (a wait of a BERT step's
# length: the step is the service's own pull, push, update and checkpoint,
# with the compute's time but not its CPU). Each model and mode runs on the
# local disk and on a throttled one (bertps_server --checkpoint_write_mbps:
# a rate-limited file system behind the project's file seam, for a network
# volume; the rate is per shard daemon). Per run: the step's blocking time
# at each checkpoint (blocked_ms: the call, which also waits for the step's
# update to be applied; cut_extra_ms: what the cut adds to its step against
# a step without one; the final checkpoint, always waited for, excluded),
# the shards' copy, the write's wall time and GB/s, the steps' time without
# a checkpoint and during a background write; the disk's raw write rate
# (dd, fsync) in the same run.
#
#   tools/bench.sh checkpoint [runs] [models] [throttle MB/s]
#                                              (default: 3 "mini base" 200)
# checkpoint_bins: the shard, worker and bert_local binaries (opt), copied
# to $ps_bin so that a rebuild meanwhile does not change them.
checkpoint_bins() {
  bazel build -c opt //server/ps:bertps_server //worker:bertps_worker \
      //tools:bert_local >/dev/null 2>&1
  ps_bin="$out_dir/checkpoint_bin"
  rm -rf "$ps_bin"; mkdir -p "$ps_bin"
  cp bazel-bin/server/ps/bertps_server bazel-bin/worker/bertps_worker \
     bazel-bin/tools/bert_local "$ps_bin/"
}

bench_checkpoint() {
  local runs="${1:-3}" models="${2:-mini base}" throttle="${3:-200}"
  if [ "${CHECKPOINT_SUMMARY_ONLY:-0}" = 1 ]; then
    # Only the summary of the runs in $out_dir/checkpoint-runs.jsonl.
    checkpoint_summary "$(cat "$out_dir/checkpoint-dd.txt")" "$throttle"
    return
  fi
  checkpoint_bins
  local scratch="$out_dir/checkpoint-scratch"
  rm -rf "$scratch"; mkdir -p "$scratch"
  rm -f "$out_dir/checkpoint-runs.jsonl"
  # The disk's raw rate: 512 MiB written and fsynced.
  local dd_mbps
  dd_mbps=$(dd if=/dev/zero of="$scratch/dd" bs=1M count=512 conv=fsync 2>&1 |
            /usr/bin/python3 -c '
import re, sys
t = sys.stdin.read()
m = re.search(r"(\d+) bytes .* copied, ([0-9.]+) s", t)
print("%.0f" % (int(m.group(1)) / float(m.group(2)) / 1e6))')
  rm -f "$scratch/dd"
  echo "{\"bench\": \"checkpoint\", \"disk_raw_write_mbps\": $dd_mbps}"
  echo "$dd_mbps" > "$out_dir/checkpoint-dd.txt"
  local logs=() model disk mode r
  for model in $models; do
    # Simulated compute: about a real step of batch 8 x 128 on these cores.
    local compute_ms steps every
    case "$model" in
      tiny) compute_ms=60; steps=40; every=10 ;;
      mini) compute_ms=400; steps=30; every=10 ;;
      *) compute_ms=3000; steps=12; every=4 ;;
    esac
    preset_json "$model" > "$scratch/$model.json"
    local data="$scratch/data-$model"
    mkdir -p "$data"
    "$ps_bin"/bert_local synthetic-data --config "$scratch/$model.json" \
        --out "$data" --steps $((steps + 4)) >/dev/null
    for r in $(seq 1 "$runs"); do
      for disk in local throttled; do
        for mode in sync async; do
          local tag="$model-$disk-$mode-$r" extra=() wextra=()
          [ "$disk" = throttled ] && extra=(--checkpoint_write_mbps "$throttle")
          [ "$mode" = sync ] && wextra=(--checkpoint_sync)
          rm -rf "$scratch/ckpt"
          start_shards 2 "$scratch/$tag-ps" --config "$scratch/$model.json" \
              --total_steps "$steps" --lr 1e-4 --update_threads 1 \
              --checkpoint_dir "$scratch/ckpt" --checkpoint_every "$every" \
              "${extra[@]+"${extra[@]}"}"
          "$ps_bin"/bertps_worker --role=train --ps "$ps_addrs" \
              --config "$scratch/$model.json" --data "$data/*.tfrecord" \
              --batch 8 --steps "$steps" --simulate_compute_ms "$compute_ms" \
              --log_every 1 --checkpoint_dir "$scratch/ckpt" \
              --checkpoint_every "$every" "${wextra[@]+"${wextra[@]}"}" \
              > "$out_dir/checkpoint-$tag.log" 2> "$out_dir/checkpoint-$tag.err" \
            || { tail -5 "$out_dir/checkpoint-$tag.err"; stop_shards; exit 1; }
          local bytes
          bytes=$(du -cb "$scratch"/ckpt/ckpt-"$every"/shard-*.safetensors | tail -1 | cut -f1)
          stop_shards
          echo "{\"model\": \"$model\", \"disk\": \"$disk\", \"mode\": \"$mode\", \"run\": $r, \"steps\": $steps, \"every\": $every, \"compute_ms\": $compute_ms, \"file_bytes\": $bytes, \"log\": \"$out_dir/checkpoint-$tag.log\"}" \
            >> "$out_dir/checkpoint-runs.jsonl"
          logs+=("$out_dir/checkpoint-$tag.log")
        done
      done
    done
  done
  rm -rf "$scratch"
  checkpoint_summary "$dd_mbps" "$throttle"
}

# checkpoint_summary DD_MBPS THROTTLE: the figures of the runs listed in
# $out_dir/checkpoint-runs.jsonl.
checkpoint_summary() {
  /usr/bin/python3 - "$out_dir/checkpoint-runs.jsonl" "$1" "$2" \
      "$cpu_model" <<'PY' | tee "$out_dir/checkpoint.jsonl"
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
dd, throttle, cpu = float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
med = lambda v: round(statistics.median(v), 2) if v else None

def parse(run):
    steps, started, written = {}, [], []
    for line in open(run["log"]):
        try:
            j = json.loads(line)
        except ValueError:
            continue
        if "examples_per_sec" in j and j.get("worker", 0) == 0:
            # Time since the first step began: steps x batch / cumulative rate.
            steps[j["step"]] = j["step"] * 8 / j["examples_per_sec"] * 1e3
        elif "checkpoint_started" in j:
            started.append(j)
        elif "checkpoint" in j and "blocked_ms" in j:
            written.append(j)  # a synchronous write (and the final one)
        elif "checkpoint" in j and "write_ms" in j:
            written.append(j)  # a background write completed
    last = run["steps"]
    step_ms = {s: steps[s] - steps[s - 1] for s in steps if s - 1 in steps}
    cuts = [v for v in range(run["every"], last, run["every"])]
    out = {"cut_step_ms": [step_ms[c] for c in cuts if c in step_ms],
           "during_write_step_ms": [step_ms[c + 1] for c in cuts if c + 1 in step_ms],
           "plain_step_ms": [ms for s, ms in step_ms.items()
                             if s not in cuts and s - 1 not in cuts and s != last and s > 2]}
    if run["mode"] == "async":
        out["blocked_ms"] = [j["blocked_ms"] for j in started if j["checkpoint_started"] < last]
        out["copy_ms"] = [j["copy_ms"] for j in started if j["checkpoint_started"] < last]
        out["write_ms"] = [j["write_ms"] for j in written
                           if "write_ms" in j and j["version"] < last]
    else:
        out["blocked_ms"] = [j["blocked_ms"] for j in written if j["version"] < last]
        out["write_ms"] = list(out["blocked_ms"])
    return out

groups = {}
for run in runs:
    groups.setdefault((run["model"], run["disk"], run["mode"]), []).append((run, parse(run)))
rows = []
for (model, disk, mode), items in groups.items():
    pool = lambda k: [x for _, p in items for x in p.get(k, [])]
    run0 = items[0][0]
    row = {"bench": "checkpoint", "cpu": cpu, "model": model, "disk": disk,
           # Throttled: each of the 2 shard daemons writes at `throttle`.
           "disk_mbps": dd if disk == "local" else min(dd, 2 * throttle), "mode": mode,
           "runs": len(items), "simulated_compute_ms": run0["compute_ms"],
           "checkpoint_bytes": run0["file_bytes"],
           "step_ms": med(pool("plain_step_ms")),
           "blocked_ms": med(pool("blocked_ms")),
           "copy_ms": med(pool("copy_ms")),
           "write_ms": med(pool("write_ms")),
           "step_during_write_ms": med(pool("during_write_step_ms")),
           "cut_step_ms": med(pool("cut_step_ms"))}
    # What the cut adds to its step: the call also waits for the step's
    # update to be applied, which the next pull would wait for anyway.
    if row["cut_step_ms"] is not None and row["step_ms"]:
        row["cut_extra_ms"] = round(row["cut_step_ms"] - row["step_ms"], 2)
        row["cut_extra_pct_of_step"] = round(100 * row["cut_extra_ms"] / row["step_ms"], 2)
    # All a checkpoint costs the steps: the cut's step and the next one
    # (during which a background copy and write run) against two plain steps.
    if None not in (row["cut_step_ms"], row["step_during_write_ms"]) and row["step_ms"]:
        row["checkpoint_cost_ms"] = round(row["cut_step_ms"] + row["step_during_write_ms"]
                                          - 2 * row["step_ms"], 2)
        row["checkpoint_cost_pct_of_step"] = round(
            100 * row["checkpoint_cost_ms"] / row["step_ms"], 2)
    if row["write_ms"]:
        row["write_gb_per_s"] = round(row["checkpoint_bytes"] / row["write_ms"] / 1e6, 3)
        row["write_vs_disk"] = round(row["write_gb_per_s"] * 1e3 / row["disk_mbps"], 3)
    if row["step_ms"] and row["blocked_ms"] is not None:
        row["blocked_pct_of_step"] = round(100 * row["blocked_ms"] / row["step_ms"], 2)
    rows.append(row)
for row in rows:
    print(json.dumps(row))
for (model, disk) in sorted({(r["model"], r["disk"]) for r in rows}):
    s = next((r for r in rows if (r["model"], r["disk"], r["mode"]) == (model, disk, "sync")), None)
    a = next((r for r in rows if (r["model"], r["disk"], r["mode"]) == (model, disk, "async")), None)
    if s and a:
        print(json.dumps({"bench": "checkpoint_ratio", "model": model, "disk": disk,
                          "sync_blocked_ms": s["blocked_ms"], "async_blocked_ms": a["blocked_ms"],
                          # The steps' cost of one checkpoint (at least 1 ms).
                          "sync_over_async_cost": round(
                              max(s.get("checkpoint_cost_ms") or 1, 1)
                              / max(a.get("checkpoint_cost_ms") or 1, 1), 1),
                          "async_blocked_pct_of_step": a.get("blocked_pct_of_step"),
                          "sync_cut_extra_ms": s.get("cut_extra_ms"),
                          "async_cut_extra_ms": a.get("cut_extra_ms"),
                          "async_cut_extra_pct_of_step": a.get("cut_extra_pct_of_step"),
                          "sync_cost_ms": s.get("checkpoint_cost_ms"),
                          "async_cost_ms": a.get("checkpoint_cost_ms"),
                          "async_cost_pct_of_step": a.get("checkpoint_cost_pct_of_step"),
                          "goal_under_5pct": (a.get("cut_extra_pct_of_step") or 100) < 5
                                             and (a.get("checkpoint_cost_pct_of_step") or 100) < 5}))
PY
}

# tools/bench.sh checkpoint-throughput [minutes] [model] [every]
# Training throughput with a checkpoint every `every` steps over `minutes`
# per mode, synchronous vs in the background, with the same processes as
# above on the local disk (default: 10 mini 10): examples/s over the run
# (the worker's cumulative rate at its last progress line) and the ratio.
bench_checkpoint_throughput() {
  local minutes="${1:-10}" model="${2:-mini}" every="${3:-10}"
  checkpoint_bins
  local scratch="$out_dir/checkpoint-scratch"
  rm -rf "$scratch"; mkdir -p "$scratch"
  local compute_ms
  case "$model" in
    tiny) compute_ms=60 ;;
    mini) compute_ms=400 ;;
    *) compute_ms=3000 ;;
  esac
  # More steps than the minutes hold: the run is stopped at the time.
  local steps=$((minutes * 60 * 1000 / compute_ms * 2 + 100))
  preset_json "$model" > "$scratch/$model.json"
  mkdir -p "$scratch/data"
  "$ps_bin"/bert_local synthetic-data --config "$scratch/$model.json" \
      --out "$scratch/data" --steps 64 >/dev/null
  local mode
  for mode in sync async; do
    local wextra=()
    [ "$mode" = sync ] && wextra=(--checkpoint_sync)
    rm -rf "$scratch/ckpt"
    start_shards 2 "$scratch/tp-$mode-ps" --config "$scratch/$model.json" \
        --total_steps "$steps" --lr 1e-4 --update_threads 1 \
        --checkpoint_dir "$scratch/ckpt" --checkpoint_every "$every"
    timeout --signal=KILL "$((minutes * 60))" "$ps_bin"/bertps_worker \
        --role=train --ps "$ps_addrs" --config "$scratch/$model.json" \
        --data "$scratch/data/*.tfrecord" --batch 8 --steps "$steps" \
        --simulate_compute_ms "$compute_ms" --log_every 10 \
        --checkpoint_dir "$scratch/ckpt" --checkpoint_every "$every" \
        "${wextra[@]+"${wextra[@]}"}" \
        > "$out_dir/checkpoint-tp-$mode.log" 2> "$out_dir/checkpoint-tp-$mode.err" || true
    stop_shards
  done
  rm -rf "$scratch"
  /usr/bin/python3 - "$out_dir" "$minutes" "$model" "$every" "$compute_ms" "$cpu_model" <<'PY' | tee "$out_dir/checkpoint-throughput.jsonl"
import json, sys
out, minutes, model, every, compute_ms, cpu = sys.argv[1:7]
rate, steps = {}, {}
for mode in ("sync", "async"):
    last = None
    for line in open("%s/checkpoint-tp-%s.log" % (out, mode)):
        try:
            j = json.loads(line)
        except ValueError:
            continue
        if "examples_per_sec" in j:
            last = j
    rate[mode], steps[mode] = last["examples_per_sec"], last["step"]
print(json.dumps({"bench": "checkpoint_throughput", "cpu": cpu, "model": model,
                  "minutes": int(minutes), "checkpoint_every": int(every),
                  "simulated_compute_ms": int(compute_ms),
                  "sync_examples_per_s": round(rate["sync"], 2),
                  "async_examples_per_s": round(rate["async"], 2),
                  "sync_steps": steps["sync"], "async_steps": steps["async"],
                  "async_over_sync": round(rate["async"] / rate["sync"], 3)}))
PY
}
