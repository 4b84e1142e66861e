#!/usr/bin/python3
"""Sends raw bytes to HOST PORT (tools/hostile.sh's network cases):

  send.py HOST PORT PAYLOAD

PAYLOAD: random (64 KiB of random bytes), http1 (an HTTP/1.1 request on a
gRPC port), preface (HTTP/2's preface, then garbage frames), bigframe (a
frame header announcing 16 MiB), tls (a TLS ClientHello on a plain port),
slow (50 connections, each holding a half-sent HTTP request for 3 s, while
one complete request must be answered within 1 s).
"""
import os
import socket
import sys
import time


def connect(host, port):
    s = socket.create_connection((host, int(port)), timeout=5)
    s.settimeout(2)
    return s


def drain(s):
    try:
        while s.recv(65536):
            pass
    except OSError:
        pass
    s.close()


def main():
    host, port, payload = sys.argv[1:4]
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    if payload == "slow":
        held = []
        for _ in range(50):
            s = connect(host, port)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            held.append(s)
        start = time.time()
        s = connect(host, port)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        got = s.recv(64)
        took = time.time() - start
        print(f"answered in {took:.2f} s: {got[:20]!r}")
        time.sleep(max(0.0, 3 - took))
        for h in held:
            h.close()
        sys.exit(0 if got.startswith(b"HTTP/1.1 200") and took < 1.0 else 1)
    data = {
        "random": os.urandom(65536),
        "http1": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        "preface": preface + os.urandom(4096),
        "bigframe": preface + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
                    + b"\xff\xff\xff\x00\x00\x00\x00\x00\x01" + os.urandom(1024),
        "tls": bytes.fromhex("16030100a5010000a10303") + os.urandom(160),
    }[payload]
    s = connect(host, port)
    try:
        s.sendall(data)
    except OSError as e:
        print(f"send: {e}")
    drain(s)


if __name__ == "__main__":
    main()
