#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (clang-14, ASan + UBSan, --config=fuzz)
# in a private Bazel output base and runs each on its seed corpus for a
# budget (docs/fuzzing.md):
#   tools/fuzz.sh --short              ~10 s per target (tools/test.sh runs it)
#   tools/fuzz.sh --soak SECONDS       SECONDS per target
#   tools/fuzz.sh ... TARGET...        only these (e.g. ps_shard_fuzz)
# A soak's new inputs go to out/fuzz/<target>/corpus (kept for later soaks;
# a short run starts from the seeds alone), logs to
# out/fuzz/<target>.log, crashes to out/fuzz/<target>-crash-*; fuzz/corpus/
# is only read. Prints "fuzz: N clean, N failed"; exits non-zero on a failure.
# The private Bazel server ($BERTPS_FUZZ_OUTPUT_BASE, default
# $HOME/.cache/bertps-fuzz-ob) is shut down at the end, so the main build's
# server and outputs are never touched.
set -uo pipefail
cd "$(dirname "$0")/.."

budget=10
short=1
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --short) budget=10; short=1 ;;
    --soak) shift; budget="${1:?--soak needs SECONDS}"; short=0 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) targets+=("$1") ;;
  esac
  shift
done
if [ ${#targets[@]} -eq 0 ]; then
  for f in fuzz/*_fuzz.cc; do targets+=("$(basename "$f" .cc)"); done
fi
if [ ! -f data/vocab/bert-base-uncased-vocab.txt ]; then
  tools/get_data.sh || { echo "fuzz: tools/get_data.sh failed"; exit 1; }
fi

ob="${BERTPS_FUZZ_OUTPUT_BASE:-$HOME/.cache/bertps-fuzz-ob}"
bzl() { bazel --output_base="$ob" "$@"; }
trap 'bzl shutdown >/dev/null 2>&1' EXIT

labels=()
for t in "${targets[@]}"; do labels+=("//fuzz:$t"); done
start=$(date +%s)
if ! bzl build --config=fuzz "${labels[@]}"; then
  echo "fuzz: build failed"
  echo "fuzz: 0 clean, ${#targets[@]} failed"
  exit 1
fi
bin="$(bzl info --config=fuzz bazel-bin 2>/dev/null)/fuzz"
echo "fuzz: built in $(( $(date +%s) - start )) s; ${budget} s per target"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
out=out/fuzz
mkdir -p "$out"
clean=0
failed=0
for t in "${targets[@]}"; do
  # A short run starts from the seeds only (bounded, same every time); a
  # soak also from what earlier soaks found.
  work="$out/$t/corpus"
  [ "$short" -eq 1 ] && work="$out/$t/short-corpus" && rm -rf "$work"
  mkdir -p "$work"
  log="$out/$t.log"
  "$bin/$t" -max_total_time="$budget" -timeout=20 -rss_limit_mb=2560 \
    -print_final_stats=1 -artifact_prefix="$out/$t-" \
    "$work" "fuzz/corpus/$t" > "$log" 2>&1
  rc=$?
  [ "$short" -eq 1 ] && rm -rf "$work"
  runs=$(grep -oE '^stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$')
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -n 1)
  if [ "$rc" -eq 0 ]; then
    clean=$((clean + 1))
    echo "fuzz: $t clean (${runs:-?} runs, ${cov:-cov: ?})"
  else
    failed=$((failed + 1))
    echo "fuzz: $t FAILED (exit $rc), log $log:"
    grep -E 'ERROR|invariant|runtime error|SUMMARY|Test unit written' "$log" | head -n 8
    echo "  reproduce: $bin/$t $out/$t-crash-... (or the normal build's bazel-bin/fuzz/$t FILE)"
  fi
done
# Nothing a fuzzer wrote lands in the working tree (job directories are
# confined to each fuzzer's scratch directory).
stray=$(find . -maxdepth 3 -name .bertps-job -not -path './out/*' -not -path './bazel-*' 2>/dev/null | head -5)
if [ -n "$stray" ]; then
  echo "fuzz: job directories written into the working tree: $stray"
  failed=$((failed + 1))
fi
echo "fuzz: ${clean} clean, ${failed} failed"
[ "$failed" -eq 0 ]
