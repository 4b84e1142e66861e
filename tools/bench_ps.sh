# tools/bench.sh ps (sourced by tools/bench.sh: uses its $out_dir, $results,
# start_shards/stop_shards and bazel_shutdown). The transport (ps_transport)
# and the training step through one shard (ps_step); docs/benchmarks.md.
#
# Part 1: push/pull GB/s of a whole model through 1 and 2 shards, and raw TCP
# moving the same bytes over as many streams (kernel-default socket buffers,
# and 64 KiB ones, which are faster on loopback). Both use the congestion
# control bertps gives loopback connections (reno under the default
# --tcp_congestion=auto: not paced); raw TCP with the system's default
# (paced, where that is BBR) is reported for reference only. The shards run SGD with lr 0
# so that the transport dominates; the cost of the optimizer step is reported
# apart (optimizer_ms; kernel_*_ms: the bare update kernels and the other
# passes a shard makes over a whole gradient, one thread). The machine is
# noisy, so bertps and the peer alternate in short rounds against the same
# running shards; GB/s are medians of all repetitions, ratios of medians.
# The headline ratios are paired: inside every repetition ps_bench
# (--tcp_peer) also times a raw-TCP transfer of the same payload between the
# push and the pull, and *_ratio_paired_median is the median of the
# repetitions' ratios (the host's speed moves by several times in phases of
# seconds, so figures timed apart can differ by that much). A third raw
# transfer in each repetition copies every read out of a 256 KiB buffer
# into the destination: copy_out_ratio_paired_median is, in practice, the
# most that a transport receiving into buffers of its own (as gRPC does)
# reaches on this host.
# Each round times 6 transfers each way (PS_REPS) after 3 that are not
# (PS_WARMUP): a fresh client
# process runs its first pulls at a fraction of the speed while its heap
# grows to the transport's buffers and the HTTP/2 windows open; a worker
# pays that once, not every step.
ps_transport() {
  local cfg="$1" rounds="${PS_TRANSPORT_ROUNDS:-3}" reps="${PS_REPS:-6}" log="$out_dir/ps_logs"
  local shards r
  for shards in 1 2; do
    start_shards "$shards" "$log/transport-$cfg-$shards" --config "$cfg" \
        --optimizer sgd --lr 0 --weight_decay 0
    local ours=() tcp=() small=() sys=()
    for ((r = 0; r < rounds; r++)); do
      ours+=("$("$ps_bin"/ps_bench --config "$cfg" --ps "$ps_addrs" --tcp_peer --pull_bf16 \
                --reps "$reps" --warmup "${PS_WARMUP:-3}" --kernels="$([ "$r" = 0 ] && echo true || echo false)")")
      local bytes
      bytes=$(/usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["bytes"])' "${ours[0]}")
      tcp+=("$("$ps_bin"/tcp_peer_bench --bytes "$bytes" --streams "$shards" --reps "$reps")")
      small+=("$("$ps_bin"/tcp_peer_bench --bytes "$bytes" --streams "$shards" \
                 --reps "$reps" --sockbuf 65536)")
      sys+=("$("$ps_bin"/tcp_peer_bench --bytes "$bytes" --streams "$shards" \
               --reps "$reps" --tcp_congestion system)")
    done
    stop_shards
    /usr/bin/python3 - "$rounds" "${ours[@]}" "${tcp[@]}" "${small[@]}" "${sys[@]}" <<'PY' | tee -a "$results"
import json, statistics, sys
n = int(sys.argv[1])
runs = [json.loads(x) for x in sys.argv[2:]]
ours, tcp, small, sysdef = runs[:n], runs[n:2 * n], runs[2 * n:3 * n], runs[3 * n:]
first = ours[0]
med = statistics.median
r3 = lambda x: round(x, 3)
def gbps(key):  # pooled GB/s of every repetition of every round
    return [first["bytes"] / ms / 1e6 for o in ours for ms in o[key + "_ms"]]
line = {"bench": "ps_transport", "config": first["config"], "shards": first["shards"],
        "servers": first["servers"], "bytes": first["bytes"],
        "rounds": n, "reps": n * first["reps"]}
stats = {}
# pull_bf16: a bf16 job's pull (dense weights as bf16), GB/s of the fp32
# parameters it delivers; its speed-up is paired with each fp32 pull.
line["pull_bf16_wire_bytes"] = first["pull_bf16_wire_bytes"]
line["pull_bf16_speedup_paired_median"] = r3(med([x for o in ours for x in o["pull_bf16_speedup_paired"]]))
for k in ("push", "pull", "push_applied", "pull_bf16"):
    v = gbps(k)
    stats[k] = med(v)
    line[f"{k}_gbps_median"] = r3(med(v))
    line[f"{k}_gbps_min"] = r3(min(v))
    line[f"{k}_gbps_max"] = r3(max(v))
t = [g for x in tcp for g in x["gbps"]]
s = [g for x in small for g in x["gbps"]]
line["tcp_streams"] = tcp[0]["streams"]
# Both sides' loopback congestion control (ps_bench: the client's; the
# shards apply the same --tcp_congestion default).
line["tcp_congestion"] = tcp[0].get("tcp_congestion", "")
line["ps_tcp_congestion"] = first.get("tcp_congestion", "")
# How the client's pulls ran: on copy threads of their own (auto: shards <= cores),
# and through fixed HTTP/2 windows of pull_window_bytes (0: gRPC's, grown by probes).
line["pull_copy_thread"] = first.get("pull_copy_thread")
line["pull_window_bytes"] = first.get("pull_window_bytes")
line["tcp_gbps_median"] = r3(med(t))
line["tcp_gbps_min"] = r3(min(t))
line["tcp_gbps_max"] = r3(max(t))
line["tcp_64k_sockbuf_gbps_median"] = r3(med(s))
line["tcp_64k_sockbuf_gbps_min"] = r3(min(s))
line["tcp_64k_sockbuf_gbps_max"] = r3(max(s))
# For reference: raw TCP with the system's default congestion control,
# which may pace loopback (BBR); bertps does not use it on loopback.
d = [g for x in sysdef for g in x["gbps"]]
line["tcp_system_default_gbps_median"] = r3(med(d))
line["push_ratio_vs_tcp_system_default"] = r3(stats["push"] / med(d))
line["pull_ratio_vs_tcp_system_default"] = r3(stats["pull"] / med(d))
line["push_ratio_vs_tcp"] = r3(stats["push"] / med(t))
line["pull_ratio_vs_tcp"] = r3(stats["pull"] / med(t))
best = max(med(t), med(s))
line["push_ratio_vs_best_tcp"] = r3(stats["push"] / best)
line["pull_ratio_vs_best_tcp"] = r3(stats["pull"] / best)
line["target_ratio"] = 0.70
# Paired (the headline): ps_bench timed a raw-TCP transfer of the same
# payload (one stream per shard) between the push and the pull of every
# repetition; each repetition's ratio, pooled over the rounds. The host's
# speed moves by 2-5x in phases of seconds: figures timed apart mislead.
def quart(v):
    v = sorted(v)
    return [r3(v[len(v) // 4]), r3(med(v)), r3(v[(3 * len(v)) // 4])]
pt = [first["bytes"] / ms / 1e6 for o in ours for ms in o["tcp_ms"]]
line["paired_tcp_gbps_median"] = r3(med(pt))
line["paired_tcp_gbps_min"] = r3(min(pt))
line["paired_tcp_gbps_max"] = r3(max(pt))
for k in ("push", "pull"):
    pr = [x for o in ours for x in o[k + "_ratio_paired"]]
    line[f"{k}_ratio_paired_median"] = r3(med(pr))
    line[f"{k}_ratio_paired_quartiles"] = quart(pr)
    line[f"meets_target_{k}"] = med(pr) >= 0.70
# The ceiling: a raw transfer whose receivers copy every read out of a
# buffer of their own into the destination (ps_bench --copy_out_bytes),
# against the plain raw transfer of the same repetition: a transport that
# receives into its own buffers and copies out of them, as gRPC's callers
# must, with none of gRPC's other work. It bounds in practice what bertps's
# ratio can reach on this host; *_ratio_vs_copy_out say how near bertps is.
if "copy_out_ratio_paired" in first:
    line["copy_out_bytes"] = first["copy_out_bytes"]
    line["copy_out_gbps_median"] = r3(med(gbps("copy_out")))
    co = [x for o in ours for x in o["copy_out_ratio_paired"]]
    line["copy_out_ratio_paired_median"] = r3(med(co))
    line["copy_out_ratio_paired_quartiles"] = quart(co)
    for k in ("push", "pull"):
        v = [x for o in ours for x in o[k + "_ratio_vs_copy_out_paired"]]
        line[f"{k}_ratio_vs_copy_out_paired_median"] = r3(med(v))
line["client_minor_faults_per_push"] = round(med([o["client_minor_faults_per_push"] for o in ours]))
line["client_minor_faults_per_pull"] = round(med([o["client_minor_faults_per_pull"] for o in ours]))
# Fastest repetitions only: interference from other jobs only slows runs down,
# so the ratio of the maxima estimates the ratio on a quiet machine.
line["push_ratio_vs_tcp_fastest"] = r3(max(gbps("push")) / max(t))
line["pull_ratio_vs_tcp_fastest"] = r3(max(gbps("pull")) / max(t))
line["push_ratio_per_round"] = [r3(o["push_gbps_median"] / x["gbps_median"]) for o, x in zip(ours, tcp)]
line["pull_ratio_per_round"] = [r3(o["pull_gbps_median"] / x["gbps_median"]) for o, x in zip(ours, tcp)]
# CPU seconds per payload GB in the timed transfers (ps_bench: the client's
# process and the shards', sampled around each transfer; the raw peer's
# process around its own), medians over the rounds. Where every core is
# busy the paired ratio follows *_cpu_vs_tcp: the raw peer's CPU per GB
# over bertps's.
for k in ("push_cpu_s_per_gb", "push_client_cpu_s_per_gb", "push_shards_cpu_s_per_gb",
          "pull_cpu_s_per_gb", "pull_client_cpu_s_per_gb", "pull_shards_cpu_s_per_gb",
          "pull_bf16_cpu_s_per_gb", "tcp_cpu_s_per_gb", "push_cpu_vs_tcp", "pull_cpu_vs_tcp"):
    if k in first:
        line[k] = r3(med([o[k] for o in ours]))
line["optimizer"] = first["optimizer"]
line["optimizer_ms"] = round(med([o["optimizer_ms"] for o in ours]), 1)
for k in ("kernel_sgd_ms", "kernel_adam_weight_decay_ms", "kernel_all_finite_ms",
          "kernel_grad_squared_sum_ms", "kernel_memcpy_ms"):
    if k in first:
        line[k] = round(first[k], 1)
print(json.dumps(line))
PY
  done
}

# Part 2: one training step of 1 worker + 1 shard (processes, loopback) vs
# single-process bert_local train: batch 32, seq 128, 20 predictions, 1
# compute thread, BERT's AdamWeightDecay (lr 1e-4, decay 0.01, clip 1.0,
# linear decay over the run) on both sides. Per-step times come from the
# cumulative examples/s of each JSON log line (--log_every 1); the first
# steps of every run are dropped.
#
# The host's speed moves by 10-20% in phases of seconds, longer than a run
# is. Runs therefore go in pairs (one in-process, one distributed, back to
# back, the order swapped every round so that a drift favours neither), and
# the headline ratio is the median over rounds of each pair's ratio of
# median step times. The ratio of the pooled medians is printed too.
ps_step() {
  local cfg="$1" steps="$2" drop="$3" rounds="${PS_STEP_ROUNDS:-8}" log="$out_dir/ps_logs"
  local data="$out_dir/ps_data/$cfg"
  if [ ! -s "$data/synthetic-1.tfrecord" ]; then
    mkdir -p "$data"
    "$ps_bin"/bert_local synthetic-data --config "$cfg" --out "$data" --steps 512
  fi
  local r kind local_logs=() dist_logs=()
  for ((r = 0; r < rounds; r++)); do
    local order="local dist"
    [ $((r % 2)) -eq 1 ] && order="dist local"
    for kind in $order; do
      if [ "$kind" = local ]; then
        "$ps_bin"/bert_local train --config "$cfg" --data "$data/*.tfrecord" \
            --steps "$steps" --batch 32 --threads 1 --log_every 1 \
            --out "$log/step-$cfg.safetensors" >"$log/step-$cfg-local-$r.jsonl"
      else
        start_shards 1 "$log/step-$cfg-$r" --config "$cfg" --total_steps "$steps"
        "$ps_bin"/bertps_worker --ps "$ps_addrs" --config "$cfg" \
            --data "$data/*.tfrecord" --steps "$steps" --batch 32 --threads 1 \
            --log_every 1 >"$log/step-$cfg-dist-$r.jsonl"
        stop_shards
      fi
    done
    local_logs+=("$log/step-$cfg-local-$r.jsonl")
    dist_logs+=("$log/step-$cfg-dist-$r.jsonl")
  done
  /usr/bin/python3 - "$cfg" "$drop" "${local_logs[*]}" "${dist_logs[*]}" <<'PY' | tee -a "$results"
import json, statistics, sys
cfg, drop = sys.argv[1], int(sys.argv[2])
def steps_of(path):
    # Per-step seconds from cumulative examples/s (batch 32, start at step 0).
    lines = [json.loads(l) for l in open(path) if l.startswith("{") and "step" in l]
    lines = [l for l in lines if "examples_per_sec" in l]
    prev, out = 0.0, []
    for l in lines:
        t = l["step"] * 32 / l["examples_per_sec"]
        out.append((t - prev, l))
        prev = t
    return out[drop:]
def pooled(paths):
    per_run = [steps_of(p) for p in paths.split()]
    allsteps = [s for run in per_run for s in run]
    return per_run, allsteps
med = statistics.median
lr, la = pooled(sys.argv[3])
dr, da = pooled(sys.argv[4])
local_ms = med([t for t, _ in la]) * 1e3
dist_ms = med([t for t, _ in da]) * 1e3
r = lambda x: round(x, 1)
local_runs = [med([t for t, _ in run]) * 1e3 for run in lr]
dist_runs = [med([t for t, _ in run]) * 1e3 for run in dr]
pair = sorted(l / d for l, d in zip(local_runs, dist_runs))
quart = (statistics.quantiles(pair, n=4, method="inclusive") if len(pair) > 1
         else [pair[0]] * 3)
line = {"bench": "ps_step", "config": cfg, "batch": 32, "seq": 128, "preds": 20,
        "threads": 1, "shards": 1, "workers": 1, "runs": len(lr),
        "steps_timed_per_run": len(lr[0]),
        "ratio_inprocess_over_distributed": round(med(pair), 3),
        "target_ratio": 0.95,
        "ratio_pairs_quartiles": [round(quart[0], 3), round(quart[2], 3)],
        "ratio_pairs": [round(x, 3) for x in pair],
        "distributed_step_ms": r(dist_ms), "inprocess_step_ms": r(local_ms),
        "ratio_pooled_medians": round(local_ms / dist_ms, 3),
        "distributed_run_medians_ms": [r(x) for x in dist_runs],
        "inprocess_run_medians_ms": [r(x) for x in local_runs]}
# Fastest steps only (interference only slows steps down).
line["distributed_step_ms_min"] = r(min(t for t, _ in da) * 1e3)
line["inprocess_step_ms_min"] = r(min(t for t, _ in la) * 1e3)
line["ratio_fastest_steps"] = round(min(t for t, _ in la) / min(t for t, _ in da), 3)
parts = ("pull_ms", "compute_ms", "push_ms", "wait_ms")
for k in parts:
    line["distributed_" + k] = r(med([l[k] for _, l in da]))
    line["distributed_" + k + "_min"] = r(min(l[k] for _, l in da))
# The in-process split (bert_local train logs it): forward + backward, and
# the optimizer step the shard takes over. compute_ratio compares forward +
# backward alone, in the same pairs: below 1 when the worker's compute is
# slowed by what runs beside it (the shard, the transfers).
for k in ("compute_ms", "optimizer_ms", "read_ms"):
    if all(k in l for _, l in la):
        line["inprocess_" + k] = r(med([l[k] for _, l in la]))
if all("compute_ms" in l for _, l in la):
    cpair = sorted(med([l["compute_ms"] for _, l in a]) / med([l["compute_ms"] for _, l in b])
                   for a, b in zip(lr, dr))
    line["compute_ratio_pairs_median"] = round(med(cpair), 3)
# The rest of a step (reading the batch, the log line), per step.
line["distributed_other_ms"] = r(med([t * 1e3 - sum(l[k] for k in parts) for t, l in da]))
print(json.dumps(line))
PY
}

bench_ps() {
  local transport_cfg="${1:-base}" step_cfgs="${2:-tiny mini}"
  trap 'stop_shards; bazel_shutdown' EXIT
  bazel build -c opt //tools:ps_bench //tools:tcp_peer_bench //tools:bert_local \
      //server/ps:bertps_server //worker:bertps_worker >/dev/null 2>&1
  # Private copies: a later build with other flags (--config=asan, ...) by
  # anyone sharing this output tree would replace bazel-bin's files mid-run.
  ps_bin="$out_dir/ps_bin"
  mkdir -p "$ps_bin"
  local b
  for b in tools/ps_bench tools/tcp_peer_bench tools/bert_local \
           server/ps/bertps_server worker/bertps_worker; do
    if ldd "bazel-bin/$b" | grep -q 'libasan\|libtsan\|libubsan'; then
      echo "bench ps: bazel-bin/$b is a sanitizer build; rebuild it without --config" >&2
      return 1
    fi
    cp -f "bazel-bin/$b" "$ps_bin/"
  done
  results="$out_dir/ps.jsonl"
  : > "$results"
  mkdir -p "$out_dir/ps_logs"
  [ "$transport_cfg" = none ] || ps_transport "$transport_cfg"
  local cfg
  for cfg in $step_cfgs; do
    case "$cfg" in
      none) ;;
      tiny) ps_step tiny 20 3 ;;
      mini) ps_step mini 14 3 ;;
      *) ps_step "$cfg" 6 1 ;;
    esac
  done
}
