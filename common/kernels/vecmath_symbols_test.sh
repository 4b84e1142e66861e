#!/usr/bin/env bash
# Every global symbol of vecmath.h's AVX-512 build lies in its own
# namespaces: bertps::kernels::avx512 (its functions) and the renamed Eigen.
# An inline function of a shared header (Eigen's, the standard library's)
# emitted there under its usual name could be picked by the linker for
# every caller, and would then run AVX-512 instructions on CPUs without them.
set -euo pipefail
lib=$(find -L . \( -name '*vecmath_avx512*.a' -o -name '*vecmath_Uavx512*.so' -o -name '*vecmath_avx512*.so' \) | head -1)
[ -n "$lib" ] || { echo "no archive of :vecmath_avx512 in the runfiles"; exit 1; }
syms=$(nm -C --defined-only --extern-only "$lib" | awk 'NF >= 3 { $1 = ""; $2 = ""; sub(/^  /, ""); print }')
[ -n "$syms" ] || { echo "no symbols in $lib"; exit 1; }
echo "$syms" | sed 's/^/  /'
# (A shared library also holds the linker's own end-of-section symbols.)
bad=$(echo "$syms" | grep -v -E '^(bertps::kernels::avx512::|bertps_vecmath_avx512_eigen::|__bss_start$|_edata$|_end$)' || true)
if [ -n "$bad" ]; then
  echo "symbols of the AVX-512 build outside its namespaces:"
  echo "$bad"
  exit 1
fi
# And it is AVX-512 code (zmm registers).
zmm=$(objdump -d "$lib" | grep -c zmm || true)
[ "$zmm" -gt 0 ] || { echo "no AVX-512 instructions in $lib"; exit 1; }
echo "$zmm instructions on zmm registers"
echo PASS
