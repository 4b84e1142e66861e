"""Minimal safetensors reader/writer (json + numpy only).

File layout: 8-byte little-endian u64 N, then N bytes of JSON header
  {name: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {str: str}}
then the raw little-endian tensor bytes; offsets are relative to the first byte after the header.

Read: F64, F32, F16, BF16 (returned as float32; BF16 via uint16 << 16), I64, I32, I16, I8, U8, BOOL.
Write: float32 -> F32, int32 -> I32 (also float64 -> F64, int64 -> I64).
"""

import json
import struct

import numpy as np

_READ_DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}

_WRITE_DTYPES = {
    np.dtype("float32"): ("F32", np.dtype("<f4")),
    np.dtype("int32"): ("I32", np.dtype("<i4")),
    np.dtype("float64"): ("F64", np.dtype("<f8")),
    np.dtype("int64"): ("I64", np.dtype("<i8")),
}

# Guards against absurd header lengths in corrupt files.
_MAX_HEADER_BYTES = 100 * 1024 * 1024


class SafetensorsError(ValueError):
    pass


def load(path):
    """Returns (tensors: dict name -> np.ndarray, metadata: dict or None), in file header order.

    F16 and BF16 tensors are returned as float32.
    """
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise SafetensorsError(f"{path}: file too short ({len(blob)} bytes) for a safetensors header")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > _MAX_HEADER_BYTES or 8 + n > len(blob):
        raise SafetensorsError(f"{path}: header length {n} exceeds file size {len(blob)}")
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: bad JSON header: {e}") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    data = memoryview(blob)[8 + n:]
    metadata = header.get("__metadata__")
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype_name = info["dtype"]
            shape = [int(d) for d in info["shape"]]
            begin, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as e:
            raise SafetensorsError(f"{path}: tensor '{name}': malformed entry {info!r} ({e})") from None
        if dtype_name not in _READ_DTYPES:
            raise SafetensorsError(f"{path}: tensor '{name}': unsupported dtype {dtype_name}")
        dt = _READ_DTYPES[dtype_name]
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if any(d < 0 for d in shape):
            raise SafetensorsError(f"{path}: tensor '{name}': negative dimension in {shape}")
        if not (0 <= begin <= end <= len(data)):
            raise SafetensorsError(
                f"{path}: tensor '{name}': data_offsets [{begin},{end}] outside data of {len(data)} bytes")
        if end - begin != count * dt.itemsize:
            raise SafetensorsError(
                f"{path}: tensor '{name}': {end - begin} bytes for shape {shape} {dtype_name} "
                f"(expected {count * dt.itemsize})")
        arr = np.frombuffer(data[begin:end], dtype=dt, count=count).reshape(shape)
        if dtype_name == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        elif dtype_name == "F16":
            arr = arr.astype(np.float32)
        else:
            arr = arr.astype(dt.newbyteorder("="), copy=True)
        out[name] = arr
    return out, metadata


def save(path, tensors, metadata=None):
    """Writes dict name -> array-like (float32/int32; also float64/int64) in the given order."""
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    chunks = []
    offset = 0
    for name, value in tensors.items():
        arr = np.asarray(value)
        if arr.dtype not in _WRITE_DTYPES:
            raise SafetensorsError(f"tensor '{name}': cannot write dtype {arr.dtype}")
        tag, le = _WRITE_DTYPES[arr.dtype]
        raw = np.ascontiguousarray(arr, dtype=le).tobytes()
        header[name] = {"dtype": tag, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((8 - len(hjson) % 8) % 8)  # keep the data 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for raw in chunks:
            f.write(raw)
