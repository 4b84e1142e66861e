#!/usr/bin/env bash
# Bazel's --workspace_status_command (.bazelrc): the commit the binaries are
# built from, for their --version (common/version.h). "-dirty" marks local
# changes; "unknown" outside a git checkout.
commit=$(git rev-parse --short=12 HEAD 2>/dev/null) || commit=unknown
if [ "$commit" != unknown ] && ! git diff --quiet HEAD 2>/dev/null; then
  commit="$commit-dirty"
fi
echo "STABLE_BERTPS_COMMIT $commit"
