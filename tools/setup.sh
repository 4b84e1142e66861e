#!/usr/bin/env bash
# Installs every system package bertps needs on Debian 12. Idempotent: when
# everything is present it only checks and returns in well under a second.
set -euo pipefail

PACKAGES=(
  # build
  bazel-bootstrap clang-14 libclang-rt-14-dev
  # libraries
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libeigen3-dev libdnnl-dev libabsl-dev libgoogle-glog-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libutf8proc-dev prometheus-cpp-dev libsqlite3-dev libyaml-cpp-dev
  libicu-dev zlib1g-dev libssl-dev
  # reference peer for parity tests and benchmarks
  python3 python3-torch python3-numpy libopenblas0
  # a stepped wall clock for one process (tests/coordinator_pause_test.sh)
  faketime
)

# `setup.sh --build-only` (the Dockerfile's build stage): only what building
# the binaries needs, without the test and benchmark peers.
BUILD_ONLY=0
if [ "${1:-}" = "--build-only" ]; then
  BUILD_ONLY=1
  TEST_ONLY=" clang-14 libclang-rt-14-dev python3 python3-torch python3-numpy libopenblas0 faketime "
  kept=()
  for p in "${PACKAGES[@]}"; do
    [[ "$TEST_ONLY" == *" $p "* ]] || kept+=("$p")
  done
  PACKAGES=("${kept[@]}")
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# Node.js runs the independent reference tokenizer (tools/get_data.sh fetches
# it with npm); the machine's own node is used when present.
if [ "$BUILD_ONLY" = 0 ] && { ! command -v node >/dev/null 2>&1 ||
                              ! command -v npm >/dev/null 2>&1; }; then
  missing+=(nodejs npm)
fi

if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
  $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
