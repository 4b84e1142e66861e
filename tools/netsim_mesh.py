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
import json, os, shutil, socket, statistics, subprocess, sys, threading, time

PORT = 6123
# SO_SNDBUF/SO_RCVBUF of every connection (0: the kernel's autotuning).
SOCKBUF = int(os.environ.get("MESH_SOCKBUF", "0"))


def wait_for(path, poll=0.0005):
    while not os.path.exists(path):
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


def run_phase(conns, sending, nbytes, chunk, buf):
    def one(c):
        if sending:
            left = nbytes
            while left > 0:
                k = min(left, len(chunk))
                c.sendall(chunk[:k] if k < len(chunk) else chunk)
                left -= k
        else:
            recv_exactly(c, nbytes, bytearray(len(buf)))
    threads = [threading.Thread(target=one, args=(c,)) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def agent(role, idx, shard_addrs, workers, nbytes, rounds, d):
    chunk = b"\0" * (1 << 20)
    buf = bytearray(1 << 20)
    if role == "shard":
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if SOCKBUF:
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKBUF)
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKBUF)
        ls.bind((shard_addrs[idx], PORT))
        ls.listen(workers)
        write_atomic(f"{d}/listening.{idx}", "1")
        conns = [ls.accept()[0] for _ in range(workers)]
    else:
        conns = []
        for a in shard_addrs:
            for _ in range(200):
                try:
                    c = socket.socket()
                    if SOCKBUF:
                        c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKBUF)
                        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKBUF)
                    c.connect((a, PORT))
                    conns.append(c)
                    break
                except OSError:
                    time.sleep(0.05)
            else:
                raise RuntimeError(f"cannot connect to {a}")
    for c in conns:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    write_atomic(f"{d}/ready.{role}.{idx}", "1")
    for r in range(rounds):
        for phase in ("pull", "push"):
            wait_for(f"{d}/go.{phase}.{r}")
            sending = (phase == "pull") == (role == "shard")
            run_phase(conns, sending, nbytes, chunk, buf)
            if not sending:
                write_atomic(f"{d}/done.{phase}.{r}.{role}.{idx}", repr(time.monotonic()))


def driver(argv):
    netsim, shards, workers, nbytes, rounds, gap_ms, rate_bps = (
        argv[0], int(argv[1]), int(argv[2]), int(argv[3]), int(argv[4]),
        float(argv[5]), float(argv[6]))
    netsim, me = os.path.abspath(netsim), os.path.abspath(__file__)
    d = f"/tmp/bertps-mesh.{os.getpid()}"
    os.makedirs(d)
    addr = lambda i: subprocess.check_output([netsim, "addr", str(i)], text=True).strip()
    shard_addrs = [addr(i) for i in range(shards)]
    per_conn = nbytes // shards
    common = [",".join(shard_addrs), str(workers), str(per_conn), str(rounds), d]
    procs = []
    for i in range(shards):
        procs.append(subprocess.Popen(
            [netsim, "exec", str(i), "/usr/bin/python3", me, "agent",
             "shard", str(i)] + common))
    for i in range(shards):
        wait_for(f"{d}/listening.{i}", 0.01)
    for w in range(workers):
        procs.append(subprocess.Popen(
            [netsim, "exec", str(shards + w), "/usr/bin/python3", me,
             "agent", "worker", str(w)] + common))
    for i in range(shards):
        wait_for(f"{d}/ready.shard.{i}", 0.01)
    for w in range(workers):
        wait_for(f"{d}/ready.worker.{w}", 0.01)
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
                wait_for(p, 0.001)
                done.append(float(open(p).read()))
            out[phase].append({"last": max(done) - t0, "first": min(done) - t0})
            time.sleep(gap_ms / 1000.0)
    for p in procs:
        p.wait()
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
    shutil.rmtree(d)


if __name__ == "__main__":
    if sys.argv[1] == "agent":
        role, idx, addrs, workers, nbytes, rounds, d = sys.argv[2:9]
        agent(role, int(idx), addrs.split(","), int(workers), int(nbytes), int(rounds), d)
    else:
        driver(sys.argv[1:])
