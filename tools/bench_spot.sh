# tools/bench.sh spot (sourced by tools/bench.sh: uses its $out_dir and
# build_service_bins). The chaos soak of an elastic BSP job with replicated
# shards (tools/spot_run.sh): drains, kills and joins of train and shard
# daemons at random for MINUTES, then the checks (SUCCEEDED, bit-equal to
# the job with no fault, every example applied once, no drain redid a step)
# and the throughput against the no-chaos run with its floor. Takes about
# twice MINUTES (the no-fault reference runs first). Exits 1 when a check or
# the floor fails.
#
#   tools/bench.sh spot [minutes] [seed]   (default 20, 1)
bench_spot() {
  local minutes="${1:-20}" seed="${2:-1}"
  build_service_bins
  TEST_TMPDIR="$out_dir/spot" bash tools/spot_run.sh "${service_bins[@]}" "$minutes" "$seed" \
      > "$out_dir/spot.log" 2> "$out_dir/spot.err" \
    || { tail -20 "$out_dir/spot.err"; tail -5 "$out_dir/spot.log"; exit 1; }
  tail -1 "$out_dir/spot.log" | tee "$out_dir/spot.jsonl"
  cp "$out_dir/spot/spot/chaos.jsonl" "$out_dir/spot-actions.jsonl" 2>/dev/null || true
  /usr/bin/python3 - "$out_dir/spot.jsonl" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read())
ok = (r["state"] == "SUCCEEDED" and r["export_bit_equal"] and r["examples"] == r["examples_expected"]
      and r["examples_applied_twice"] == 0 and r["drain_restarts"] == 0 and r["above_floor"])
print("spot:", "PASS" if ok else "FAIL", file=sys.stderr)
sys.exit(0 if ok else 1)
PY
}
