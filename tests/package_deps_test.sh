#!/usr/bin/env bash
# The package layering of docs/architecture.md, read from the BUILD files
# (each given as an argument): common/ depends on none of server/, worker/,
# tools/; worker/ not on server/; server/ps and server/coordinator not on
# each other. A dependency that breaks it fails here with its file and line.
set -euo pipefail
bad=0
check() {  # check FILE PATTERN WHY (a test's data files are not dependencies)
  local hits
  if hits=$(awk '/data = \[/ { d = 1 } d && /\]/ { d = 0; next } !d { print FNR ":" $0 }' "$1" |
            grep -E "\"$2"); then
    echo "FAIL: $1: $3:"; echo "$hits"; bad=1
  fi
}
n=0
for f in "$@"; do
  [ -f "$f" ] || { echo "FAIL: no file $f"; exit 1; }
  case "/$f" in
    */common/*) check "$f" '//(server|worker|tools)[/:]' "common/ depends on server/, worker/ or tools/" ;;
    */worker/*) check "$f" '//server[/:]' "worker/ depends on server/" ;;
    */server/ps/*) check "$f" '//server/coordinator[/:]' "server/ps depends on server/coordinator" ;;
    */server/coordinator/*) check "$f" '//server/ps[/:]' "server/coordinator depends on server/ps" ;;
    *) echo "FAIL: $f is not a file this test knows"; exit 1 ;;
  esac
  n=$((n + 1))
done
[ "$n" -ge 10 ] || { echo "FAIL: only $n BUILD files"; exit 1; }
[ "$bad" = 0 ] || exit 1
echo "PASS: $n BUILD files keep the layering"
