# tools/bench.sh failover (sourced by tools/bench.sh: uses its $out_dir and
# build_service_bins). How fast a loss is handled, with real processes:
# tests/shard_probe_test.sh (a shard's kill -9 to the job's restart, found by
# a probe rather than the member timeout) and tests/slot_takeover_test.sh (a
# train worker's kill -9 to its slot taken over, and the steps per second of
# one daemon computing two slots against two daemons), repeated.
#
#   tools/bench.sh failover [runs]   (default 3)
bench_failover() {
  local runs="${1:-3}"
  build_service_bins
  local logs=()
  for r in $(seq 1 "$runs"); do
    TEST_TMPDIR="$out_dir/failover-$r" bash tests/shard_probe_test.sh "${service_bins[@]}" \
        > "$out_dir/failover-probe-$r.log" 2>&1 || { tail -5 "$out_dir/failover-probe-$r.log"; exit 1; }
    TEST_TMPDIR="$out_dir/failover-$r" bash tests/slot_takeover_test.sh "${service_bins[@]}" \
        > "$out_dir/failover-takeover-$r.log" 2>&1 || { tail -5 "$out_dir/failover-takeover-$r.log"; exit 1; }
    logs+=("$out_dir/failover-probe-$r.log" "$out_dir/failover-takeover-$r.log")
  done
  /usr/bin/python3 - "${logs[@]}" <<'PY' | tee "$out_dir/failover.jsonl"
import json, re, statistics, sys
def grab(pattern):
    out = []
    for path in sys.argv[1:]:
        for line in open(path, errors="replace"):
            m = re.search(pattern, line)
            if m:
                out.append(float(m.group(1)))
    return out
lost = grab(r"lost (\d+) ms after its kill -9")
taken = grab(r"slot taken over (\d+) ms after the kill")
two = grab(r"two daemons: (\d+) steps/s")
one = grab(r"\((\d+) steps/s\)")
med = lambda v: statistics.median(v) if v else None
print(json.dumps({"bench": "failover", "runs": len(lost),
    "shard_kill_to_restart_ms": med(lost), "shard_kill_to_restart_ms_all": lost,
    "member_timeout_ms": 60000,
    "restart_vs_member_timeout": med(lost) / 60000 if lost else None,
    "worker_kill_to_takeover_ms": med(taken), "worker_kill_to_takeover_ms_all": taken,
    "member_timeout_plus_takeover_ms": 3000,
    "steps_per_s_two_daemons": med(two), "steps_per_s_one_daemon_two_slots": med(one),
    "one_over_two": med(one) / med(two) if one and two else None}))
PY
}

