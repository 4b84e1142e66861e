# tools/bench.sh soak scale (sourced by tools/bench.sh: uses its $out_dir).
# The whole service at cluster scale on tools/netsim.sh's emulated hosts
# (root): a coordinator, 2 x S shard daemons (replicas: 2) and a spare,
# W simulated-compute train daemons, each on its own host, one BSP job for
# M minutes. Every 10 s: the job's step and state, and every daemon's
# threads, memory (RSS; Pss for the workers, whose tiled buffers RSS
# overcounts) and CPU time. Three runs:
#   ref     2 minutes with W_REF = 8 workers (threads independent of W),
#   steady  M minutes with W workers, nothing killed,
#   kills   M minutes with W workers: at 40% a worker is killed with
#           kill -9 (a surviving worker takes its slot on; the daemon is
#           started again 45 s later and the slot moves to it), at 50% the
#           primary of shard 1 (its backup is promoted; the spare becomes
#           its new backup; a new spare starts 45 s later).
# One JSON line per run in $out_dir/soak_scale.jsonl, with the verdicts.
#
#   tools/bench.sh soak scale [minutes] [workers] [shards] [rate] [runs]
#   (default: 10 64 8 250mbit "ref steady kills")
bench_soak_scale() {
  local minutes="${1:-10}" workers="${2:-64}" shards="${3:-8}" rate="${4:-250mbit}"
  local runs="${5:-ref steady kills}"
  [ "$(id -u)" -eq 0 ] || { echo "bench soak scale: needs root (tools/netsim.sh)" >&2; return 1; }
  bazel build -c opt //server/coordinator:bertps_coordinator //server/ps:bertps_server \
      //worker:bertps_worker //tools:bertpsctl //tools:bert_local >/dev/null
  local dir="$out_dir/soak_scale" bin="$out_dir/soak_scale/bin"
  rm -rf "$dir"; mkdir -p "$bin" "$dir/data"
  cp -f bazel-bin/server/coordinator/bertps_coordinator bazel-bin/server/ps/bertps_server \
      bazel-bin/worker/bertps_worker bazel-bin/tools/bertpsctl bazel-bin/tools/bert_local "$bin/"
  "$bin"/bert_local synthetic-data --config tiny --out "$dir/data" --steps 40 >/dev/null
  local netsim
  netsim="$(readlink -f "$(dirname "${BASH_SOURCE[0]}")/netsim.sh")"
  "$netsim" down
  write_soak_scale_driver "$dir/driver.py"
  local results="$out_dir/soak_scale.jsonl" run w m
  : > "$results"
  for run in $runs; do
    w="$workers" m="$minutes"
    [ "$run" = ref ] && w=8 m=2
    # Host 0: the coordinator; 1 .. 2S+1: shard daemons; then the workers.
    "$netsim" run $((2 + 2 * shards + w)) "$rate" -- /usr/bin/python3 "$dir/driver.py" \
        "$run" "$m" "$w" "$shards" "$rate" "$bin" "$dir" >> "$results" ||
      { echo "bench soak scale: run $run failed; logs in $dir/$run" >&2; return 1; }
    tail -1 "$results"
  done
  # Threads per daemon against the reference run's (8 workers).
  /usr/bin/python3 - "$results" <<'PY2'
import json, sys
rows = {r["run"]: r for r in map(json.loads, open(sys.argv[1])) if "run" in r}
ref = rows.get("ref")
for name, r in rows.items():
    if ref is None or name == "ref":
        continue
    d = {k: r[f"threads_{k}_min_median_max"][1] - ref[f"threads_{k}_min_median_max"][1]
         for k in ("shard", "worker")}
    print(json.dumps({"bench": "soak_scale", "run": name, "workers": r["workers"],
                      "ref_workers": ref["workers"],
                      "median_threads_minus_ref": d,
                      "threads_independent_of_workers": all(abs(v) <= 4 for v in d.values())}))
PY2
}

write_soak_scale_driver() {
  cat > "$1" <<'PY'
import json, os, re, signal, statistics, subprocess, sys, time
run, minutes, W, S, rate, bin_dir, top = sys.argv[1:8]
minutes, W, S = float(minutes), int(W), int(S)
netsim = os.environ["NETSIM"]
d = os.path.join(top, run)
os.makedirs(d, exist_ok=True)
addr = lambda i: subprocess.check_output([netsim, "addr", str(i)], text=True).strip()
coord = addr(0) + ":7400"
tick = os.sysconf("SC_CLK_TCK")
t0 = time.monotonic()
procs = {}   # name -> (Popen, role, host)
started = {}  # name -> seconds since the start of the run

def role_of(name):
    return re.match(r"[a-z]+", name).group(0)

def start(name, host, argv):
    log = open(os.path.join(d, name + ".log"), "w")
    started[name] = time.monotonic() - t0
    procs[name] = (subprocess.Popen([netsim, "exec", str(host)] + argv, stdout=log,
                                    stderr=subprocess.STDOUT), role_of(name), host)

def shard(name, host):
    start(name, host, [bin_dir + "/bertps_server", "--coordinator", coord,
                       "--host", addr(host), "--port", "7500"])

def worker(name, host):
    start(name, host, [bin_dir + "/bertps_worker", "--role=train", "--coordinator", coord,
                       "--threads", "1", "--simulate_compute_ms", "200"])

def ctl(*args):
    out = subprocess.run([netsim, "exec", "0", bin_dir + "/bertpsctl", "--coordinator", coord]
                         + list(args), capture_output=True, text=True, timeout=60)
    return out.stdout

start("coordinator", 0, [bin_dir + "/bertps_coordinator", "--host", addr(0), "--port", "7400",
                         "--metrics_port", "-1"])
time.sleep(1)
for i in range(2 * S + 1):
    shard(f"shard{i}", 1 + i)
for i in range(W):
    worker(f"worker{i}", 2 + 2 * S + i)
spec = os.path.join(d, "job.pbtxt")
open(spec, "w").write(f"""name: "soak-scale-{run}"
task: PRETRAIN
model: "tiny"
data: "{top}/data/*.tfrecord"
batch_size: 8
steps: 100000000
num_ps_shards: {S}
num_workers: {W}
replicas: 2
optimizer {{ learning_rate: 1e-4 warmup_steps: 100 }}
""")
job = ""
for _ in range(300):
    job = ctl("submit", spec).strip()
    if job:
        break
    time.sleep(0.2)
if not job:
    print(json.dumps({"bench": "soak_scale", "run": run, "error": "cannot submit"}))
    sys.exit(1)

def status():
    try:
        return json.loads(ctl("status", job, "--json"))
    except (ValueError, subprocess.TimeoutExpired):
        return None

def proc_figures(pid, role):
    try:
        st = open(f"/proc/{pid}/status").read()
        threads = int(re.search(r"^Threads:\s+(\d+)", st, re.M).group(1))
        rss = int(re.search(r"^VmRSS:\s+(\d+)", st, re.M).group(1))
        if role == "worker":
            rss = int(re.search(r"^Pss:\s+(\d+)", open(f"/proc/{pid}/smaps_rollup").read(),
                                re.M).group(1))
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return threads, rss, (int(f[11]) + int(f[12])) / tick
    except (OSError, AttributeError):
        return None

events, samples = [], []
end = time.monotonic() + minutes * 60
plan = []   # (time, action)
if run == "kills":
    plan = [(0.4 * minutes * 60, "kill worker"), (0.4 * minutes * 60 + 45, "start worker"),
            (0.5 * minutes * 60, "kill primary"), (0.5 * minutes * 60 + 45, "start spare")]
killed = set()
victim_host = None  # the killed primary's host, where the new spare starts
while time.monotonic() < end:
    now = time.monotonic() - t0
    while plan and plan[0][0] <= now:
        _, action = plan.pop(0)
        if action == "kill worker":
            p, _, host = procs["worker5"]
            p.send_signal(signal.SIGKILL); p.wait(); killed.add("worker5")
            events.append({"t": round(now, 1), "event": "kill -9 worker5"})
        elif action == "start worker":
            worker("worker5-r", procs["worker5"][2])
            events.append({"t": round(now, 1), "event": "worker5 started again"})
        elif action == "kill primary":
            victim = None
            for name, (p, role, host) in procs.items():
                if role == "shard" and name not in killed:
                    if re.search(rf"serving shard 1 of job {job} ",
                                 open(os.path.join(d, name + ".log"), errors="replace").read()):
                        victim = name
            if victim is None:
                events.append({"t": round(now, 1), "event": "no primary of shard 1 found"})
                continue
            p, _, host = procs[victim]
            p.send_signal(signal.SIGKILL); p.wait(); killed.add(victim)
            events.append({"t": round(now, 1), "event": f"kill -9 {victim} (primary of shard 1)"})
            victim_host = host
        elif action == "start spare" and victim_host is not None:
            shard("shard-r", victim_host)
            events.append({"t": round(now, 1), "event": "a new spare shard daemon started"})
    s = status()
    row = {"t": round(now, 1)}
    if s:
        row.update(step=int(s.get("progress", {}).get("step", 0)), state=s.get("state"),
                   restarts=s.get("restarts", 0), failovers=s.get("failovers", 0),
                   backups_added=s.get("backups_added", 0),
                   shared_slots=sum(1 for x in s.get("slots", []) if x.get("shared")),
                   free_slots=sum(1 for x in s.get("slots", []) if not x.get("member")),
                   waiting=s.get("waiting", ""))
    row["procs"] = {}
    for name, (p, role, host) in procs.items():
        if name in killed:
            continue
        f = proc_figures(p.pid, role)
        if f:
            row["procs"][name] = f
    samples.append(row)
    time.sleep(max(0.0, 10 - (time.monotonic() - t0 - now)))
with open(os.path.join(d, "samples.jsonl"), "w") as f:
    for r in samples:
        f.write(json.dumps(r) + "\n")
final = status() or {}
ctl("cancel", job)
# Every daemon still running must leave on SIGTERM with status 0.
rcs = {}
for name, (p, role, host) in procs.items():
    if name not in killed:
        p.send_signal(signal.SIGTERM)
for name, (p, role, host) in procs.items():
    if name not in killed:
        try:
            rcs[name] = p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill(); rcs[name] = "hung"

# Verdicts. Steps per minute (the first minute holds the start).
rows = [r for r in samples if "step" in r]
per_min = []
for m in range(int(minutes)):
    inside = [r for r in rows if m * 60 <= r["t"] <= (m + 1) * 60]
    if len(inside) >= 2:
        per_min.append(inside[-1]["step"] - inside[0]["step"])
steady = per_min[1:] if len(per_min) > 2 else per_min
# The longest time the step did not move (from the 10 s samples, after the
# first step): a stalled worker holds every BSP step.
longest, since = 0.0, None
for a, b in zip(rows, rows[1:]):
    if since is None:
        if a["step"] < 1:
            continue
        since = a["t"]
    if b["step"] != a["step"]:
        since = b["t"]
    else:
        longest = max(longest, b["t"] - since)
# Threads and memory of each role from the middle of the run to its end
# (after the kills' recovery in the "kills" run: the last 30%).
cut = rows[-1]["t"] * (0.7 if run == "kills" else 0.5)
late = [r for r in samples if r["t"] >= cut]
def series(name, k):
    return [r["procs"][name][k] for r in late if name in r["procs"]]
roles = ("shard", "worker", "coordinator")
threads, drift, growth = ({k: [] for k in roles} for _ in range(3))
for name in procs:
    # A daemon started during the run is judged from a minute after its start.
    if name in killed or (started[name] > 30 and started[name] > cut - 60):
        continue
    th, mem = series(name, 0), series(name, 1)
    if len(mem) >= 2:
        threads[role_of(name)] += th
        drift[role_of(name)].append(max(th) - min(th))
        # Growth that counts: over 5% and over 8 MB (a small process's
        # allocator moves by a few MB).
        grew = (mem[-1] - mem[0]) / mem[0] if mem[0] else 0.0
        growth[role_of(name)].append(grew if mem[-1] - mem[0] > 8192 else min(grew, 0.0))
def span(v):
    return [min(v), statistics.median(v), max(v)] if v else None
cpu = [r["procs"]["coordinator"][2] for r in samples if "coordinator" in r["procs"]]
ts = [r["t"] for r in samples if "coordinator" in r["procs"]]
coord_cpu = (cpu[-1] - cpu[0]) / (ts[-1] - ts[0]) if len(cpu) > 1 and ts[-1] > ts[0] else None
coord_cpu_max = max(((cpu[i + 6] - cpu[i]) / (ts[i + 6] - ts[i]) for i in range(len(cpu) - 6)),
                    default=None)
mem_end = {}
for role in ("shard", "worker", "coordinator"):
    v = [r["procs"][n][1] for r in late[-1:] for n in r["procs"] if role_of(n) == role]
    mem_end[role] = round(max(v) / 1024, 1) if v else None
out = {
    "bench": "soak_scale", "run": run, "minutes": minutes, "workers": W, "shards": S,
    "replicas": 2, "shard_daemons": 2 * S + 1, "link": rate, "model": "tiny", "batch": 8,
    "simulate_compute_ms": 200, "events": events,
    "steps_total": rows[-1]["step"] if rows else 0,
    "state_at_end": final.get("state"), "restarts": final.get("restarts", 0),
    "failovers": final.get("failovers", 0), "backups_added": final.get("backups_added", 0),
    "slots_shared_at_end": sum(1 for x in final.get("slots", []) if x.get("shared")),
    "slots_shared_max": max((r.get("shared_slots", 0) for r in rows), default=0),
    "steps_per_minute": per_min,
    "steps_per_minute_median": statistics.median(steady) if steady else 0,
    "longest_without_a_step_s": round(longest, 1),
    "threads_shard_min_median_max": span(threads["shard"]),
    "threads_worker_min_median_max": span(threads["worker"]),
    "threads_coordinator_min_median_max": span(threads["coordinator"]),
    # The most any one daemon's thread count moved over the window.
    "threads_drift_max": {k: max(v) if v else None for k, v in drift.items()},
    # Relative growth over the window; below 8 MB counted as none.
    "memory_growth_max": {k: round(max(v), 4) if v else None for k, v in growth.items()},
    "memory_end_max_mb": mem_end,
    "coordinator_cpu_share_of_a_core": round(coord_cpu, 4) if coord_cpu is not None else None,
    "coordinator_cpu_share_max_minute": round(coord_cpu_max, 4) if coord_cpu_max else None,
    "exit_codes_on_sigterm": "all 0" if all(v == 0 for v in rcs.values()) else rcs,
}
out["verdict"] = {
    "no_deadlock": bool(per_min) and min(per_min) > 0 and out["state_at_end"] == "RUNNING",
    "no_restart": out["restarts"] == 0,
    # A pull that stops is given up after 30 s (ps.md), the step started again.
    "no_step_gap_over_60s": longest <= 60,
    "threads_flat": all(v is None or v <= 4 for v in out["threads_drift_max"].values()),
    "memory_flat": all(g is None or g <= 0.05 for g in out["memory_growth_max"].values()),
    "coordinator_cpu_under_5pct": coord_cpu is not None and coord_cpu < 0.05,
    "clean_exit": out["exit_codes_on_sigterm"] == "all 0",
}
if run == "kills":
    out["verdict"]["failover_no_restart"] = out["failovers"] >= 1 and out["restarts"] == 0
    out["verdict"]["slot_moved_back"] = out["slots_shared_at_end"] == 0 and out["slots_shared_max"] >= 1
print(json.dumps(out))
PY
}
