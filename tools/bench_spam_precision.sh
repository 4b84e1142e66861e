# tools/bench.sh spam-precision (sourced by tools/bench.sh: uses its $out_dir).
# Fine-tuning in bf16 against fp32 on the same test mails: the SpamAssassin
# worked example (tools/finetune_spam.sh: pretrain BERT-Tiny on general
# text, fine-tune on the mails, evaluate the held-out test split) runs twice,
# identical but for the CLASSIFY job's `precision` (F32, then BF16); the
# pretraining is fp32 and deterministic in both (its checkpoint's bytes are
# compared). The two runs' per-mail test predictions are paired and
# McNemar's exact test asks whether the two classifiers' errors differ: b
# mails only the fp32 model gets right, c only the bf16 one; two-sided
# p = min(1, 2 * P(X <= min(b, c))), X ~ Binomial(b + c, 1/2).
#
#   tools/bench.sh spam-precision
bench_spam_precision() {
  local dir="$out_dir/spam-precision"
  rm -rf "$dir"; mkdir -p "$dir"
  local p
  for p in F32 BF16; do
    OUT="$dir/$p" PRECISION="$p" tools/finetune_spam.sh > "$dir/$p.log" 2>&1 \
      || { tail -5 "$dir/$p.log"; return 1; }
    tail -1 "$dir/$p.log"
  done
  /usr/bin/python3 - "$dir" <<'PY' | tee "$out_dir/spam-precision.jsonl"
import filecmp, glob, json, math, os, sys
d = sys.argv[1]
def preds(run):
    out = {}
    for path in sorted(glob.glob(f"{d}/{run}/test-predictions/*.tsv")):
        lines = open(path).read().splitlines()
        for l in lines[1:]:
            f, rec, lab, pred = l.split("\t")[:4]
            out[(os.path.basename(f), int(rec))] = (int(lab), int(pred))
    return out
a, b_ = preds("F32"), preds("BF16")
assert a and a.keys() == b_.keys(), (len(a), len(b_))
n = len(a)
only_f32 = sum(1 for k in a if a[k][0] == a[k][1] and b_[k][0] != b_[k][1])
only_bf16 = sum(1 for k in a if a[k][0] != a[k][1] and b_[k][0] == b_[k][1])
acc = lambda p: sum(1 for v in p.values() if v[0] == v[1]) / len(p)
m = only_f32 + only_bf16
tail = sum(math.comb(m, k) for k in range(min(only_f32, only_bf16) + 1)) / 2 ** m if m else 1.0
pvalue = min(1.0, 2 * tail)
def same_pretrain():
    fa = sorted(glob.glob(f"{d}/F32/pretrain-ckpt/ckpt-*/*"))
    fb = sorted(glob.glob(f"{d}/BF16/pretrain-ckpt/ckpt-*/*"))
    return bool(fa) and len(fa) == len(fb) and all(
        filecmp.cmp(x, y, shallow=False) for x, y in zip(fa, fb) if not x.endswith(".json"))
runs = {}
for run in ("F32", "BF16"):
    last = open(f"{d}/{run}.log").read().strip().splitlines()[-1]
    runs[run] = json.loads(last)
print(json.dumps({"bench": "spam-precision", "model": "bert-tiny", "test_mails": n,
    "accuracy_f32": round(acc(a), 4), "accuracy_bf16": round(acc(b_), 4),
    "test_accuracy_reported": {r: runs[r]["test_accuracy"] for r in runs},
    "train_seconds": {r: runs[r]["train_seconds"] for r in runs},
    "only_f32_right": only_f32, "only_bf16_right": only_bf16,
    "mcnemar_exact_p": round(pvalue, 4), "significant_at_0.05": pvalue < 0.05,
    "same_pretrained_checkpoint": same_pretrain()}))
PY
}
