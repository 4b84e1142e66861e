#!/usr/bin/env bash
# Regenerates the seed corpora under fuzz/corpus/ from real files: BERT
# instances made by `bert_local create-pretraining-data` from the Debian
# package descriptions (data/corpus), a model checkpoint written by
# `bert_local train`, the job specs of docs/jobs.md, tools/quickstart.sh and
# tests/cluster_processes_test.sh, text lines of data/corpus, and the
# structured request scripts of fuzz/make_seeds.cc. Run from anywhere after
# tools/get_data.sh; it keeps crash reproducers (files named regress-*).
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //tools:bert_local //fuzz:make_seeds
bin=bazel-bin
corpus=fuzz/corpus
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for t in tfrecord_fuzz bert_example_fuzz safetensors_fuzz job_spec_fuzz chunk_codec_fuzz \
         tokenizer_fuzz ps_shard_fuzz coordinator_fuzz text_markup_fuzz weights_fuzz; do
  mkdir -p "$corpus/$t"
  find "$corpus/$t" -type f ! -name 'regress-*' -delete
done

# TFRecords of BERT pretraining instances from real text (40 lines).
head -n 40 data/corpus/small/part-00.txt > "$tmp/text.txt"
"$bin/tools/bert_local" create-pretraining-data --input "$tmp/text.txt" \
  --vocab data/vocab/bert-base-uncased-vocab.txt --output "$tmp/inst" \
  --max_seq_length 32 --max_predictions_per_seq 5 --dupe_factor 1 >/dev/null
rec=$(ls "$tmp"/inst* | head -n 1)
/usr/bin/python3 - "$rec" "$corpus" <<'PY'
import struct, sys
path, corpus = sys.argv[1], sys.argv[2]
data = open(path, 'rb').read()
records, pos = [], 0
while pos < len(data):
    n = struct.unpack('<Q', data[pos:pos + 8])[0]
    records.append((pos, data[pos + 12:pos + 12 + n]))
    pos += 16 + n
# Whole file cut after 3 records, one record, and a record cut short.
end3 = records[3][0] if len(records) > 3 else len(data)
open(f'{corpus}/tfrecord_fuzz/pretrain-3', 'wb').write(data[:end3])
open(f'{corpus}/tfrecord_fuzz/pretrain-1', 'wb').write(data[:records[1][0]])
open(f'{corpus}/tfrecord_fuzz/pretrain-cut', 'wb').write(data[:records[1][0] - 5])
open(f'{corpus}/tfrecord_fuzz/empty', 'wb').write(b'')
for i, (_, r) in enumerate(records[:4]):
    open(f'{corpus}/bert_example_fuzz/pretrain-{i}', 'wb').write(r)
PY

# A checkpoint of a very small model (config below) after one training step.
cat > "$tmp/micro.json" <<'JSON'
{"vocab_size": 128, "hidden_size": 8, "num_hidden_layers": 1,
 "num_attention_heads": 2, "intermediate_size": 16,
 "max_position_embeddings": 128, "type_vocab_size": 2}
JSON
mkdir -p "$tmp/syn"
"$bin/tools/bert_local" synthetic-data --config "$tmp/micro.json" \
  --out "$tmp/syn" --steps 1 >/dev/null
"$bin/tools/bert_local" train --config "$tmp/micro.json" --data "$tmp/syn/*.tfrecord" \
  --steps 1 --batch 1 --out "$corpus/safetensors_fuzz/micro-weights" >/dev/null

# Job specs as users write them (shell variables filled in).
awk '/^```/ {n++; next} n == 1' docs/jobs.md > "$corpus/job_spec_fuzz/docs-jobs"
sed -n '/^cat > "$out\/job.pbtxt" <<EOF2$/,/^EOF2$/p' tools/quickstart.sh | sed '1d;$d' \
  | sed 's|\$out|out/quickstart|g; s|\$steps|200|g' > "$corpus/job_spec_fuzz/quickstart"
sed -n '/^cat > "$work\/job.pbtxt" <<EOF2$/,/^EOF2$/p' tests/cluster_processes_test.sh \
  | sed '1d;$d' | sed 's|\$work|/tmp/e2e|g' > "$corpus/job_spec_fuzz/cluster-test"
printf 'data: "x"\nsteps: 1\nbatch_size: -4\n' > "$corpus/job_spec_fuzz/cluster-test-bad"

# Text: lines of the corpus (ASCII and not), one cut inside a UTF-8 sequence.
/usr/bin/python3 - "$corpus/tokenizer_fuzz" <<'PY'
import sys
out = sys.argv[1]
lines = open('data/corpus/small/part-01.txt', 'rb').read().split(b'\n')
ascii_ = [l for l in lines if l and max(l) < 0x80][:12]
other = [l for l in lines if l and max(l) >= 0x80][:12]
for i, l in enumerate(ascii_ + other):
    open(f'{out}/line-{i:02d}', 'wb').write(l)
l = other[0]
cut = next(i for i, b in enumerate(l) if b >= 0xC0) + 1
open(f'{out}/line-cut-utf8', 'wb').write(l[:cut] + l[cut + 1:])
PY

# Markup: real e-mails of the SpamAssassin slice (plain, quoted-printable,
# base64, multipart, HTML, Latin-1), their first 6 KB, and GCIDE entries.
text_seeds() {
  local out="$corpus/text_markup_fuzz" f i=0
  for f in data/corpus/slices/spamassassin/spam-1/0000{1,2,3}*.txt \
           data/corpus/slices/spamassassin/spam-1/0002{2,3}*.txt \
           data/corpus/slices/spamassassin/easy-ham-1/0000{1,7}*.txt \
           data/corpus/slices/spamassassin/hard-ham-1/0000{1,2}*.txt; do
    head -c 6000 "$f" > "$out/mail-$i"; i=$((i + 1))
  done
  /usr/bin/python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
for i, line in enumerate(open('data/corpus/slices/gcide.jsonl', encoding='utf-8')):
    if i >= 8:
        break
    open(f'{out}/gcide-{i}', 'w', encoding='utf-8').write(json.loads(line)['text'][:4000])
PY
}
text_seeds

# Weights of weights_fuzz's small model: a real file (PyTorch reference,
# mode byte 0), and raw values (mode byte 1): finite, one NaN, one +Inf.
weights_seeds() {
  local out="$corpus/weights_fuzz"
  echo '{"vocab_size": 11, "hidden_size": 4, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 8, "max_position_embeddings": 6}' > "$tmp/w.json"
  /usr/bin/python3 tools/torch_ref/bert_torch.py init --config "$tmp/w.json" \
      --out "$tmp/w.safetensors" --seed 1 >/dev/null
  { printf '\000'; cat "$tmp/w.safetensors"; } > "$out/file-0"
  /usr/bin/python3 - "$out" <<'PY'
import struct, sys
out = sys.argv[1]
vals = [0.01 * (i % 17) for i in range(64)]
open(f"{out}/values-finite", "wb").write(b"\x01" + struct.pack("<64f", *vals))
nan = list(vals); nan[7] = float("nan")
open(f"{out}/values-nan", "wb").write(b"\x01" + struct.pack("<64f", *nan))
inf = list(vals); inf[30] = float("inf")
open(f"{out}/values-inf", "wb").write(b"\x03" + struct.pack("<64f", *inf))
PY
}
weights_seeds

"$bin/fuzz/make_seeds" "$corpus" "$corpus"/job_spec_fuzz/docs-jobs \
  "$corpus"/job_spec_fuzz/quickstart "$corpus"/job_spec_fuzz/cluster-test \
  "$corpus"/job_spec_fuzz/cluster-test-bad
du -sh "$corpus"/*
