#!/usr/bin/env bash
# Benchmarks, each printing machine-readable JSON lines with the peer's figure
# measured in the same run and the ratio.
#
#   tools/bench.sh model [configs] [threads]   BERT training step vs PyTorch
#                                              (default: "tiny mini base" "1 2")
#
# The machine is shared and noisy: each figure is a median of repeated steps.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
trap 'bazel shutdown >/dev/null 2>&1' EXIT

what="${1:-model}"
out_dir="${BENCH_OUT:-out/bench}"
mkdir -p "$out_dir"

# The PyTorch peer: Debian's python3-torch with OpenBLAS at full speed (the
# environment's OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE halve it; unset here only).
peer() {
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS="$1" \
      OPENBLAS_NUM_THREADS="$1" MKL_NUM_THREADS="$1" /usr/bin/python3 "${@:2}"
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

bench_model() {
  local configs="${1:-tiny mini base}" threads_list="${2:-1 2}"
  bazel build -c opt //tools:model_bench >/dev/null 2>&1
  local bin=bazel-bin/tools/model_bench
  local results="$out_dir/model.jsonl"
  : > "$results"
  for cfg in $configs; do
    preset_json "$cfg" > "$out_dir/$cfg.json"
    local steps=10 warmup=2
    if [ "$cfg" = base ] || [ "$cfg" = large ]; then steps=3; warmup=1; fi
    for t in $threads_list; do
      ours=$("$bin" --config "$cfg" --threads "$t" --steps "$steps" --warmup "$warmup")
      fused=$(peer "$t" tools/torch_ref/bert_torch.py bench --config "$out_dir/$cfg.json" \
              --threads "$t" --steps "$steps" --warmup "$warmup" --batch 32 --seq 128 --preds 20)
      plain=$(peer "$t" tools/torch_ref/bert_torch.py bench --config "$out_dir/$cfg.json" \
              --threads "$t" --steps "$steps" --warmup "$warmup" --batch 32 --seq 128 --preds 20 \
              --mlm-impl autograd --no-malloc-tune)
      /usr/bin/python3 - "$cfg" "$t" "$ours" "$fused" "$plain" <<'PY' | tee -a "$results"
import json, sys
cfg, t, ours, fused, plain = sys.argv[1], int(sys.argv[2]), *map(json.loads, sys.argv[3:])
def med(d):
    return d.get("step_ms_median", d.get("median_ms"))
o, f, p = med(ours), med(fused), med(plain)
print(json.dumps({"bench": "model", "config": cfg, "threads": t,
                  "bertps_step_ms": round(o, 1),
                  "torch_step_ms": round(p, 1), "torch_fused_step_ms": round(f, 1),
                  "ratio_vs_torch": round(o / p, 3), "ratio_vs_torch_fused": round(o / f, 3),
                  "bertps_gflops": round(ours["gflops"], 1),
                  "bertps_pct_fp32_peak": round(ours["pct_of_fp32_peak"], 1),
                  "bertps_peak_rss_mb": round(ours["peak_rss_mb"], 0),
                  "torch_peak_rss_mb": plain.get("peak_rss_mb"),
                  "bertps": ours, "torch": plain, "torch_fused": fused}))
PY
    done
  done
}

case "$what" in
  model) bench_model "${2:-}" "${3:-}" ;;
  *) echo "unknown benchmark '$what' (model)" >&2; exit 2 ;;
esac
