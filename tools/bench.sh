#!/usr/bin/env bash
# Benchmarks, each printing machine-readable JSON lines with the peer's figure
# measured in the same run and the ratio.
#
#   tools/bench.sh model [configs] [threads]   BERT training step, fp32 and bf16
#                                              products, vs PyTorch fp32 and
#                                              bf16 autocast
#                                              (default: "tiny mini base" "1 2")
#   tools/bench.sh ps [transport-config] [step-configs]
#                                              parameter-server push/pull GB/s
#                                              vs raw loopback TCP (default:
#                                              base, 1 and 2 shards), and the
#                                              1 worker + 1 shard training step
#                                              vs single-process training
#                                              (default: "tiny mini"); "none"
#                                              skips either part
#   tools/bench.sh preprocess [rounds]         tokenization MB/s per core on
#                                              the package descriptions vs the
#                                              JavaScript port of
#                                              tokenization.py, instance
#                                              creation, augmentation
#                                              (default: 3 rounds)
#
#   tools/bench.sh input [records]             input pipeline, plain and GZIP
#                                              TFRecord: record indices
#                                              built/loaded, one worker's reads
#                                              (file order, shuffled) records/s
#                                              and MB/s per core against a
#                                              BERT-base step's need, a real
#                                              job's input wait, and the time
#                                              to a resumed worker's first batch
#                                              at step 0 and 1,000 steps later
#                                              vs reading the stream up to it
#                                              (default: 100000 records)
#   tools/bench.sh pipeline [micro-batches]    pipeline bubble vs (S-1)/(M+S-1)
#                                              and activation bytes per step,
#                                              S = 2 stages, BERT-mini
#                                              (default: "1 2 4 8")
#   tools/bench.sh soak scale [minutes] [workers] [shards] [rate] [runs]
#                                              the same at cluster scale on
#                                              emulated hosts (root; tools/
#                                              bench_soak_scale.sh)
#   tools/bench.sh soak coordinator [minutes] [seed]
#                                              the control plane under chaos:
#                                              the coordinator killed and
#                                              started again at random while
#                                              jobs are submitted, cancelled,
#                                              watched; nothing acknowledged
#                                              lost (tools/
#                                              bench_soak_coordinator.sh;
#                                              default 5 1)
#   tools/bench.sh soak [minutes] [workers] [mode]
#                                              the whole service under load:
#                                              a coordinator, 2 shard daemons
#                                              and N train daemons on one
#                                              BERT-Tiny job over loopback;
#                                              steps per minute and every
#                                              daemon's RSS over time; no
#                                              deadlock, RSS flat, throughput
#                                              steady (default: 10 16 bsp)
#   tools/bench.sh elastic [runs]              an 8-slot elastic job on 1 -> 2 -> 4
#                                              train daemons and a SIGTERM drain:
#                                              join and drain latencies,
#                                              throughput beside 8 fixed
#                                              daemons (tools/bench_elastic.sh)
#   tools/bench.sh primary-drain [runs] [model]
#                                              SIGTERM to a replicated job's
#                                              shard primary: its exit, the
#                                              job's longest step against
#                                              its median (tools/bench_elastic.sh)
#   tools/bench.sh spot [minutes] [seed]       chaos soak: drains, kills and
#                                              joins of train and shard
#                                              daemons at random; bit-equal,
#                                              ledger, throughput floor
#                                              (tools/bench_spot.sh; default 20)
#   tools/bench.sh checkpoint [runs] [models] [MB/s]
#                                              the step's blocking time at a
#                                              checkpoint, synchronous vs in
#                                              the background, on the local
#                                              disk and a throttled one; write
#                                              GB/s vs dd (tools/
#                                              bench_checkpoint.sh; default:
#                                              3 "mini base" 200)
#   tools/bench.sh checkpoint-throughput [minutes] [model] [every]
#                                              examples/s over a run with a
#                                              checkpoint every N steps, sync
#                                              vs background (default: 10
#                                              mini 10)
#   tools/bench.sh failover [runs]             how fast a loss is handled, with
#                                              real processes over loopback: a
#                                              shard's kill -9 to the job's
#                                              restart (member timeout 60 s:
#                                              the workers' report and a probe
#                                              find it), a train worker's kill
#                                              -9 to its slot taken over by the
#                                              survivor (member timeout 2 s +
#                                              takeover 1 s), and steps/s with
#                                              one daemon computing both slots
#                                              vs two daemons; medians of runs
#                                              (default: 3)
#   tools/bench.sh replicas [runs] [steps]     replicated shards: BERT-mini
#                                              step time and shard CPU with
#                                              replicas 1 vs 2, a backup
#                                              replaced while training, and a
#                                              primary's kill -9 to its backup
#                                              promoted and stepping (tools/
#                                              bench_replicas.sh; default 3 40)
#   tools/bench.sh slices [runs]               shard daemons of 2 slices vs
#                                              of 1: BERT-mini, replicas 2,
#                                              the daemons' RSS, threads and
#                                              step time (tools/bench_slices.sh;
#                                              default 3)
#   tools/bench.sh fidelity [steps] [seeds] [batch]
#                                              bf16 vs fp32 products: BERT-mini
#                                              pretrained on real text, loss
#                                              curves and held-out MLM accuracy
#                                              per seed (tools/bench_fidelity.sh;
#                                              default 1000 3 16)
#   tools/bench.sh spam-precision              SpamAssassin fine-tuned in fp32
#                                              and in bf16: McNemar's exact
#                                              test on the same test mails
#                                              (tools/bench_spam_precision.sh)
# The machine is shared and noisy: each figure is a median of repeated steps.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
# The Bazel server is shut down at the end (BENCH_BAZEL_SHUTDOWN=0 keeps a
# server that others share).
bazel_shutdown() {
  if [ "${BENCH_BAZEL_SHUTDOWN:-1}" = 1 ]; then bazel shutdown >/dev/null 2>&1; fi
}
trap bazel_shutdown EXIT

what="${1:-model}"
out_dir="${BENCH_OUT:-out/bench}"
mkdir -p "$out_dir"

# The machine, printed first and written to $out_dir/machine.json: figures
# compare only within one run on one machine.
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
isa=()
for f in avx2 fma avx512f avx512_bf16 avx512_vnni amx_tile amx_bf16; do
  grep -qw "$f" <<<"$flags" && isa+=("$f")
done
cpu_model=$(grep -m1 '^model name' /proc/cpuinfo | sed 's/^[^:]*: //')

# The PyTorch peer: Debian's python3-torch with OpenBLAS at full speed. The
# environment's OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE halve it, so they are
# unset for the peer only; and where OpenBLAS 0.3.21 does not know the CPU
# (Intel Emerald Rapids: it picks a generic "Prescott" core at a fifth of the
# speed) the fastest core the CPU can run is chosen: Cooperlake with
# AVX512-BF16, SkylakeX with AVX-512, Haswell with AVX2.
openblas_auto=$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_VERBOSE=2 \
    /usr/bin/python3 -c 'import numpy' 2>&1 | sed -n 's/^Core: //p' | head -1)
openblas_core="$openblas_auto"
case "$openblas_auto" in
  Prescott|Core2|Penryn|Dunnington|Nehalem|Atom|"")
    if [[ " ${isa[*]} " == *" avx512_bf16 "* ]]; then openblas_core=Cooperlake
    elif [[ " ${isa[*]} " == *" avx512f "* ]]; then openblas_core=SkylakeX
    elif [[ " ${isa[*]} " == *" avx2 "* ]]; then openblas_core=Haswell
    fi ;;
esac
machine=$(printf '{"machine": {"cpu": "%s", "cores": %s, "isa": "%s", "openblas_core_auto": "%s", "openblas_core_peer": "%s"}}' \
  "$cpu_model" "$(nproc)" "${isa[*]}" "${openblas_auto:-unknown}" "${openblas_core:-unknown}")
echo "$machine"
echo "$machine" > "$out_dir/machine.json"

peer() {
  if [ -n "$openblas_core" ] && [ "$openblas_core" != "$openblas_auto" ]; then
    env -u OPENBLAS_L2_SIZE OPENBLAS_CORETYPE="$openblas_core" OMP_NUM_THREADS="$1" \
        OPENBLAS_NUM_THREADS="$1" MKL_NUM_THREADS="$1" /usr/bin/python3 "${@:2}"
  else
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS="$1" \
        OPENBLAS_NUM_THREADS="$1" MKL_NUM_THREADS="$1" /usr/bin/python3 "${@:2}"
  fi
}

preset_json() {  # name -> HF config.json matching common/model presets
  /usr/bin/python3 - "$1" <<'PY'
import json, sys
L, H = {"tiny": (2, 128), "mini": (4, 256), "small": (4, 512), "medium": (8, 512),
        "base": (12, 768), "large": (24, 1024)}[sys.argv[1]]
print(json.dumps({"vocab_size": 30522, "hidden_size": H, "num_hidden_layers": L,
                  "num_attention_heads": H // 64, "intermediate_size": 4 * H,
                  "hidden_act": "gelu", "max_position_embeddings": 512,
                  "type_vocab_size": 2}))
PY
}

# ---------------------------------------------------------------------------
# ps: the parameter-server transport and the distributed step.
# Shards are real bertps_server processes on 127.0.0.1, the worker a real
# bertps_worker; the peers (raw TCP, bert_local train) run in the same job.

ps_pids=()

free_addrs() {  # n -> "127.0.0.1:p1,127.0.0.1:p2,..." (free ports)
  /usr/bin/python3 - "$1" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(",".join("127.0.0.1:%d" % s.getsockname()[1] for s in socks))
PY
}

# start_shards N LOG_PREFIX [server flags...]: N shards, BSP, 1 worker; sets
# ps_addrs and waits until every shard listens.
start_shards() {
  local n="$1" prefix="$2"
  shift 2
  ps_addrs=$(free_addrs "$n")
  local addrs i
  IFS=, read -r -a addrs <<<"$ps_addrs"
  for ((i = 0; i < n; i++)); do
    "$ps_bin"/bertps_server --host 127.0.0.1 --port "${addrs[$i]##*:}" \
        --shard "$i" --num_shards "$n" --peers "$ps_addrs" --workers 1 "$@" \
        >"$prefix.$i.out" 2>"$prefix.$i.err" &
    ps_pids+=("$!")
  done
  local deadline=$((SECONDS + 300))
  for ((i = 0; i < n; i++)); do
    until grep -q "listening on" "$prefix.$i.out" 2>/dev/null; do
      if ! kill -0 "${ps_pids[$i]}" 2>/dev/null || [ "$SECONDS" -ge "$deadline" ]; then
        echo "bench ps: shard $i did not start:" >&2
        cat "$prefix.$i.err" >&2
        return 1
      fi
      sleep 0.2
    done
  done
}

stop_shards() {
  local p
  for p in "${ps_pids[@]+"${ps_pids[@]}"}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${ps_pids[@]+"${ps_pids[@]}"}"; do wait "$p" 2>/dev/null || true; done
  ps_pids=()
}

# ps: tools/bench_ps.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench_ps.sh"

# model: tools/bench_model.sh; input: tools/bench_input.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench_model.sh"
source "$(dirname "${BASH_SOURCE[0]}")/bench_input.sh"
# scale: tools/bench_scale.sh; replicas: tools/bench_replicas.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench_scale.sh"
source "$(dirname "${BASH_SOURCE[0]}")/bench_replicas.sh"
source "$(dirname "${BASH_SOURCE[0]}")/bench_slices.sh"
source "$(dirname "${BASH_SOURCE[0]}")/bench_soak_scale.sh"
source "$(dirname "${BASH_SOURCE[0]}")/bench_soak_coordinator.sh"
# build_service_bins: builds the daemons, bert_local and bertpsctl (opt) and sets
# $service_bins to their paths, in the order the process tests take them.
build_service_bins() {
  bazel build -c opt //tools:bert_local //server/coordinator:bertps_coordinator \
      //server/ps:bertps_server //worker:bertps_worker //tools:bertpsctl >/dev/null 2>&1
  service_bins=(bazel-bin/tools/bert_local bazel-bin/server/coordinator/bertps_coordinator
                bazel-bin/server/ps/bertps_server bazel-bin/worker/bertps_worker
                bazel-bin/tools/bertpsctl)
}
# failover: tools/bench_failover.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench_failover.sh"
source "$(dirname "${BASH_SOURCE[0]}")/bench_elastic.sh"
source "$(dirname "${BASH_SOURCE[0]}")/bench_spot.sh"
source "$(dirname "${BASH_SOURCE[0]}")/bench_checkpoint.sh"
source "$(dirname "${BASH_SOURCE[0]}")/bench_fidelity.sh"
source "$(dirname "${BASH_SOURCE[0]}")/bench_spam_precision.sh"

# ---------------------------------------------------------------------------
# preprocess: the data side on the package-description corpus of
# tools/get_data.sh corpus_small. Each figure is the median over `rounds`
# runs (tokenizer_bench itself reports the median of 5 passes per run), ours
# and the peer alternating so that noise hits both.
bench_preprocess() {
  local rounds="${1:-3}" data="${BERTPS_DATA_DIR:-data}"
  local vocab="$data/vocab/bert-base-uncased-vocab.txt"
  local vocab_json="$data/vocab/bert-base-uncased-sentencepiece.json"
  local ref="$data/ref/tfjs-qna" corpus_dir="$data/corpus/small"
  local f
  for f in "$vocab" "$vocab_json" "$ref/dist/bert_tokenizer.js" "$corpus_dir/part-00.txt"; do
    if [ ! -f "$f" ]; then
      echo "bench preprocess: $f is missing: run tools/get_data.sh vocab corpus_small" >&2
      return 1
    fi
  done
  bazel build -c opt //common/text:tokenizer_bench //tools:bert_local >/dev/null 2>&1
  # Private copies, taken from this configuration's output tree (the bazel-bin
  # link follows whoever built last).
  local built bin="$out_dir/preprocess_bin" work="$out_dir/preprocess"
  built=$(bazel info -c opt bazel-bin 2>/dev/null)
  mkdir -p "$bin" "$work"
  cp -f "$built"/common/text/tokenizer_bench "$built"/tools/bert_local "$bin/"
  results="$out_dir/preprocess.jsonl"
  : > "$results"
  local corpus="$work/corpus_small.txt"
  cat "$corpus_dir"/part-*.txt > "$corpus"

  # Tokenization, bytes of text per second of CPU time of one core.
  local ours=() js=() r
  for ((r = 0; r < rounds; r++)); do
    ours+=("$("$bin"/tokenizer_bench --vocab "$vocab" --file "$corpus" --repeat 5)")
    js+=("$(node common/text/js_ref_tokenize.js bench --ref "$ref" \
              --vocab-json "$vocab_json" --file "$corpus" --repeat 5)")
  done
  /usr/bin/python3 - "$rounds" "${ours[@]}" "${js[@]}" <<'PY' | tee -a "$results"
import json, statistics, sys
n = int(sys.argv[1])
runs = [json.loads(x) for x in sys.argv[2:]]
ours, js = runs[:n], runs[n:]
med = statistics.median
o = [x["mb_per_s"] for x in ours]
j = [x["mb_per_s"] for x in js]
print(json.dumps({"bench": "preprocess_tokenize", "corpus": "data/corpus/small",
                  "bytes": ours[0]["bytes"], "lines": ours[0]["lines"],
                  "tokens": ours[0]["tokens"], "rounds": n,
                  "bertps_mb_per_s": round(med(o), 1),
                  "bertps_mb_per_s_min": round(min(o), 1),
                  "bertps_mb_per_s_max": round(max(o), 1),
                  "bertps_tokens_per_s": round(med(x["tokens_per_s"] for x in ours)),
                  "js_impl": js[0]["impl"], "js_mode": js[0]["mode"],
                  "js_mb_per_s": round(med(j), 2),
                  "js_mb_per_s_min": round(min(j), 2),
                  "js_mb_per_s_max": round(max(j), 2),
                  "ratio_vs_js": round(med(o) / med(j), 1),
                  "target_mb_per_s": 50,
                  "meets_target": med(o) >= 50}))
PY

  # Instance creation (create_pretraining_data.py: tokenize, dupe_factor 10
  # passes of NSP pairs and masking, TFRecord output), one process; rates per
  # second of its CPU time (user + system), the wall-clock one beside.
  local inst=()
  for ((r = 0; r < rounds; r++)); do
    inst+=("$(/usr/bin/python3 -c '
import json, resource, subprocess, sys
out = subprocess.run(sys.argv[1:], check=True, stdout=subprocess.PIPE, text=True).stdout
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
d = json.loads(out)
d["cpu_seconds"] = ru.ru_utime + ru.ru_stime
print(json.dumps(d))' "$bin"/bert_local create-pretraining-data --vocab "$vocab" \
               --input "$corpus_dir/part-*.txt" --output "$work/instances" \
               --num_output_files 4)")
  done
  /usr/bin/python3 - "${inst[@]}" <<'PY' | tee -a "$results"
import json, statistics, sys
runs = [json.loads(x) for x in sys.argv[1:]]
med = statistics.median
secs = [x["seconds"] for x in runs]
cpu = [x["cpu_seconds"] for x in runs]
first = runs[0]
print(json.dumps({"bench": "preprocess_instances", "corpus": "data/corpus/small",
                  "input_bytes": first["input_bytes"], "documents": first["documents"],
                  "instances": first["instances"], "dupe_factor": 10,
                  "max_seq_length": 128, "rounds": len(runs),
                  "cpu_seconds": round(med(cpu), 3), "wall_seconds": round(med(secs), 3),
                  "instances_per_s": round(first["instances"] / med(cpu)),
                  "input_mb_per_s": round(first["input_bytes"] / med(cpu) / 1e6, 2),
                  "instances_per_s_wall": round(first["instances"] / med(secs)),
                  "output_mb": round(first["output_bytes"] / 1e6, 1)}))
PY

  # Augmentation (EDA): common/text:augment_bench on the first 5000 lines,
  # 4 augmented copies each, WordNet from tools/get_data.sh wordnet.
  if bazel build -c opt //common/text:augment_bench >/dev/null 2>&1 &&
     [ -d "$data/wordnet" ]; then
    cp -f "$built"/common/text/augment_bench "$bin/"
    "$bin"/augment_bench --wordnet "$data/wordnet" --file "$corpus_dir/part-00.txt" \
        --repeat "$rounds" | tee -a "$results"
  else
    # TODO(augment): this prints until the augment_bench target builds here
    # and data/wordnet exists (tools/get_data.sh wordnet).
    echo "augment: not built" | tee -a "$results"
  fi
}

# ---------------------------------------------------------------------------
# pipeline: S = 2 pipeline stages (real bertps_worker --role=stage processes,
# one compute thread each, layers 2 + 2: the closest to equal stages on this
# CPU) and 1 shard on loopback, BERT-mini, batch 32 x 128
# tokens, 20 predictions, M = 1, 2, 4, 8 micro-batches, 1F1B. Per step each
# stage logs its schedule time (first op to last op: compute, waits, sends)
# and its compute time. Measured bubble = 1 - sum of compute / (S x the
# slowest stage's schedule time), against the textbook (S-1)/(M+S-1) and
# against the bubble the measured stage imbalance implies:
# 1 - sum t_s / (S x (sum t_s + (M-1) max t_s) / M), t_s = compute of stage s.
# Bytes: activations and gradients sent between the stages per step.
bench_pipeline() {
  local ms="${1:-1 2 4 8}" steps="${PIPELINE_STEPS:-6}" drop=2 cfg=mini
  trap 'stop_shards; bazel_shutdown' EXIT
  bazel build -c opt //tools:bert_local //server/ps:bertps_server \
      //worker:bertps_worker >/dev/null 2>&1
  ps_bin="$out_dir/pipeline_bin"
  mkdir -p "$ps_bin" "$out_dir/pipeline_logs"
  local b
  for b in tools/bert_local server/ps/bertps_server worker/bertps_worker; do
    if ldd "bazel-bin/$b" | grep -q 'libasan\|libtsan\|libubsan'; then
      echo "bench pipeline: bazel-bin/$b is a sanitizer build; rebuild it without --config" >&2
      return 1
    fi
    cp -f "bazel-bin/$b" "$ps_bin/"
  done
  local data="$out_dir/ps_data/$cfg" log="$out_dir/pipeline_logs"
  if [ ! -s "$data/synthetic-1.tfrecord" ]; then
    mkdir -p "$data"
    "$ps_bin"/bert_local synthetic-data --config "$cfg" --out "$data" --steps 512
  fi
  results="$out_dir/pipeline.jsonl"
  : > "$results"
  local m s
  for m in $ms; do
    start_shards 1 "$log/shard-$m" --config "$cfg" --workers 2 --total_steps "$steps"
    local peers stage_pids=()
    peers=$(free_addrs 2)
    for s in 0 1; do
      "$ps_bin"/bertps_worker --role=stage --ps "$ps_addrs" --stage_index "$s" \
          --num_stages 2 --peers "$peers" --micro_batches "$m" --schedule 1f1b --layers_per_stage 2,2 \
          --config "$cfg" --data "$data/*.tfrecord" --batch 32 --steps "$steps" \
          --threads 1 --log_every 1 >"$log/stage-$m-$s.jsonl" 2>"$log/stage-$m-$s.err" &
      stage_pids+=("$!")
    done
    local failed=0
    for s in 0 1; do wait "${stage_pids[$s]}" || failed=1; done
    stop_shards
    if [ "$failed" = 1 ]; then
      echo "bench pipeline: a stage failed (M=$m):" >&2
      cat "$log/stage-$m-0.err" "$log/stage-$m-1.err" >&2
      return 1
    fi
    /usr/bin/python3 - "$m" "$drop" "$log/stage-$m-0.jsonl" "$log/stage-$m-1.jsonl" <<'PY' | tee -a "$results"
import json, statistics, sys
m, drop = int(sys.argv[1]), int(sys.argv[2])
stages = []
for path in sys.argv[3:]:
    lines = [json.loads(l) for l in open(path) if l.startswith("{")]
    stages.append({l["step"]: l for l in lines if "schedule_ms" in l})
steps = sorted(set(stages[0]) & set(stages[1]))[drop:]
S = len(stages)
med = statistics.median
measured, implied, sent = [], [], []
for st in steps:
    ls = [s[st] for s in stages]
    comp = [l["compute_ms"] for l in ls]
    measured.append(1 - sum(comp) / (S * max(l["schedule_ms"] for l in ls)))
    t = [c / m for c in comp]  # per micro-batch
    implied.append(1 - sum(t) * m / (S * (sum(t) + (m - 1) * max(t))))
    sent.append(sum(l["bytes_sent"] for l in ls))
theory = (S - 1) / (m + S - 1)
print(json.dumps({
    "bench": "pipeline", "config": "mini", "stages": S, "micro_batches": m,
    "schedule": "1f1b", "batch": 32, "seq": 128, "steps_timed": len(steps),
    "bubble_measured": round(med(measured), 3),
    "bubble_theory": round(theory, 3),
    "bubble_theory_with_imbalance": round(med(implied), 3),
    "ratio_measured_over_theory": round(med(measured) / theory, 3),
    "activation_bytes_per_step": int(med(sent)),
    "activation_bytes_expected": 2 * (S - 1) * 32 * 128 * 256 * 4,
    "stage_compute_ms": [round(med(s[st]["compute_ms"] for st in steps), 1) for s in stages],
    "stage_schedule_ms": [round(med(s[st]["schedule_ms"] for st in steps), 1) for s in stages],
    "stage_pull_ms": [round(med(s[st]["pull_ms"] for st in steps), 1) for s in stages],
    "stage_push_ms": [round(med(s[st]["push_ms"] for st in steps), 1) for s in stages]}))
PY
  done
}

# The whole service for a long time: RSS and throughput sampled every 10 s.
bench_soak() {
  local minutes="${1:-10}" workers="${2:-16}" mode="${3:-bsp}"
  bazel build -c opt //server/coordinator:bertps_coordinator //server/ps:bertps_server \
      //worker:bertps_worker //tools:bertpsctl //tools:bert_local >/dev/null 2>&1
  local bin
  bin=$(bazel info -c opt bazel-bin 2>/dev/null)
  local dir="$out_dir/soak"
  rm -rf "$dir"; mkdir -p "$dir/data"
  "$bin"/tools/bert_local synthetic-data --config tiny --out "$dir/data" --steps 200 >/dev/null
  local port
  port=$(free_addrs 1); port="${port##*:}"
  local coord="127.0.0.1:$port" pids=() names=()
  # Many busy daemons on few cores: heartbeats can be late.
  "$bin"/server/coordinator/bertps_coordinator --port "$port" --metrics_port 0 \
      --member_timeout_s 60 > "$dir/coordinator.log" 2>&1 &
  pids+=("$!"); names+=(coordinator)
  local i
  for i in 0 1; do
    "$bin"/server/ps/bertps_server --coordinator "$coord" --port 0 > "$dir/shard$i.log" 2>&1 &
    pids+=("$!"); names+=("shard$i")
  done
  for ((i = 0; i < workers; i++)); do
    "$bin"/worker/bertps_worker --role=train --coordinator "$coord" --threads 1 \
        > "$dir/worker$i.log" 2>&1 &
    pids+=("$!"); names+=("worker$i")
  done
  local mode_upper
  mode_upper=$(echo "$mode" | tr a-z A-Z)
  cat > "$dir/job.pbtxt" <<EOF2
name: "soak"
task: PRETRAIN
model: "tiny"
data: "$dir/data/*.tfrecord"
batch_size: 8
steps: 100000000
num_ps_shards: 2
num_workers: $workers
consistency { mode: $mode_upper }
optimizer { learning_rate: 1e-4 warmup_steps: 100 }
EOF2
  local ctl="$bin/tools/bertpsctl --coordinator $coord"
  local job
  for i in $(seq 1 100); do job=$($ctl submit "$dir/job.pbtxt" 2>/dev/null) && break; sleep 0.2; done
  [ -n "$job" ] || { echo "bench soak: cannot submit" >&2; return 1; }
  # Sample: seconds, step, then RSS (kB) of each daemon.
  local samples="$dir/samples.tsv" t0=$SECONDS end=$((SECONDS + minutes * 60))
  : > "$samples"
  while [ "$SECONDS" -lt "$end" ]; do
    local step rss=""
    step=$($ctl status "$job" --json 2>/dev/null | /usr/bin/python3 -c \
      'import json,sys; s=json.load(sys.stdin); print(s.get("progress",{}).get("step",0), s["state"])' \
      2>/dev/null || echo "? ?")
    for i in "${!pids[@]}"; do
      rss+=" $(awk '/^VmRSS/ {print $2}' "/proc/${pids[$i]}/status" 2>/dev/null || echo 0)"
    done
    echo "$((SECONDS - t0)) $step$rss" >> "$samples"
    sleep 10
  done
  $ctl cancel "$job" >/dev/null 2>&1 || true
  # Every daemon must leave on SIGTERM with status 0.
  local rcs=""
  for i in "${!pids[@]}"; do kill -TERM "${pids[$i]}" 2>/dev/null || true; done
  for i in "${!pids[@]}"; do
    local rc=0
    wait "${pids[$i]}" || rc=$?
    rcs+=" $rc"
  done
  /usr/bin/python3 - "$samples" "$minutes" "$workers" "$mode" "${names[*]}" "$rcs" <<'PY' | tee "$out_dir/soak.json"
import json, statistics, sys
path, minutes, workers, mode, names, rcs = sys.argv[1:]
names = names.split(); rcs = [int(x) for x in rcs.split()]
rows = []
for line in open(path):
    f = line.split()
    if len(f) < 3 or f[1] == "?":
        continue
    rows.append((int(f[0]), int(f[1]), f[2], [int(x) for x in f[3:]]))
# Steps per minute (the first minute is the start: the job installs).
per_min = []
for m in range(int(minutes)):
    inside = [r for r in rows if m * 60 <= r[0] <= (m + 1) * 60]
    if len(inside) >= 2:
        per_min.append(inside[-1][1] - inside[0][1])
steady = per_min[1:] if len(per_min) > 2 else per_min
med = statistics.median(steady) if steady else 0
# RSS growth per daemon over the second half of the run.
def rss_at(t):
    best = min(rows, key=lambda r: abs(r[0] - t))
    return best[3]
# Steady state: from the middle of the run to its end (the first half holds
# the start: installs, first allocations of every buffer and pool).
warm, last = rss_at(rows[-1][0] / 2), rows[-1][3]
def growth(a, b):
    return (b - a) / a if a else 0.0
per_daemon = {n: {"warm_mb": round(a / 1024, 1), "end_mb": round(b / 1024, 1),
                  "growth": round(growth(a, b), 4)}
              for n, a, b in zip(names, warm, last)}
workers_growth = [growth(a, b) for n, a, b in zip(names, warm, last) if n.startswith("worker")]
server_growth = [growth(a, b) for n, a, b in zip(names, warm, last) if not n.startswith("worker")]
shard_growth = [growth(a, b) for n, a, b in zip(names, warm, last) if n.startswith("shard")]
worst = max(shard_growth + workers_growth)
out = {
    "bench": "soak", "minutes": int(minutes), "workers": int(workers), "shards": 2,
    "mode": mode, "model": "tiny", "batch": 8,
    "steps_total": rows[-1][1] if rows else 0,
    "state_at_end": rows[-1][2] if rows else "?",
    "steps_per_minute": per_min,
    "steps_per_minute_median": med,
    "throughput_min_over_median": round(min(steady) / med, 3) if med else 0,
    "every_minute_progressed": bool(per_min) and min(per_min) > 0,
    "rss": {k: v for k, v in per_daemon.items() if not k.startswith("worker")},
    "workers_rss_end_mb_max": max((v["end_mb"] for k, v in per_daemon.items() if k.startswith("worker")), default=0),
    "workers_rss_growth_max": round(max(workers_growth, default=0), 4),
    "rss_growth_max_shards_workers": round(worst, 4),
    # The coordinator keeps each job's loss history (5000 points) and newest
    # events (2000): it grows until those fill, then stays flat.
    "coordinator_rss_growth": round(growth(warm[0], last[0]), 4),
    "exit_codes_on_sigterm": dict(zip(names, rcs)) if any(rcs) else "all 0",
}
out["verdict"] = {
    "no_deadlock": out["every_minute_progressed"] and out["state_at_end"] == "RUNNING",
    "rss_flat": worst < 0.05,  # shards and workers
    "throughput_steady": out["throughput_min_over_median"] >= 0.8,
    "clean_exit": not any(rcs),
}
print(json.dumps(out))
PY
}

case "$what" in
  model) bench_model "${2:-}" "${3:-}" ;;
  failover) bench_failover "${2:-}" ;;
  elastic) bench_elastic "${2:-}" ;;
  primary-drain) bench_primary_drain "${2:-}" "${3:-}" ;;
  spot) bench_spot "${2:-}" "${3:-}" ;;
  checkpoint) bench_checkpoint "${2:-}" "${3:-}" "${4:-}" ;;
  checkpoint-throughput) bench_checkpoint_throughput "${2:-}" "${3:-}" "${4:-}" ;;
  ps) bench_ps "${2:-}" "${3:-}" ;;
  pipeline) bench_pipeline "${2:-}" ;;
  soak) if [ "${2:-}" = scale ]; then
          bench_soak_scale "${3:-}" "${4:-}" "${5:-}" "${6:-}" "${7:-}"
        elif [ "${2:-}" = coordinator ]; then
          bench_soak_coordinator "${3:-}" "${4:-}"
        else bench_soak "${2:-}" "${3:-}" "${4:-}"; fi ;;
  preprocess) bench_preprocess "${2:-}" ;;
  input) bench_input "${2:-}" ;;
  scale) bench_scale "${2:-}" "${3:-}" "${4:-}" "${5:-}" "${6:-}" ;;
  replicas) bench_replicas "${2:-}" "${3:-}" ;;
  slices) bench_slices "${2:-}" ;;
  fidelity) bench_fidelity "${2:-}" "${3:-}" "${4:-}" ;;
  spam-precision) bench_spam_precision ;;
  *) echo "unknown benchmark '$what' (model, ps, pipeline, preprocess, input, scale, soak, failover, elastic, primary-drain, spot, checkpoint, checkpoint-throughput, replicas, slices, fidelity, spam-precision)" >&2; exit 2 ;;
esac
