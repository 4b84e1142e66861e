#!/usr/bin/env bash
# The Dockerfile's runtime stage has every shared library the binaries need:
# `ldd` of each binary the image ships, each library mapped to its Debian
# package with `dpkg -S`, and that package must be in the Dockerfile's
# RUNTIME_PACKAGES (docker itself cannot run here). Also: every listed
# package exists in apt's index (no typos), the build stage builds and copies
# every binary, and the image runs as a non-root user.
#
#   dockerfile_test.sh [--coverage-only] DOCKERFILE BINARY...
# Negative case: the same check on a copy without libgrpc29 must fail.
set -euo pipefail
export LC_ALL=C
coverage_only=0
if [ "$1" = --coverage-only ]; then coverage_only=1; shift; fi
dockerfile="$1"; shift
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v dpkg >/dev/null || fail "dpkg is needed (Debian)"

# ARG RUNTIME_PACKAGES="\
#     pkg \
#     ..."
listed=$(sed -n '/^ARG RUNTIME_PACKAGES="/,/"$/p' "$dockerfile" |
         sed 's/^ARG RUNTIME_PACKAGES="//; s/[\\"]//g' | tr -s ' \n' '\n' | sed '/^$/d' | sort -u)
[ -n "$listed" ] || fail "$dockerfile: no ARG RUNTIME_PACKAGES list"
grep -q 'apt-get install .*--no-install-recommends' "$dockerfile" &&
  grep -q '\${RUNTIME_PACKAGES}' "$dockerfile" ||
  fail "$dockerfile: the runtime stage does not install \${RUNTIME_PACKAGES}"
echo "runtime packages: $(echo "$listed" | wc -l)"

# Unique libraries of all binaries ("LIB BINARY" lines, first binary wins).
libs=$(for bin in "$@"; do
  name=$(basename "$bin")
  grep -q "$name" "$dockerfile" || fail "$dockerfile does not ship $name"
  out=$(ldd "$bin") || fail "ldd $bin failed"
  if grep -q "not found" <<<"$out"; then fail "$name: $(grep 'not found' <<<"$out")"; fi
  awk -v n="$name" '/=>/ && $3 ~ /^\// {print $3, n} /^\t\/[^ ]+ \(/ {print $1, n}' <<<"$out"
done | sort -u -k1,1)
# One dpkg -S for all of them: "pkg:arch: /path" lines. A library dpkg does
# not know under the path ldd printed is looked up with symlinks resolved,
# then on the other side of the /usr merge.
declare -A owner=()
lookup() {
  local line pkgs path
  while IFS= read -r line; do
    pkgs="${line%%: /*}"; path="/${line#*: /}"
    owner["$path"]="${pkgs%%[:,]*}"
  done < <(dpkg -S "$@" 2>/dev/null || true)
}
all=$(awk '{print $1}' <<<"$libs")
lookup $all
unresolved() { for l in $all; do [ -n "${owner[$l]:-}" ] || echo "$1$l"; done; }
lookup $(unresolved /usr)        # /lib/... as /usr/lib/...
for l in $all; do
  [ -n "${owner[$l]:-}" ] || [ -z "${owner[/usr$l]:-}" ] || owner["$l"]="${owner[/usr$l]}"
done
for l in $(unresolved ""); do   # symlinks resolved, one by one (rare)
  r=$(readlink -f "$l"); lookup "$r" "${r#/usr}"
  owner["$l"]="${owner[$r]:-${owner[${r#/usr}]:-}}"
done
needed=""
while read -r lib name; do
  pkg="${owner[$lib]:-}"
  [ -n "$pkg" ] || fail "$name: no Debian package owns $lib"
  needed+="$pkg $name $lib"$'\n'
done <<<"$libs"
missing=0
while read -r pkg name lib; do
  [ -n "$pkg" ] || continue
  if ! grep -qx "$pkg" <<<"$listed"; then
    echo "MISSING: $pkg (for $lib, needed by $name)"
    missing=1
  fi
done <<<"$(sort -u <<<"$needed")"
[ "$missing" = 0 ] || fail "add the packages above to RUNTIME_PACKAGES in $dockerfile"
[ "$coverage_only" = 0 ] || exit 0
used=$(awk '{print $1}' <<<"$needed" | sed '/^$/d' | sort -u)
echo "linked packages ($(wc -l <<<"$used")): $(tr '\n' ' ' <<<"$used")"
extra=$(comm -23 <(echo "$listed") <(echo "$used") | tr '\n' ' ')
echo "listed but not linked today (tools or libraries on their way): ${extra:-none}"

# Every listed package is a real Debian 12 package.
# shellcheck disable=SC2086
if ! apt-cache show --no-all-versions $listed >/dev/null 2>&1; then
  for p in $listed; do
    apt-cache show --no-all-versions "$p" >/dev/null 2>&1 ||
        fail "RUNTIME_PACKAGES: apt knows no package '$p'"
  done
fi

# The build stage builds every shipped binary; the image is non-root.
for t in //server/coordinator:bertps_coordinator //server/ps:bertps_server \
         //worker:bertps_worker //tools:bertpsctl //deploy/probe:bertps_probe; do
  grep -qF "$t" "$dockerfile" || fail "$dockerfile does not build $t"
done
grep -q '^FROM debian:bookworm AS build' "$dockerfile" || fail "no Debian bookworm build stage"
grep -q '^FROM debian:bookworm-slim' "$dockerfile" || fail "no Debian bookworm-slim runtime stage"
grep -q 'tools/setup.sh --build-only' "$dockerfile" || fail "the build stage does not use tools/setup.sh"
grep -q '^USER 10001:10001' "$dockerfile" || fail "the image does not run as uid 10001"
grep -q '^ENTRYPOINT \[' "$dockerfile" || fail "no exec-form ENTRYPOINT"
broken="${TEST_TMPDIR:-$(mktemp -d)}/Dockerfile.without-libgrpc29"
sed '/^ *libgrpc29 \\$/d' "$dockerfile" >"$broken"
! grep -q libgrpc29 "$broken" || fail "could not remove libgrpc29 from the copy"
if "$0" --coverage-only "$broken" "$@" >"$broken.out" 2>&1; then
  fail "a Dockerfile without libgrpc29 was accepted"
fi
grep -q "MISSING: libgrpc29" "$broken.out" || { cat "$broken.out"; fail "libgrpc29 not named"; }
echo "refused as expected: a runtime stage without libgrpc29"
echo "PASS: the runtime stage covers the libraries of $# binaries"
