#!/usr/bin/python3
"""Raw TCP through the emulated links in the pattern of a BSP step.

S "shard" hosts and W "worker" hosts (netsim hosts 0..S-1 and S..S+W-1), one
long-lived TCP connection per (worker, shard) pair, as bertps keeps one per
pair. Each round has a pull phase (every shard sends `bytes / S` on each of
its W connections) and, after `gap_ms` of idle links (the compute), a push
phase (every worker sends `bytes / S` to each shard). A phase is timed from
its start signal to the moment the last receiver has every byte; the model's
transfer term for it is max(P / R, W P / (S R)). What a phase takes beyond
that is what TCP itself loses at the ends of a phase through these links:
no RPC framework, no parameter server.

Run by `tools/netsim.sh mesh` (root, hosts up). Agents in the namespaces and
the driver share the file system and the clock (CLOCK_MONOTONIC is one clock
for all namespaces): signals and completion times are files. The first
round (connections in slow start) is left out of the medians.
MESH_SOCKBUF=N sets every connection's SO_SNDBUF/SO_RCVBUF (bounding the
data each has in flight).
"""
import json, os, shutil, signal, socket, statistics, subprocess, sys, threading, time

PORT = 6123
# SO_SNDBUF/SO_RCVBUF of every connection (0: the kernel's autotuning).
SOCKBUF = int(os.environ.get("MESH_SOCKBUF", "0"))


# A phase or a set-up step that takes longer than this is an error.
DEADLINE_S = float(os.environ.get("MESH_DEADLINE_S", "600"))


def wait_for(path, poll=0.002, procs=(), parent=None):
    """Until `path` exists. Fails when any of `procs` has failed, when this
    process's parent is no longer `parent` (the driver is gone), or after
    DEADLINE_S."""
    end = time.monotonic() + DEADLINE_S
    while not os.path.exists(path):
        for p in procs:
            if p.poll() is not None and p.returncode != 0:
                raise RuntimeError(f"agent {' '.join(p.args[-7:-5])} failed "
                                   f"(exit {p.returncode}) before {path}")
        if parent is not None and os.getppid() != parent:
            sys.exit("netsim_mesh agent: the driver is gone")
        if time.monotonic() > end:
            raise RuntimeError(f"no {path} after {DEADLINE_S:.0f} s")
        time.sleep(poll)


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


def recv_exactly(conn, n, buf):
    view = memoryview(buf)
    while n > 0:
        got = conn.recv_into(view[:min(n, len(buf))])
        if not got:
            raise RuntimeError("peer closed")
        n -= got


def run_phase(conns, sending, nbytes, chunk):
    """Sends or receives nbytes on every connection at once; raises the
    first error of any of them."""
    errors = []

    def one(c):
        try:
            if sending:
                left = nbytes
                while left > 0:
                    k = min(left, len(chunk))
                    c.sendall(chunk[:k] if k < len(chunk) else chunk)
                    left -= k
            else:
                recv_exactly(c, nbytes, bytearray(len(chunk)))
        except Exception as e:  # reported after every thread ended
            errors.append(e)
    threads = [threading.Thread(target=one, args=(c,)) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def agent(role, idx, shard_addrs, workers, nbytes, rounds, d):
    parent = os.getppid()
    chunk = b"\0" * (1 << 20)
    if role == "shard":
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if SOCKBUF:
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKBUF)
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKBUF)
        ls.bind((shard_addrs[idx], PORT))
        ls.listen(workers)
        ls.settimeout(DEADLINE_S)
        write_atomic(f"{d}/listening.{idx}", "1")
        conns = [ls.accept()[0] for _ in range(workers)]
    else:
        conns = []
        for a in shard_addrs:
            for _ in range(200):
                c = socket.socket()
                try:
                    if SOCKBUF:
                        c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKBUF)
                        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKBUF)
                    c.connect((a, PORT))
                    conns.append(c)
                    break
                except OSError:
                    c.close()
                    time.sleep(0.05)
            else:
                raise RuntimeError(f"cannot connect to {a}")
    for c in conns:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    write_atomic(f"{d}/ready.{role}.{idx}", "1")
    for r in range(rounds):
        for phase in ("pull", "push"):
            wait_for(f"{d}/go.{phase}.{r}", parent=parent)
            sending = (phase == "pull") == (role == "shard")
            run_phase(conns, sending, nbytes, chunk)
            if not sending:
                write_atomic(f"{d}/done.{phase}.{r}.{role}.{idx}", repr(time.monotonic()))


def driver(argv):
    netsim, shards, workers, nbytes, rounds, gap_ms, rate_bps = (
        argv[0], int(argv[1]), int(argv[2]), int(argv[3]), int(argv[4]),
        float(argv[5]), float(argv[6]))
    netsim, me = os.path.abspath(netsim), os.path.abspath(__file__)
    # A TERM (netsim run's cleanup) unwinds through the finally below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("netsim_mesh: terminated"))
    d = f"/tmp/bertps-mesh.{os.getpid()}"
    os.makedirs(d)
    procs = []
    try:
        out, link, per_conn = run_rounds(netsim, me, d, procs, shards, workers,
                                         nbytes, rounds, gap_ms, rate_bps)
        for p in procs:
            if p.wait() != 0:
                raise RuntimeError(f"agent {' '.join(p.args[-7:-5])} failed "
                                   f"(exit {p.returncode})")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(d, ignore_errors=True)
    res = {"netsim_mesh": True, "shards": shards, "workers": workers,
           "bytes": per_conn * shards, "rounds": rounds, "gap_ms": gap_ms,
           "sockbuf": SOCKBUF, "rate_bytes_per_s": round(rate_bps),
           "link_s": round(link, 4)}
    for phase in ("pull", "push"):
        last = [x["last"] for x in out[phase][1:]] or [x["last"] for x in out[phase]]
        first = [x["first"] for x in out[phase][1:]] or [x["first"] for x in out[phase]]
        res[phase + "_s_median"] = round(statistics.median(last), 4)
        res[phase + "_s_max"] = round(max(last), 4)
        res[phase + "_first_done_s_median"] = round(statistics.median(first), 4)
        res[phase + "_excess_s_median"] = round(statistics.median(last) - link, 4)
    print(json.dumps(res), flush=True)


def run_rounds(netsim, me, d, procs, shards, workers, nbytes, rounds, gap_ms,
               rate_bps):
    """Starts the agents (appended to procs) and times every phase."""
    addr = lambda i: subprocess.check_output([netsim, "addr", str(i)], text=True).strip()
    shard_addrs = [addr(i) for i in range(shards)]
    per_conn = nbytes // shards
    common = [",".join(shard_addrs), str(workers), str(per_conn), str(rounds), d]
    for i in range(shards):
        procs.append(subprocess.Popen(
            [netsim, "exec", str(i), "/usr/bin/python3", me, "agent",
             "shard", str(i)] + common))
    for i in range(shards):
        wait_for(f"{d}/listening.{i}", 0.01, procs)
    for w in range(workers):
        procs.append(subprocess.Popen(
            [netsim, "exec", str(shards + w), "/usr/bin/python3", me,
             "agent", "worker", str(w)] + common))
    for i in range(shards):
        wait_for(f"{d}/ready.shard.{i}", 0.01, procs)
    for w in range(workers):
        wait_for(f"{d}/ready.worker.{w}", 0.01, procs)
    link = max(per_conn * shards / rate_bps, workers * per_conn / rate_bps)
    out = {"pull": [], "push": []}
    for r in range(rounds):
        for phase in ("pull", "push"):
            receivers = workers if phase == "pull" else shards
            role = "worker" if phase == "pull" else "shard"
            t0 = time.monotonic()
            write_atomic(f"{d}/go.{phase}.{r}", "1")
            done = []
            for i in range(receivers):
                p = f"{d}/done.{phase}.{r}.{role}.{i}"
                wait_for(p, 0.001, procs)
                done.append(float(open(p).read()))
            out[phase].append({"last": max(done) - t0, "first": min(done) - t0})
            time.sleep(gap_ms / 1000.0)
    return out, link, per_conn


if __name__ == "__main__":
    if sys.argv[1] == "agent":
        role, idx, addrs, workers, nbytes, rounds, d = sys.argv[2:9]
        agent(role, int(idx), addrs.split(","), int(workers), int(nbytes), int(rounds), d)
    else:
        driver(sys.argv[1:])
