#!/usr/bin/env bash
# Runs the PyTorch reference's own checks (finite differences, numpy forward).
set -euo pipefail
/usr/bin/python3 "$(dirname "$0")/selftest.py"
echo PASS
