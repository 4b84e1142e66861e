# tools/bench.sh scale (sourced by tools/bench.sh: uses its $out_dir).
# BSP step time of simulated-compute workers against real shard processes,
# each on an emulated host of tools/netsim.sh (root), beside the step-time
# model of docs/scaling.md. The link rate the model uses is measured by the
# emulator before the sweep (netsim measure) and then frozen.
#
#   tools/bench.sh scale [workers] [shards] [rate] [config] [compute_ms]
#   (default: "1 2 4 8 16" "1 2 4" 2500mbit mini 200)
#
# Two constants, each measured before the sweep and frozen: the link rate
# the emulator delivers (one TCP stream through two shaped links), and how
# many bytes per second the host's CPUs move through bertps and the
# emulator when the links are not the limit (4 workers, 2 shards, links of
# 100gbit, 1 ms of compute).
bench_scale() {
  local workers_list="${1:-1 2 4 8 16}" shards_list="${2:-1 2 4}" rate="${3:-2500mbit}"
  local config="${4:-mini}" compute_ms="${5:-200}"
  # SCALE_STEPS steps per point, timed from the progress line at step
  # SCALE_FROM (default 12 and the first line, step 2) to the last;
  # SCALE_WORKER_FLAGS: more flags for every worker (e.g.
  # --pull_window_bytes=0). SCALE_PRECISION=bf16: workers with bf16
  # products, whose pulls carry the dense layers' weights as bf16 (the
  # model's pull bytes follow).
  local steps="${SCALE_STEPS:-12}" log_every=2 batch=8
  [ "$(id -u)" -eq 0 ] || { echo "bench scale: needs root (tools/netsim.sh)" >&2; return 1; }
  bazel build -c opt //server/ps:bertps_server //worker:bertps_worker \
      //tools:bert_local //tools:plot_series >/dev/null
  local bin="$out_dir/scale_bin" dir="$out_dir/scale"
  rm -rf "$dir"; mkdir -p "$bin" "$dir/data"
  cp -f bazel-bin/server/ps/bertps_server bazel-bin/worker/bertps_worker \
      bazel-bin/tools/bert_local "$bin/"
  "$bin"/bert_local synthetic-data --config "$config" --out "$dir/data" \
      --steps 40 >/dev/null
  local netsim
  netsim="$(dirname "${BASH_SOURCE[0]}")/netsim.sh"
  "$netsim" down
  # The link as delivered (frozen before the sweep).
  "$netsim" up 2 "$rate"
  "$netsim" measure 0 1 300 > "$dir/link.json"
  "$netsim" down
  # The host's CPU bound (frozen before the sweep too).
  local results="$dir/calibration.jsonl"
  : > "$results"
  local sweep_rate="$rate" sweep_compute="$compute_ms"
  rate=100gbit compute_ms=1
  scale_point 2 4 || return 1
  rate="$sweep_rate" compute_ms="$sweep_compute"
  /usr/bin/python3 - "$results" > "$dir/host.json" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).readline())
# Each step moves 2 * W * P bytes (a pull and a push per worker).
print(json.dumps({"host_bytes_per_s": 2 * r["workers"] * r["param_bytes"] / r["step_s"],
                  "from": r}))
PY
  results="$out_dir/scale.jsonl"
  : > "$results"
  local s w
  for s in $shards_list; do
    for w in $workers_list; do
      scale_point "$s" "$w" || return 1
    done
  done
  /usr/bin/python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
one = {r["shards"]: r["examples_per_s"] for r in rows if r["workers"] == 1}
print("shards workers measured_s predicted_s ratio bound efficiency")
for r in rows:
    eff = r["examples_per_s"] / (r["workers"] * one[r["shards"]]) if r["shards"] in one else None
    print(r["shards"], r["workers"], r["step_s"], r["predicted_step_s"],
          r["measured_over_predicted"], r["bound"].replace(" ", "-"),
          round(eff, 3) if eff else "-")
PY
  scale_plot "$results" "$dir/plot.json" && bazel-bin/tools/plot_series "$dir/plot.json"       "$out_dir/scale.svg" && echo "plot: $out_dir/scale.svg"
}

# The plot's input (tools/plot_series): per shard count, the measured step
# times as points and the model's as a line, against the workers.
scale_plot() {
  /usr/bin/python3 - "$1" > "$2" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]
series = []
for k, S in enumerate(sorted({r["shards"] for r in rows})):
    pts = sorted((r["workers"], r["step_s"], r["predicted_step_s"]) for r in rows if r["shards"] == S)
    c = colors[k % len(colors)]
    series.append({"name": f"S={S} model", "x": [p[0] for p in pts], "y": [p[2] for p in pts],
                   "style": "line", "color": c})
    series.append({"name": f"S={S} measured", "x": [p[0] for p in pts], "y": [p[1] for p in pts],
                   "style": "points", "color": c})
r0 = rows[0]
print(json.dumps({"title": f"BSP step time, {r0['config']}, {r0['link']} links, "
                           f"{r0['compute_ms']:.0f} ms compute: measured vs model",
                  "x_label": "workers", "left_label": "step time (s)", "series": series}))
PY
}

# One point: S shards on hosts 0..S-1, W workers on hosts S..S+W-1.
scale_point() {
  local s="$1" w="$2" hosts=$(($1 + $2))
  local pdir="$dir/s$s-w$w"
  mkdir -p "$pdir"
  "$netsim" run "$hosts" "$rate" -- bash -c '
    set -e
    s='"$s"' w='"$w"' bin='"$bin"' pdir='"$pdir"' dir='"$dir"'
    peers=""
    for ((i = 0; i < s; i++)); do
      peers+="${peers:+,}$($NETSIM addr $i):7500"
    done
    for ((i = 0; i < s; i++)); do
      $NETSIM exec $i "$bin/bertps_server" --host "$($NETSIM addr $i)" \
          --port 7500 --shard $i --num_shards $s --peers "$peers" \
          --workers $w --config '"$config"' > "$pdir/shard$i.log" 2>&1 &
    done
    sleep 1
    # The counters of every link and the host CPU, 20 times a second.
    $NETSIM trace "$pdir/links.jsonl" 50 &
    tracer=$!
    pids=()
    for ((i = 0; i < w; i++)); do
      $NETSIM exec $((s + i)) "$bin/bertps_worker" --ps "$peers" \
          --worker_index $i --num_workers $w --config '"$config"' \
          --data "$dir/data/*.tfrecord" --batch '"$batch"' --steps '"$steps"' \
          --simulate_compute_ms '"$compute_ms"' --log_every '"$log_every"' \
          --precision '"${SCALE_PRECISION:-fp32}"' \
          '"${SCALE_WORKER_FLAGS:-}"' > "$pdir/worker$i.log" 2>&1 &
      pids+=("$!")
    done
    for p in "${pids[@]}"; do wait "$p"; done
    kill "$tracer"
  ' || { echo "bench scale: S=$s W=$w failed; logs in $pdir" >&2; return 1; }
  /usr/bin/python3 - "$pdir" "$s" "$w" "$dir/link.json" "$config" "$compute_ms" \
      "$batch" "$rate" "$dir/host.json" >> "$results" <<'PY'
import glob, json, os, re, sys
pdir, S, W, link, config, T, batch, rate, host = sys.argv[1:10]
S, W, T, batch = int(S), int(W), float(T) / 1e3, int(batch)
# Seconds between the first and the last progress line of each worker (the
# first steps start the streams), from examples_per_sec = steps*batch/secs.
per = []
for f in glob.glob(pdir + "/worker*.log"):
    pts = []
    for line in open(f):
        if line.startswith("{") and '"examples_per_sec"' in line:
            j = json.loads(line)
            pts.append((j["step"], j["step"] * batch / j["examples_per_sec"]))
    pts = [p for p in pts if p[0] >= int(os.environ.get("SCALE_FROM", "0"))] or pts
    (s0, t0), (s1, t1) = pts[0], pts[-1]
    per.append((t1 - t0) / (s1 - s0))
step_s = sorted(per)[len(per) // 2]
# The model (docs/scaling.md): parameters P bytes; each worker pulls and
# pushes P per step; each shard's link carries W*P/S each way; the host's
# CPUs move C bytes/s in all (calibration). Link rate R as measured by the
# emulator. A transfer takes the longest of the three; exposed per step:
# the pull, a third of the compute (forward), then backward's two thirds
# or the push, whichever is longer.
presets = {"tiny": (2, 128, 512), "mini": (4, 256, 1024), "small": (4, 512, 2048),
           "medium": (8, 512, 2048), "base": (12, 768, 3072)}
L, H, I = presets[config]
V = 30522
params = ((V + 512 + 2) * H + 2 * H
          + L * (4 * (H * H + H) + 2 * H * I + I + H + 4 * H)
          + (H * H + H) + (H * H + H + 2 * H + V) + (2 * H + 2))
P = 4 * params
# bf16 products: the pulls carry the dense layers' weights in 2 bytes.
dense = L * (4 * H * H + 2 * H * I) + 2 * H * H + 2 * H
bf16 = os.environ.get("SCALE_PRECISION", "fp32").lower() in ("bf16", "bfloat16")
Pp = P - 2 * dense if bf16 else P
# What the workers' pulls carried (their log lines): a worker without
# native bf16 computes, and pulls, fp32; the model then takes theirs.
logged = []
for f in glob.glob(pdir + "/worker*.log"):
    for line in open(f):
        if line.startswith("{") and '"pull_bytes"' in line:
            logged.append(json.loads(line)["pull_bytes"])
if logged and abs(sorted(logged)[len(logged) // 2] - Pp) > 0.01 * P:
    print(f"bench scale: the workers pulled {sorted(logged)[len(logged) // 2]:.0f} bytes "
          f"per step, not {Pp}: the model takes theirs", file=sys.stderr)
    Pp = sorted(logged)[len(logged) // 2]
R = json.load(open(link))["gbit_s"] * 1e9 / 8
C = json.load(open(host))["host_bytes_per_s"] if os.path.exists(host) else float("inf")
t_link = max(P / R, W * P / (S * R), W * P / C)
t_pull = max(Pp / R, W * Pp / (S * R), W * Pp / C)
predicted = t_pull + T / 3 + max(2 * T / 3, t_link)
bound = ("host CPU" if W * P / C >= max(P / R, W * P / (S * R))
         else "shard link" if W > S else "worker link")
# What the shard links carried (tools/netsim.sh trace), over the middle 60%
# of the time they carried anything: the mean share of the link's rate each
# way (down: into the shard, the pushes; up: out of it, the pulls), the share
# of 50 ms slots in which a link ran below a fifth of its rate, and how busy
# the machine's CPUs were.
trace = [json.loads(l) for l in open(os.path.join(pdir, "links.jsonl")) if l.strip()]
links = {}
if len(trace) > 10:
    moved = [sum(t["down"][i] + t["up"][i] for i in range(S)) for t in trace]
    on = [k for k in range(1, len(trace)) if moved[k] > moved[k - 1]]
    a, b = on[0], on[-1]
    a, b = a + (b - a) // 5, b - (b - a) // 5
    dt = trace[b]["t"] - trace[a]["t"]
    m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", rate)
    cap = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8
    for way in ("down", "up"):
        used = [(trace[b][way][i] - trace[a][way][i]) / dt / cap for i in range(S)]
        slow = [sum(1 for k in range(a + 1, b + 1)
                    if (trace[k][way][i] - trace[k - 1][way][i]) / (trace[k]["t"] - trace[k - 1]["t"]) < cap / 5)
                / (b - a) for i in range(S)]
        links[way] = {"used": round(sum(used) / S, 3), "slow_slots": round(sum(slow) / S, 3)}
    links["host_cpu_busy"] = round((trace[b]["busy_cpu_s"] - trace[a]["busy_cpu_s"]) / dt / os.cpu_count(), 3)
print(json.dumps({"bench": "scale", "config": config, "param_bytes": P,
    "pull_bytes": Pp, "precision": "bf16" if bf16 else "fp32",
    "shards": S, "workers": W, "link": rate, "link_delivered_gbit_s": round(R * 8 / 1e9, 3),
    "compute_ms": T * 1e3, "step_s": round(step_s, 3),
    "predicted_step_s": round(predicted, 3),
    "measured_over_predicted": round(step_s / predicted, 3),
    "bound": bound,
    "host_gb_per_s": round(C / 1e9, 3) if C != float("inf") else None,
    "examples_per_s": round(W * batch / step_s, 1), "shard_links": links}))
PY
}
