# tools/bench.sh elastic (sourced by tools/bench.sh: uses its $out_dir and
# build_service_bins). Elastic jobs with real processes and real tiny
# compute (tools/elastic_run.sh): an 8-slot BSP job starts on 1 train daemon
# and grows to 2 and 4; for each, the join's cost (slots moved -> first step
# with the new members; the new daemons' start -> that step) and the steps
# per second; then a SIGTERM drain (to exit, to the first step without the
# daemon, restarts); then the same job on 8 daemons with fixed membership.
# Medians over `runs`. On one machine every daemon shares its cores, so
# throughput does not grow with daemons here: the join and drain latencies,
# the throughput of few daemons holding many slots against the fixed job
# (vs_fixed) and the memory of the daemon holding them are the figures.
#
#   tools/bench.sh elastic [runs]   (default 3)
bench_elastic() {
  local runs="${1:-3}"
  build_service_bins
  local logs=()
  for r in $(seq 1 "$runs"); do
    TEST_TMPDIR="$out_dir/elastic-$r" bash tools/elastic_run.sh "${service_bins[@]}" 8 "1 2 4" 8 \
        > "$out_dir/elastic-$r.log" 2> "$out_dir/elastic-$r.err" \
      || { tail -5 "$out_dir/elastic-$r.err"; exit 1; }
    logs+=("$out_dir/elastic-$r.log")
  done
  /usr/bin/python3 - "${logs[@]}" <<'PY' | tee "$out_dir/elastic.jsonl"
import json, statistics, sys
runs = [json.loads(open(p).read().strip().splitlines()[-1]) for p in sys.argv[1:]]
med = lambda v: statistics.median(v) if v else None
out = {"bench": "elastic", "runs": len(runs), "slots": runs[0]["slots"], "joins": []}
for i, j in enumerate(runs[0]["joins"]):
    pick = lambda k: [r["joins"][i][k] for r in runs]
    out["joins"].append({"daemons": j["daemons"],
        "slots_move_to_first_step_ms": med(pick("slots_move_to_first_step_ms")),
        "daemon_start_to_first_step_ms": med(pick("daemon_start_to_first_step_ms")),
        "steps_per_s": med(pick("steps_per_s")), "examples_per_s": med(pick("examples_per_s")),
        "first_daemon_rss_mb": med(pick("first_daemon_rss_mb"))})
for k in ("drain_sigterm_to_exit_ms", "drain_to_first_step_ms", "median_step_ms",
          "drain_longest_step_ms", "step_sample_ms"):
    out[k] = med([r[k] for r in runs if r[k] is not None])
out["restarts"] = sum(r["restarts"] for r in runs)
if out["median_step_ms"] and out["drain_longest_step_ms"]:
    out["drain_longest_vs_median"] = round(out["drain_longest_step_ms"] / out["median_step_ms"], 2)
for k in ("fixed_steps_per_s", "fixed_examples_per_s"):
    out[k] = med([r[k] for r in runs])
for j in out["joins"]:
    j["vs_fixed"] = round(j["steps_per_s"] / out["fixed_steps_per_s"], 3) if out["fixed_steps_per_s"] else None
out["join_goal_ms"] = 2000
out["joins_under_goal"] = all(j["daemon_start_to_first_step_ms"] < 2000 for j in out["joins"][1:])
print(json.dumps(out))
PY
}

# tools/bench.sh primary-drain [runs] [model] (tools/primary_drain_run.sh):
# a replicated BSP job (2 shards x replicas 2, 2 train daemons; model: the
# process tests' small BERT, or a preset such as mini) gets SIGTERM to shard
# 1's primary: the daemon's exit, the job's longest step from the signal to
# five steps after it against its median step before, and the
# restarts (0). Medians over `runs` (default 3).
bench_primary_drain() {
  local runs="${1:-3}" model="${2:-}"
  build_service_bins
  local logs=()
  for r in $(seq 1 "$runs"); do
    TEST_TMPDIR="$out_dir/primary-drain-$r" bash tools/primary_drain_run.sh "${service_bins[@]}" 2 "$model" \
        > "$out_dir/primary-drain-$r.log" 2> "$out_dir/primary-drain-$r.err" \
      || { tail -5 "$out_dir/primary-drain-$r.err"; exit 1; }
    logs+=("$out_dir/primary-drain-$r.log")
  done
  /usr/bin/python3 - "${logs[@]}" <<'PY' | tee "$out_dir/primary-drain.jsonl"
import json, statistics, sys
runs = [json.loads(open(p).read().strip().splitlines()[-1]) for p in sys.argv[1:]]
out = {"bench": "primary-drain", "runs": len(runs), "model": runs[0]["model"]}
for k in ("sigterm_to_exit_ms", "median_step_ms", "longest_step_ms", "longest_vs_median", "step_sample_ms"):
    v = [r[k] for r in runs if r[k] is not None]
    out[k] = statistics.median(v) if v else None
    out[k + "_range"] = [min(v), max(v)] if v else None
out["restarts"] = sum(r["restarts"] for r in runs)
print(json.dumps(out))
PY
}
