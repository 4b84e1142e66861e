#!/usr/bin/env bash
# Parity of the C++ tokenizer (`bert_local tokenize`, common/text) with an
# independent implementation of BERT's tokenization.py: the JavaScript port in
# npm @tensorflow-models/qna, driven by common/text/js_ref_tokenize.js, on
# real text found on this machine (Debian licence and copyright files,
# package descriptions, multilingual files of installed packages) plus edge
# cases and seeded random lines mixing many scripts with ill-formed bytes. Ids must agree on 100% of lines with the port's known
# departures from tokenization.py corrected (--mode faithful; see FIXES in
# js_ref_tokenize.js); the agreement of the port as shipped (--mode raw) is
# printed for information.
#
# Needs the data of tools/get_data.sh (vocab + the port): from
# $BERTPS_DATA_DIR, else the data/ dir of the workspace this test lives in.
set -euo pipefail
export LC_ALL=C  # byte semantics for grep/sort: the same corpus everywhere
BERT_LOCAL="$1"
JS_DRIVER="$2"
work="${TEST_TMPDIR:-$(mktemp -d)}"

if [ -z "${BERTPS_DATA_DIR:-}" ]; then
  # The test script in the runfiles is a symlink into the workspace.
  root="$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)"
  BERTPS_DATA_DIR="$root/data"
fi
vocab="$BERTPS_DATA_DIR/vocab/bert-base-uncased-vocab.txt"
vocab_json="$BERTPS_DATA_DIR/vocab/bert-base-uncased-sentencepiece.json"
ref="$BERTPS_DATA_DIR/ref/tfjs-qna"
for f in "$vocab" "$vocab_json" "$ref/dist/bert_tokenizer.js"; do
  if [ ! -f "$f" ]; then
    echo "FAIL: $f is missing: run tools/get_data.sh first" \
         "(or set BERTPS_DATA_DIR)" >&2
    exit 1
  fi
done
command -v node >/dev/null || { echo "FAIL: node is not installed" >&2; exit 1; }

# ---------------------------------------------------------------- corpus
corpus="$work/corpus.txt"
: >"$corpus"
add() {  # add FILE MAX_BYTES: up to MAX_BYTES of whole lines of FILE
  [ -r "$1" ] || return 0
  head -c "$2" "$1" | sed '$d' >>"$corpus" || true
}
# Licences: plain English prose.
for f in /usr/share/common-licenses/*; do
  [ -f "$f" ] && add "$f" 40000
done
# Names from all over the world: the non-ASCII lines of copyright files.
find /usr/share/doc -maxdepth 2 -name copyright -type f 2>/dev/null | sort |
  xargs -r grep -haP '[^\x00-\x7F]' 2>/dev/null | head -c 250000 | sed '$d' >>"$corpus" || true
# Package descriptions (all ASCII or UTF-8 prose).
if command -v apt-cache >/dev/null; then
  apt-cache dumpavail 2>/dev/null | grep -a '^ \|^Description' |
    head -c 200000 | sed '$d' >>"$corpus" || true
fi
# Other scripts and symbols: Greek, Cyrillic, Hebrew, Thai, CJK, emoji,
# math, compose sequences.
for f in /usr/share/X11/locale/en_US.UTF-8/Compose \
         /usr/share/X11/locale/el_GR.UTF-8/Compose \
         /usr/share/vim/vim*/doc/digraph.txt \
         /usr/lib/python3/dist-packages/chardet/langgreekmodel.py \
         /usr/lib/python3/dist-packages/chardet/langrussianmodel.py \
         /usr/lib/python3/dist-packages/chardet/langhebrewmodel.py \
         /usr/lib/python3/dist-packages/chardet/langthaimodel.py \
         /usr/lib/python3/dist-packages/charset_normalizer/assets/__init__.py \
         /usr/lib/python3/dist-packages/pip/_vendor/rich/_emoji_codes.py \
         /usr/lib/python3/dist-packages/sympy/printing/pretty/tests/test_pretty.py; do
  add "$f" 60000
done
# Edge cases, one per line.
{
  printf 'a new\b\v [test]\tx\fy\x1cz\x7f!\n'
  printf 'zero\xe2\x80\x8bwidth soft\xc2\xadhyphen bom\xef\xbb\xbfhere nel\xc2\x85here\n'
  printf 'nbsp\xc2\xa0here ideo\xe3\x80\x80space ls\xe2\x80\xa8ps\xe2\x80\xa9end\n'
  printf 'ab\xe4\xb8\xad\xe6\x96\x87cd \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83\x88 \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4\n'
  printf 'Caf\xc3\xa9 NA\xc3\x8fVE \xc3\x85ngstr\xc3\xb6m e\xcc\x81te\xcc\x81 \xc4\xb0stanbul\n'
  printf '\xce\x9f\xce\x94\xce\x9f\xce\xa3 \xce\xa3\xce\x91 \xce\x91\xce\xa3.\xce\x92 \xce\x91\xce\xa3, \xce\x86\xce\xb8\xce\xae\xce\xbd\xce\xb1\n'
  printf '\xe2\x80\x9cquoted\xe2\x80\x9d \xc2\xabguillemets\xc2\xbb em\xe2\x80\x94dash \xc2\xa9 \xe2\x82\xac5 a$b+c<d=e>f^g`h|i~j\n'
  printf '\xef\xac\x81ne x\xc2\xb2 \xef\xbc\xa6\xef\xbd\x95\xef\xbd\x8c\xef\xbd\x8c wait\xe2\x80\xa6 \xe2\x85\xa0\n'
  printf 'bad\xffbyte trunc\xe2\x82 x surrogate\xed\xa0\x80y overlong\xc0\xafz\n'
  printf 'unaffable John Johanson'"'"'s house electroencephalographically\n'
  printf '%0201d %0200d\n' 7 7
  printf '\n   \n\t\n'
  printf '\xf0\x9f\x98\x81 \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd x\xe1\xbf\xafy\n'
  printf 'last line\n'
} >"$work/edge.txt"
cat "$work/edge.txt" >>"$corpus"
# Seeded random lines: code points from many scripts and classes (controls,
# marks, Greek capitals, CJK, Hangul, fullwidth, emoji, ...) mixed with ASCII,
# with ill-formed bytes sprinkled in.
node - >>"$corpus" <<'JS'
let x = 20240229;
const rnd = (n) => { x = (Math.imul(x, 1103515245) + 12345) >>> 0; return x % n; };
const R = (a, b) => [a, b];
const pools = [R(0x20, 0x7f), R(0x20, 0x7f), R(0x20, 0x7f), R(0x20, 0x7f), R(0, 0x20),
  R(0x80, 0x250), R(0x300, 0x370), R(0x370, 0x400), R(0x400, 0x530), R(0x900, 0x980),
  R(0xe00, 0xe80), R(0x1f00, 0x2000), R(0x2000, 0x2070), R(0x3040, 0x3100),
  R(0x4e00, 0x4e40), R(0xac00, 0xac40), R(0xf900, 0xf910), R(0xfb00, 0xfb50),
  R(0xff00, 0xff60), R(0x1f600, 0x1f650), R(0x20000, 0x20010), R(0x2f800, 0x2f810)];
const special = [0x3a3, 0x3a3, 0x391, 0x130, 0x2028, 0x2029, 0xfeff, 0x200b, 0xad, 0x85, 0xfffd, 0x1fef];
const out = [];
for (let line = 0; line < 5000; ++line) {
  let s = '';
  for (let n = rnd(40); n > 0; --n) {
    if (rnd(10) === 0) { s += String.fromCodePoint(special[rnd(special.length)]); continue; }
    const [a, b] = pools[rnd(pools.length)];
    s += String.fromCodePoint(a + rnd(b - a));
  }
  const bytes = [...Buffer.from(s.replace(/\n/g, ' '), 'utf8')];
  for (let k = rnd(5) === 0 ? 1 + rnd(3) : 0; k > 0; --k) {
    bytes.splice(rnd(bytes.length + 1), 0, 0x80 + rnd(0x80));
  }
  out.push(Buffer.from(bytes), Buffer.from('\n'));
}
process.stdout.write(Buffer.concat(out));
JS
printf 'a last line without a newline' >>"$corpus"
bytes=$(wc -c <"$corpus")
lines=$(wc -l <"$corpus")
nonascii=$(grep -caP '[^\x00-\x7F]' "$corpus" || true)
echo "corpus: $bytes bytes, $lines lines, $nonascii lines with non-ASCII"
if [ "$bytes" -lt 200000 ] || [ "$nonascii" -lt 500 ]; then
  echo "FAIL: too little text found on this machine for a meaningful test" >&2
  exit 1
fi

# ------------------------------------------------------------------ run
"$BERT_LOCAL" tokenize --vocab "$vocab" <"$corpus" >"$work/cpp.txt"
for mode in faithful raw; do
  node "$JS_DRIVER" tokenize --ref "$ref" --vocab-json "$vocab_json" \
      --mode "$mode" <"$corpus" >"$work/js_$mode.txt"
done

compare() {  # compare NAME FILE: prints agreement, returns 1 on any diff
  local n_cpp n_js same
  n_cpp=$(wc -l <"$work/cpp.txt")
  n_js=$(wc -l <"$2")
  if [ "$n_cpp" != "$n_js" ]; then
    echo "$1: line counts differ: bertps $n_cpp, reference $n_js"
    return 1
  fi
  same=$(paste -d '\t' "$work/cpp.txt" "$2" | awk -F'\t' '$1 == $2' | wc -l)
  awk -v s="$same" -v n="$n_cpp" -v name="$1" \
      'BEGIN { printf "%s: %d of %d lines identical (%.3f%%)\n", name, s, n, n ? 100 * s / n : 100 }'
  [ "$same" = "$n_cpp" ]
}

compare "raw reference (as shipped)" "$work/js_raw.txt" || true
if ! compare "reference with FIXES (tokenization.py)" "$work/js_faithful.txt"; then
  echo "first differing lines (input / bertps / reference):"
  paste -d '\t' "$work/cpp.txt" "$work/js_faithful.txt" | awk -F'\t' '$1 != $2 { print NR }' |
    head -5 | while read -r n; do
      echo "line $n: $(sed -n "${n}p" "$corpus" | head -c 300)"
      echo "  bertps:    $(sed -n "${n}p" "$work/cpp.txt" | head -c 300)"
      echo "  reference: $(sed -n "${n}p" "$work/js_faithful.txt" | head -c 300)"
    done
  echo "FAIL: ids differ"
  exit 1
fi
echo "parity: 100% of lines identical"
echo PASS
