#!/usr/bin/env bash
# Descriptor limits (issue 56, item 4), with real processes over 127.0.0.1:
#  1. every daemon (coordinator, shard, train worker) started with a soft
#     limit of 256 under a hard one of 4096 raises it to 4096 and says so;
#  2. a coordinator whose descriptors run out (a limit of 64 that it cannot
#     raise, 100 connections held open) sheds new connections meanwhile and
#     serves again once they close; gRPC 1.51's own listener stopped for
#     good at the first EMFILE ("Failed accept4: Too many open files"), so
#     no client was ever served again;
#  3. a train worker whose limit (96, not raisable) is below the number of
#     data files (200) reads all of them and the job succeeds (a descriptor
#     kept per file read failed it with "Too many open files").
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
source "$(dirname "$0")/process_lib.sh"
init_work descriptor_limits

nofile() {  # nofile PID: "SOFT HARD" of its descriptor limit
  awk '/^Max open files/ {print $4, $5}' "/proc/$1/limits"
}
# limited SOFT:HARD BINARY ARGS...: BINARY under that limit (prlimit execs it,
# so $! is the daemon's pid).
limited() { local l="$1"; shift; exec prlimit --nofile="$l" "$@"; }

# 1. Every daemon raises its soft limit to the hard one.
cat > "$work/coordinator-256.sh" <<EOF
#!/bin/sh
exec prlimit --nofile=256:4096 "$COORD" "\$@"
EOF
chmod +x "$work/coordinator-256.sh"
start_coordinator "$work/coordinator-256.sh" 0 "$work/coordinator.log"
coord="$BERTPS_COORDINATOR"
(limited 256:4096 "$SERVER" --coordinator "$coord" --port 0 \
   --address_file "$work/ps.address") > "$work/ps.log" 2>&1 &
ps_pid=$!; pids+=($ps_pid)
(limited 256:4096 "$WORKER" --role=train --coordinator "$coord") \
  > "$work/w-raised.log" 2>&1 &
w_raised=$!; pids+=($w_raised)
for _ in $(seq 1 200); do [ -s "$work/ps.address" ] && break; sleep 0.05; done
sleep 0.5
for d in "coordinator $coord_pid $work/coordinator.log" \
         "shard $ps_pid $work/ps.log" "worker $w_raised $work/w-raised.log"; do
  set -- $d
  [ "$(nofile "$2")" = "4096 4096" ] \
    || fail "$1: descriptor limit $(nofile "$2"), not raised to 4096"
  grep -q "raised the descriptor limit from 256 to 4096" "$3" \
    || fail "$1 does not say it raised its descriptor limit: $(head -3 "$3")"
  echo "$1: raised the descriptor limit from 256 to 4096"
done
stop_gently "$w_raised" "the worker"

# 2. A coordinator out of descriptors sheds, and serves again.
cat > "$work/coordinator-64.sh" <<EOF
#!/bin/sh
exec prlimit --nofile=64:64 "$COORD" "\$@"
EOF
chmod +x "$work/coordinator-64.sh"
main_coord="$coord"; main_coord_pid="$coord_pid"
start_coordinator "$work/coordinator-64.sh" 0 "$work/coordinator-64.log"
low="$BERTPS_COORDINATOR"; low_pid="$coord_pid"
export BERTPS_COORDINATOR="$main_coord"
timeout 20 "$CTL" --coordinator "$low" list > /dev/null \
  || fail "the coordinator under 64 descriptors does not answer at all"
/usr/bin/python3 - "${low##*:}" "$work/held" <<'PY' &
import os, socket, sys, time
port, flag = int(sys.argv[1]), sys.argv[2]
held = []
for _ in range(100):
    try:
        held.append(socket.create_connection(("127.0.0.1", port), timeout=2))
    except OSError:
        break
open(flag, "w").write(str(len(held)))
while os.path.exists(flag):
    time.sleep(0.05)
for s in held:
    s.close()
PY
holder=$!; pids+=($holder)
for _ in $(seq 1 200); do [ -s "$work/held" ] && break; sleep 0.05; done
[ -s "$work/held" ] || fail "the connections were not opened"
sleep 1
in_use=$(ls "/proc/$low_pid/fd" | wc -l)
echo "100 connections held: $(cat "$work/held") connected, the coordinator holds $in_use descriptors of 64"
rm -f "$work/held"; wait "$holder"
served=""
for _ in $(seq 1 40); do
  if timeout 5 "$CTL" --coordinator "$low" list > /dev/null 2>&1; then served=1; break; fi
  sleep 0.25
done
[ -n "$served" ] || fail "the coordinator no longer answers after running out of descriptors ($(grep -c 'Failed accept4' "$work/coordinator-64.log" || true) 'Failed accept4' lines)"
echo "served again after the connections closed"
grep -q "closed .* new connection(s)" "$work/coordinator-64.log" \
  || fail "the coordinator does not say it shed connections"
grep -q "serving new connections again" "$work/coordinator-64.log" \
  || fail "the coordinator does not say it serves again"
grep "listener.cc" "$work/coordinator-64.log" | sed 's/^[^]]*] //'
stop_gently "$low_pid" "the coordinator under 64 descriptors"

# 3. A train worker reads 200 files under a limit of 96.
tiny_model_data "$BERT_LOCAL"
/usr/bin/python3 - "$work/data" "$work/many" 200 <<'PY'
import glob, os, struct, sys
src, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
records = []
for path in sorted(glob.glob(os.path.join(src, "*.tfrecord"))):
    b = open(path, "rb").read()
    at = 0
    while at < len(b):
        length = struct.unpack("<Q", b[at:at + 8])[0]
        end = at + 12 + length + 4
        records.append(b[at:end])  # framing and CRCs kept as they are
        at = end
os.makedirs(out, exist_ok=True)
for i in range(n):
    with open(os.path.join(out, "part-%05d.tfrecord" % i), "wb") as f:
        f.write(records[i % len(records)])
PY
(limited 96:96 "$WORKER" --role=train --coordinator "$coord" --threads 1) \
  > "$work/w-96.log" 2>&1 &
w96=$!; pids+=($w96)
tiny_spec many-files 30 | sed "s|data: .*|data: \"$work/many/*.tfrecord\"|" \
  > "$work/many.pbtxt"
job=$("$CTL" submit "$work/many.pbtxt") || fail "submit"
rc=0; timeout 120 "$CTL" watch "$job" > "$work/watch.out" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || fail "the job over 200 files did not succeed under a limit of 96 (watch exit $rc): $(field "$job" 's.get("reason", "") or s.get("waiting", "")')"
read_files=$(field "$job" 's["progress"]["step"]')
echo "job over 200 files, worker limit 96: SUCCEEDED at step $read_files (240 examples: every file read)"
stop_gently "$w96" "the worker under 96 descriptors"
stop_gently "$ps_pid" "the shard"
stop_gently "$main_coord_pid" "the coordinator"
echo "PASS"
