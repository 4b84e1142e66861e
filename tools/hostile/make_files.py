#!/usr/bin/python3
"""Writes the hostile list's bad inputs into DIR (tools/hostile.sh):

  make_files.py MODEL_JSON DATA_DIR DIR FULL_SAFETENSORS

Corrupt TFRecord files (each in a directory of its own, for a glob), model
configs out of range or malformed, safetensors with non-finite values or
lying headers, and specs that are not regular files.
"""
import glob
import gzip
import json
import os
import struct
import sys

import numpy as np


def data_dir(out, name):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    return d


def safetensors(path, tensors, header_extra=None, cut=0):
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        b = a.astype(np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if header_extra:
        header.update(header_extra)
    h = json.dumps(header).encode()
    body = struct.pack("<Q", len(h)) + h + b"".join(blobs)
    with open(path, "wb") as f:
        f.write(body[: len(body) - cut] if cut else body)


def main():
    model_json, data, out, full = sys.argv[1:5]
    model = json.load(open(model_json))
    good = sorted(glob.glob(os.path.join(data, "*.tfrecord")))[0]
    raw = open(good, "rb").read()
    # Data: truncated mid-record, a flipped payload byte, empty, text, a
    # FIFO, a directory and /dev/zero under a .tfrecord name.
    open(os.path.join(data_dir(out, "trunc"), "a.tfrecord"), "wb").write(
        raw[: len(raw) // 2 + 3])
    flipped = bytearray(raw)
    flipped[40] ^= 0xFF
    open(os.path.join(data_dir(out, "crc"), "a.tfrecord"), "wb").write(flipped)
    open(os.path.join(data_dir(out, "empty"), "a.tfrecord"), "wb").close()
    open(os.path.join(data_dir(out, "text"), "a.tfrecord"), "w").write(
        "this is not a TFRecord file\n" * 100)
    os.mkfifo(os.path.join(data_dir(out, "fifo"), "a.tfrecord"))
    os.makedirs(os.path.join(data_dir(out, "dir"), "a.tfrecord"), exist_ok=True)
    os.symlink("/dev/zero", os.path.join(data_dir(out, "zero"), "a.tfrecord"))
    # A record whose length field claims 2^62 bytes.
    open(os.path.join(data_dir(out, "hugelen"), "a.tfrecord"), "wb").write(
        struct.pack("<Q", 1 << 62) + b"\0" * 60)
    # GZIP data: cut in half, a plain file under a .gz name, and a gzip
    # bomb (100 MiB of zeros in ~100 KiB: not records, refused at the first).
    open(os.path.join(data_dir(out, "gzcut"), "a.tfrecord.gz"), "wb").write(
        gzip.compress(raw)[: len(gzip.compress(raw)) // 2])
    open(os.path.join(data_dir(out, "gzplain"), "a.tfrecord.gz"), "wb").write(
        raw)
    open(os.path.join(data_dir(out, "gzbomb"), "a.tfrecord.gz"), "wb").write(
        gzip.compress(b"\0" * (100 << 20)))
    # Model configs.
    def config(name, **kv):
        c = dict(model)
        c.update(kv)
        json.dump(c, open(os.path.join(out, name), "w"))
    config("layers.json", num_hidden_layers=1000000)
    config("vocab.json", vocab_size=2147483647)
    config("hidden.json", hidden_size=1048576)
    config("heads.json", hidden_size=33)
    config("negative.json", hidden_size=-32)
    config("zero_layers.json", num_hidden_layers=0)
    config("string.json", hidden_size="thirty-two")
    config("nan.json", hidden_dropout_prob=float("nan"))
    open(os.path.join(out, "truncated.json"), "w").write('{"vocab_size": 12')
    open(os.path.join(out, "deep.json"), "w").write("[" * 100000 + "]" * 100000)
    with open(os.path.join(out, "big.json"), "w") as f:
        f.write("{" + " " * (64 << 20) + "}")
    os.symlink("/dev/zero", os.path.join(out, "zero.json"))
    os.mkfifo(os.path.join(out, "fifo.json"))
    # Weights: the whole model's (one training step), spoilt one way each.
    raw = open(full, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    weights = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        weights[k] = np.frombuffer(raw[8 + n + a: 8 + n + b],
                                   dtype=np.float32).reshape(v["shape"]).copy()
    name = "bert.encoder.layer.1.attention.output.dense.weight"
    nan = dict(weights); nan[name] = weights[name].copy(); nan[name][3, 5] = np.nan
    safetensors(os.path.join(out, "nan.safetensors"), nan)
    inf = dict(weights); inf[name] = weights[name].copy(); inf[name][0, 0] = -np.inf
    safetensors(os.path.join(out, "inf.safetensors"), inf)
    safetensors(os.path.join(out, "cut.safetensors"), weights, cut=100)
    shape = dict(weights); shape[name] = weights[name][:, :16].copy()
    safetensors(os.path.join(out, "shape.safetensors"), shape)
    with open(os.path.join(out, "header.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", 1 << 62) + b"{}")
    with open(os.path.join(out, "notjson.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", 8) + b"not json")
    safetensors(os.path.join(out, "offsets.safetensors"), weights,
                header_extra={"x": {"dtype": "F32", "shape": [4],
                                    "data_offsets": [1 << 40, (1 << 40) + 16]}})
    # Specs that are not regular files, or not specs.
    os.symlink("/dev/zero", os.path.join(out, "zero.pbtxt"))
    os.mkfifo(os.path.join(out, "fifo.pbtxt"))
    open(os.path.join(out, "binary.pbtxt"), "wb").write(os.urandom(4096))
    open(os.path.join(out, "big.pbtxt"), "w").write(
        'name: "' + "x" * (32 << 20) + '"\n')
    open(os.path.join(out, "utf8.pbtxt"), "wb").write(
        b'name: "\xff\xfe bad"\ntask: PRETRAIN\n')


if __name__ == "__main__":
    main()
