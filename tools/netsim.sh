#!/usr/bin/env bash
# A cluster emulator on one Linux host: H emulated hosts, each a network
# namespace with one link to a shared switch (a bridge in a namespace of its
# own), each link shaped to a chosen rate in both directions with tc's token
# bucket (tbf). Traffic stays between these namespaces: nothing is routed to
# or from the real host's network. Needs root (CAP_NET_ADMIN).
#
#   tools/netsim.sh up HOSTS RATE       e.g. "up 4 1gbit" (tc rate units)
#   tools/netsim.sh addr I              host I's address (0-based)
#   tools/netsim.sh exec I CMD...       run CMD on host I
#   tools/netsim.sh measure [A B [MB]]  what the links deliver: one TCP stream
#                                       host A -> host B (default 0 1 200),
#                                       prints JSON with Gbit/s
#   tools/netsim.sh mesh S W BYTES [ROUNDS [GAP_MS]]
#                                       raw TCP in a BSP step's pattern: hosts
#                                       0..S-1 "shards", S..S+W-1 "workers",
#                                       each round a pull phase (every shard
#                                       sends BYTES/S to every worker) and a
#                                       push phase (the reverse); JSON with
#                                       each phase's time (netsim_mesh.py)
#   tools/netsim.sh trace FILE [MS]     until stopped, every MS ms (default
#                                       50) one line of JSON: each link's
#                                       bytes so far both ways and the real
#                                       host's busy CPU time
#   tools/netsim.sh down                stop everything on the hosts, remove
#                                       them (also what an interrupted run left)
#   NETSIM_RTO_MIN=10ms tools/netsim.sh up ...  hosts whose TCP retransmits
#                                       after 10 ms at the least (default:
#                                       the kernel's 200 ms)
#   NETSIM_QUEUE_MS=3000 tools/netsim.sh up ...  each link direction queues
#                                       3 s of traffic before it drops, as a
#                                       deep-buffer switch (default 100 ms)
#   tools/netsim.sh run HOSTS RATE -- CMD...
#                                       up, run CMD on the real host with
#                                       NETSIM set to this script, down (also
#                                       when interrupted)
#
# No added latency: this kernel's tc has no netem; the links differ from
# real ones in rate alone (docs/scaling.md says what that leaves out). The
# kernel's neighbour-table limits (global) are raised while it is up.
set -euo pipefail

PREFIX=bpsim
SWITCH_NS="$PREFIX-switch"
SUBNET=10.213.0
STATE=/run/bertps-netsim

die() { echo "netsim: $*" >&2; exit 1; }

need_root() {
  [ "$(id -u)" -eq 0 ] || die "needs root (CAP_NET_ADMIN) to make namespaces"
  command -v ip >/dev/null && command -v tc >/dev/null ||
    die "needs ip and tc (Debian's iproute2)"
}

host_ns() { echo "$PREFIX-h$1"; }
addr_of() { echo "$SUBNET.$(($1 + 1))"; }

hosts_up() { [ -f "$STATE/hosts" ] && cat "$STATE/hosts" || echo 0; }

# tc's rate ("10gbit", "500mbit", ...) in bytes per second.
rate_bytes() {
  /usr/bin/python3 - "$1" <<'PY'
import re, sys
m = re.fullmatch(r"([0-9.]+)\s*([kmg]?)(bit|bps)", sys.argv[1].lower())
if not m:
    sys.exit("netsim: rate %r: use tc units such as 1gbit, 500mbit" % sys.argv[1])
v = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]
print(int(v / 8 if m.group(3) == "bit" else v))
PY
}

# One direction of a link: a token bucket of `rate` whose bucket holds 10 ms
# of traffic (at least 1 MB: the veths hand over 64 KB segments whole), and a
# drop-tail queue of NETSIM_QUEUE_MS of traffic (default 100 ms) before it.
shape() {  # NS DEV RATE
  local bps burst
  bps=$(rate_bytes "$3")
  burst=$((bps / 100))
  [ "$burst" -ge 1048576 ] || burst=1048576
  ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "$3" \
      burst "$burst" latency "${NETSIM_QUEUE_MS:-100}ms"
}

NEIGH=/proc/sys/net/ipv4/neigh/default

# The kernel's ARP table is one table for every namespace, capped by
# gc_thresh3 (1024 by default): H hosts that all talk to each other need
# about H x (H - 1) entries, and past the cap new neighbours fail
# ("neighbor table overflow") and their connections hang in SYN-SENT. Raised
# for the emulator's life; `down` puts the old values back.
raise_neighbour_limits() {
  local hosts="$1" need
  need=$((2 * hosts * hosts))
  [ -f "$STATE/neigh" ] || echo "$(cat $NEIGH/gc_thresh1) $(cat $NEIGH/gc_thresh2) $(cat $NEIGH/gc_thresh3)" > "$STATE/neigh"
  if [ "$(cat $NEIGH/gc_thresh3)" -lt "$need" ]; then
    echo "$((need / 4))" > $NEIGH/gc_thresh1
    echo "$((need / 2))" > $NEIGH/gc_thresh2
    echo "$need" > $NEIGH/gc_thresh3
  fi
}

restore_neighbour_limits() {
  [ -f "$STATE/neigh" ] || return 0
  local t1 t2 t3
  read -r t1 t2 t3 < "$STATE/neigh"
  echo "$t3" > $NEIGH/gc_thresh3
  echo "$t2" > $NEIGH/gc_thresh2
  echo "$t1" > $NEIGH/gc_thresh1
}

cmd_up() {
  local hosts="$1" rate="$2"
  need_root
  [[ "$hosts" =~ ^[0-9]+$ ]] && [ "$hosts" -ge 2 ] && [ "$hosts" -le 250 ] ||
    die "HOSTS must be in [2, 250], got $hosts"
  rate_bytes "$rate" >/dev/null
  [[ "${NETSIM_QUEUE_MS:-100}" =~ ^[1-9][0-9]{0,4}$ ]] ||
    die "NETSIM_QUEUE_MS must be milliseconds in [1, 99999], got '${NETSIM_QUEUE_MS}'"
  # tc holds a queue's bytes (rate x time + bucket) in 32 bits.
  local bps queue_bytes
  bps=$(rate_bytes "$rate")
  queue_bytes=$(( bps * ${NETSIM_QUEUE_MS:-100} / 1000 + (bps / 100 > 1048576 ? bps / 100 : 1048576) ))
  [ "$queue_bytes" -lt $((1 << 32)) ] ||
    die "NETSIM_QUEUE_MS=${NETSIM_QUEUE_MS} at $rate is a queue of $queue_bytes bytes, over tc's 4 GiB"
  [ "$(hosts_up)" -eq 0 ] || die "already up ($(hosts_up) hosts); run 'down' first"
  mkdir -p "$STATE"
  echo "$hosts" > "$STATE/hosts"
  echo "$rate" > "$STATE/rate"
  raise_neighbour_limits "$hosts"
  ip netns add "$SWITCH_NS"
  ip netns exec "$SWITCH_NS" ip link set lo up
  ip netns exec "$SWITCH_NS" ip link add sw type bridge
  ip netns exec "$SWITCH_NS" ip link set sw up
  local i ns
  for ((i = 0; i < hosts; i++)); do
    ns=$(host_ns "$i")
    ip netns add "$ns"
    ip netns exec "$ns" ip link set lo up
    # The pair is made inside the host and one end moved to the switch.
    ip netns exec "$ns" ip link add eth0 type veth peer name "p$i"
    ip netns exec "$ns" ip link set "p$i" netns "$SWITCH_NS"
    ip netns exec "$ns" ip addr add "$(addr_of "$i")/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    ip netns exec "$SWITCH_NS" ip link set "p$i" master sw
    ip netns exec "$SWITCH_NS" ip link set "p$i" up
    # NETSIM_RTO_MIN (e.g. 10ms): the hosts' minimum retransmission timeout
    # (Linux: 200 ms), as data centres lower it.
    if [ -n "${NETSIM_RTO_MIN:-}" ]; then
      ip netns exec "$ns" ip route replace "$SUBNET.0/24" dev eth0 \
          rto_min "$NETSIM_RTO_MIN"
    fi
    shape "$ns" eth0 "$rate"            # host -> switch
    shape "$SWITCH_NS" "p$i" "$rate"    # switch -> host
  done
  echo "netsim: $hosts hosts up at $rate per link: $(addr_of 0) .. $(addr_of $((hosts - 1)))" >&2
}

cmd_down() {
  need_root
  local ns pid
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$PREFIX-" || true); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -TERM "$pid" 2>/dev/null || true; done
  done
  sleep 0.5
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$PREFIX-" || true); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  restore_neighbour_limits
  rm -rf "$STATE"
}

cmd_mesh() {
  local shards="$1" workers="$2" bytes="$3" rounds="${4:-8}" gap="${5:-200}"
  [[ "$shards" =~ ^[1-9][0-9]*$ && "$workers" =~ ^[1-9][0-9]*$ &&
     "$bytes" =~ ^[1-9][0-9]*$ && "$rounds" =~ ^[1-9][0-9]*$ &&
     "$gap" =~ ^[0-9]+$ ]] ||
    die "usage: mesh SHARDS WORKERS BYTES [ROUNDS [GAP_MS]] (positive integers)"
  [ "$bytes" -ge "$shards" ] || die "mesh: BYTES ($bytes) must be at least SHARDS ($shards)"
  [ $((shards + workers)) -le "$(hosts_up)" ] ||
    die "mesh: $shards + $workers hosts needed, $(hosts_up) up"
  # The rate the links deliver, host 0 -> host S (frozen for the link time).
  local rate
  rate=$(cmd_measure 0 "$shards" 100 | /usr/bin/python3 -c \
      'import json, sys; m = json.load(sys.stdin); print(m["mb"] * 1048576 / m["seconds"])')
  exec /usr/bin/python3 "$(dirname "$0")/netsim_mesh.py" "$0" "$shards" "$workers" \
      "$bytes" "$rounds" "$gap" "$rate"
}

cmd_exec() {
  local i="$1"
  shift
  [ "$i" -lt "$(hosts_up)" ] 2>/dev/null || die "no host $i (hosts up: $(hosts_up))"
  exec ip netns exec "$(host_ns "$i")" "$@"
}

# One TCP stream through two shaped links (A's uplink, B's downlink).
cmd_measure() {
  local a="${1:-0}" b="${2:-1}" mb="${3:-200}"
  [ "$a" -lt "$(hosts_up)" ] && [ "$b" -lt "$(hosts_up)" ] && [ "$a" != "$b" ] ||
    die "measure: hosts $a and $b must differ and be up"
  local port=5201 ready
  ready=$(mktemp)
  ip netns exec "$(host_ns "$b")" /usr/bin/python3 - "$(addr_of "$b")" "$port" "$ready" <<'PY' &
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(1)
open(sys.argv[3], "w").write("ready")
c, _ = s.accept()
buf = bytearray(1 << 20)
while c.recv_into(buf):
    pass
PY
  local server=$!
  for _ in $(seq 100); do [ -s "$ready" ] && break; sleep 0.05; done
  ip netns exec "$(host_ns "$a")" /usr/bin/python3 - "$(addr_of "$b")" "$port" "$mb" \
      "$(cat "$STATE/rate")" "$a" "$b" <<'PY'
import json, socket, sys, time
host, port, mb, rate, a, b = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
s = socket.create_connection((host, port))
chunk = b"\0" * (1 << 20)
s.sendall(chunk * 8)  # past the bucket and slow start, untimed
t0 = time.perf_counter()
for _ in range(mb):
    s.sendall(chunk)
s.shutdown(socket.SHUT_WR)
s.recv(1)  # the receiver closed: everything arrived
dt = time.perf_counter() - t0
print(json.dumps({"netsim_link": rate, "from": int(a), "to": int(b), "mb": mb,
                  "seconds": round(dt, 3), "gbit_s": round(mb * 8 * 1.048576 / dt / 1e3, 3)}))
PY
  wait "$server" 2>/dev/null || true
  rm -f "$ready"
}

# Counters as the switch sees them: port pI's tx is what reached host I
# (its downlink), its rx what host I sent (its uplink), both after shaping.
cmd_trace() {
  local file="$1" ms="${2:-50}"
  [ "$(hosts_up)" -gt 0 ] || die "trace: no hosts up"
  exec ip netns exec "$SWITCH_NS" /usr/bin/python3 - "$file" "$ms" "$(hosts_up)" <<'PY'
import json, sys, time
path, ms, hosts = sys.argv[1], float(sys.argv[2]) / 1e3, int(sys.argv[3])
stat = lambda i, k: int(open(f"/sys/class/net/p{i}/statistics/{k}_bytes").read())
tick = 100.0
with open(path, "w", buffering=1) as out:
    while True:
        cpu = open("/proc/stat").readline().split()[1:]
        idle = int(cpu[3]) + int(cpu[4])
        busy = sum(int(x) for x in cpu[:8]) - idle
        out.write(json.dumps({"t": round(time.monotonic(), 4), "busy_cpu_s": busy / tick,
                              "down": [stat(i, "tx") for i in range(hosts)],
                              "up": [stat(i, "rx") for i in range(hosts)]}) + "\n")
        time.sleep(ms)
PY
}

cmd_run() {
  local hosts="$1" rate="$2"
  shift 2
  [ "${1:-}" = "--" ] && shift
  [ "$#" -gt 0 ] || die "run: no command"
  need_root
  # Never tear down an emulator this run did not make.
  [ "$(hosts_up)" -eq 0 ] || die "already up ($(hosts_up) hosts); run 'down' first"
  NETSIM_CHILD=""
  # The command runs in the background so that a signal is handled at once
  # (bash runs traps only between foreground commands): it is stopped, then
  # everything on the hosts, then the hosts.
  # A second signal while it cleans up (a process group signalled twice)
  # must not cut the cleanup short.
  trap 'trap "" INT TERM; [ -z "$NETSIM_CHILD" ] || kill -TERM "$NETSIM_CHILD" 2>/dev/null || true; cmd_down' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  cmd_up "$hosts" "$rate"
  NETSIM="$(readlink -f "$0")" "$@" &
  NETSIM_CHILD=$!
  local rc=0
  wait "$NETSIM_CHILD" || rc=$?
  NETSIM_CHILD=""
  return "$rc"
}

case "${1:-}" in
  up) [ "$#" -eq 3 ] || die "usage: up HOSTS RATE"; cmd_up "$2" "$3" ;;
  down) cmd_down ;;
  addr) [ "$#" -eq 2 ] || die "usage: addr I"; addr_of "$2" ;;
  exec) [ "$#" -ge 3 ] || die "usage: exec I CMD..."; shift; cmd_exec "$@" ;;
  measure) shift; need_root; cmd_measure "$@" ;;
  mesh) [ "$#" -ge 4 ] || die "usage: mesh SHARDS WORKERS BYTES [ROUNDS [GAP_MS]]"
        shift; need_root; cmd_mesh "$@" ;;
  trace) [ "$#" -ge 2 ] || die "usage: trace FILE [MS]"; shift; need_root; cmd_trace "$@" ;;
  run) [ "$#" -ge 4 ] || die "usage: run HOSTS RATE -- CMD..."; shift; cmd_run "$@" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
