# tools/bench.sh model (sourced by tools/bench.sh: uses its $out_dir, peer and
# preset_json). One BERT training step (batch 32 x 128, 20 masked positions)
# per preset and thread count, with fp32 and with bf16 products
# (tools/model_bench), beside PyTorch fp32 (fused and plain autograd) and
# PyTorch bf16 autocast (tools/torch_ref/bert_torch.py bench), each peer with
# the best OpenBLAS core; the ratios and the machine's GEMM rate measured in
# the same run.
#
#   tools/bench.sh model [configs] [threads]   (default: "tiny mini base" "1 2")
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
      local common=(--threads "$t" --steps "$steps" --warmup "$warmup")
      ours=$("$bin" --config "$cfg" "${common[@]}")
      ours16=$("$bin" --config "$cfg" "${common[@]}" --precision bf16)
      fused=$(peer "$t" tools/torch_ref/bert_torch.py bench --config "$out_dir/$cfg.json" \
              "${common[@]}" --batch 32 --seq 128 --preds 20)
      plain=$(peer "$t" tools/torch_ref/bert_torch.py bench --config "$out_dir/$cfg.json" \
              "${common[@]}" --batch 32 --seq 128 --preds 20 --mlm-impl autograd --no-malloc-tune)
      auto16=$(peer "$t" tools/torch_ref/bert_torch.py bench --config "$out_dir/$cfg.json" \
              "${common[@]}" --batch 32 --seq 128 --preds 20 --mlm-impl autograd --no-malloc-tune \
              --autocast bf16)
      /usr/bin/python3 - "$cfg" "$t" "$ours" "$ours16" "$fused" "$plain" "$auto16" <<'PY' | tee -a "$results"
import json, sys
cfg, t = sys.argv[1], int(sys.argv[2])
ours, ours16, fused, plain, auto16 = map(json.loads, sys.argv[3:])
def med(d):
    return d.get("step_ms_median", d.get("median_ms"))
o, o16, f, p, a16 = med(ours), med(ours16), med(fused), med(plain), med(auto16)
print(json.dumps({"bench": "model", "config": cfg, "threads": t,
                  "bf16_hardware": ours16["bf16_hardware"], "bf16_ran": ours16["precision"],
                  "bertps_step_ms": round(o, 1), "bertps_bf16_step_ms": round(o16, 1),
                  "torch_step_ms": round(p, 1), "torch_fused_step_ms": round(f, 1),
                  "torch_bf16_autocast_step_ms": round(a16, 1),
                  "ratio_vs_torch": round(o / p, 3), "ratio_vs_torch_fused": round(o / f, 3),
                  "ratio_bf16_vs_torch_bf16": round(o16 / a16, 3),
                  "bf16_speedup": round(o / o16, 3),
                  "bertps_gflops": round(ours["gflops"], 1),
                  "bertps_bf16_gflops": round(ours16["gflops"], 1),
                  "gemm_gflops_fp32": round(ours["gemm_gflops_measured"], 1),
                  "gemm_gflops_bf16": round(ours16["gemm_gflops_measured"], 1),
                  "pct_of_gemm_fp32": round(ours["pct_of_gemm_rate"], 1),
                  "pct_of_gemm_bf16": round(ours16["pct_of_gemm_rate"], 1),
                  "bertps_peak_rss_mb": round(ours["peak_rss_mb"], 0),
                  "torch_peak_rss_mb": plain.get("peak_rss_mb"),
                  "bertps": ours, "bertps_bf16": ours16, "torch": plain, "torch_fused": fused,
                  "torch_bf16_autocast": auto16}))
PY
    done
  done
}
