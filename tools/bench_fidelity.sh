# tools/bench.sh fidelity (sourced by tools/bench.sh: uses its $out_dir).
# Training fidelity of bf16 products: BERT-mini pretrained from scratch on
# real text (Debian package descriptions, WordPiece with bert-base-uncased,
# MLM + NSP instances) for the same steps in fp32 and in bf16, for several
# seeds, each pair side by side on the two cores (1 thread each); then each
# final model evaluated in fp32 on held-out instances (a file of text never
# trained on). Prints one JSON line per run and a summary with the checks:
# final loss (mean of the last 10% of logged steps) of bf16 within 2% of
# fp32's for every seed, and the bf16 seeds' mean held-out MLM accuracy
# within the fp32 seeds' spread (min..max, widened by the bf16 seeds' own
# half-range). Plots both precisions' loss curves to $out_dir/fidelity.svg.
#
#   tools/bench.sh fidelity [steps] [seeds] [batch]   (default: 1000 3 16)
bench_fidelity() {
  local steps="${1:-1000}" seeds="${2:-3}" batch="${3:-16}"
  bazel build -c opt //tools:bert_local //tools:plot_series >/dev/null 2>&1
  local bin=bazel-bin/tools/bert_local
  local dir="$out_dir/fidelity"
  rm -rf "$dir"; mkdir -p "$dir/train" "$dir/heldout"
  local vocab=data/vocab/bert-base-uncased-vocab.txt corpus=data/corpus/small
  "$bin" create-pretraining-data --vocab "$vocab" --input "$corpus/part-0[012].txt" \
      --output "$dir/train/part" --num_output_files 3 --dupe_factor 2 --seed 1 > "$dir/train.json"
  "$bin" create-pretraining-data --vocab "$vocab" --input "$corpus/part-03.txt" \
      --output "$dir/heldout/part" --num_output_files 1 --dupe_factor 1 --seed 2 > "$dir/heldout.json"
  local s p pids
  for ((s = 1; s <= seeds; s++)); do
    pids=()
    for p in fp32 bf16; do
      "$bin" train --config mini --data "$dir/train/*" --batch "$batch" --steps "$steps" \
          --seed "$s" --precision "$p" --threads 1 --lr 1e-4 --warmup_steps $((steps / 10)) \
          --log_every 10 --out "$dir/$p-$s.safetensors" > "$dir/$p-$s.train.jsonl" &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    for p in fp32 bf16; do
      "$bin" eval --config mini --data "$dir/heldout/*" --batch 32 --precision fp32 \
          --weights "$dir/$p-$s.safetensors" > "$dir/$p-$s.eval.json"
    done
  done
  /usr/bin/python3 - "$dir" "$seeds" "$steps" "$batch" <<'PY' | tee "$out_dir/fidelity.jsonl"
import json, statistics, sys
d, seeds, steps, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
runs, series = {}, []
colors = {"fp32": ["#1f77b4", "#4a90c8", "#7fb2dc"], "bf16": ["#d62728", "#e05a5a", "#ea8c8c"]}
for p in ("fp32", "bf16"):
    for s in range(1, seeds + 1):
        lines = [json.loads(l) for l in open(f"{d}/{p}-{s}.train.jsonl") if l.strip()]
        ev = json.loads(open(f"{d}/{p}-{s}.eval.json").read().strip().splitlines()[-1])
        tail = lines[-max(1, len(lines) // 10):]
        r = {"bench": "fidelity", "precision": p, "ran": lines[-1].get("precision"), "seed": s,
             "steps": steps, "batch": batch,
             "final_loss": statistics.mean(x["loss"] for x in tail),
             "heldout_mlm_accuracy": ev["mlm_accuracy"], "heldout_mlm_loss": ev.get("mlm_loss"),
             "heldout_nsp_accuracy": ev.get("nsp_accuracy"),
             "examples_per_sec": lines[-1]["examples_per_sec"]}
        runs[(p, s)] = r
        print(json.dumps(r))
        series.append({"name": f"{p} seed {s}", "x": [x["step"] for x in lines],
                       "y": [x["loss"] for x in lines], "color": colors[p][(s - 1) % 3]})
loss_rel = [abs(runs[("bf16", s)]["final_loss"] - runs[("fp32", s)]["final_loss"]) /
            runs[("fp32", s)]["final_loss"] for s in range(1, seeds + 1)]
acc = {p: [runs[(p, s)]["heldout_mlm_accuracy"] for s in range(1, seeds + 1)] for p in ("fp32", "bf16")}
half = (max(acc["bf16"]) - min(acc["bf16"])) / 2
lo, hi = min(acc["fp32"]) - half, max(acc["fp32"]) + half
mean16 = statistics.mean(acc["bf16"])
summary = {"bench": "fidelity_summary", "seeds": seeds, "steps": steps, "batch": batch,
           "final_loss_rel_diff": [round(x, 4) for x in loss_rel],
           "loss_within_2pct": all(x <= 0.02 for x in loss_rel),
           "heldout_mlm_accuracy_fp32": acc["fp32"], "heldout_mlm_accuracy_bf16": acc["bf16"],
           "bf16_mean_accuracy": mean16, "fp32_spread": [min(acc["fp32"]), max(acc["fp32"])],
           "accuracy_within_spread": lo <= mean16 <= hi,
           "ran": sorted({r["ran"] for r in runs.values()})}
print(json.dumps(summary))
json.dump({"title": f"BERT-mini, {steps} steps of batch {batch}: fp32 vs bf16 products",
           "x_label": "step", "left_label": "training loss (mean over 10 steps)",
           "series": series}, open(f"{d}/plot.json", "w"))
PY
  bazel-bin/tools/plot_series "$dir/plot.json" "$out_dir/fidelity.svg"
  echo "plot: $out_dir/fidelity.svg"
}
