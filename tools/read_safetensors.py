#!/usr/bin/env python3
"""A safetensors reader in 20 lines of numpy (no safetensors package needed).
   python3 tools/read_safetensors.py FILE   prints name, dtype, shape, sum."""
import json, struct, sys
import numpy as np

DT = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
      "I8": "i1", "U8": "u1", "BOOL": "?", "F8_E4M3": "u1", "F8_E5M2": "u1", "U16": "<u2", "U32": "<u4", "U64": "<u8"}

def load(path):
    """-> (dict name -> numpy array, metadata dict). BF16 is widened to float32; fp8 stays raw bytes."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta, data, out = header.pop("__metadata__", {}), raw[8 + n:], {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        a = np.frombuffer(data[b:e], dtype=DT[t["dtype"]]).reshape(t["shape"])
        out[name] = (a.astype(np.uint32) << 16).view(np.float32) if t["dtype"] == "BF16" else a
    return out, meta

if __name__ == "__main__":
    tensors, meta = load(sys.argv[1])
    for k, v in sorted(meta.items()):
        print(f"# {k} = {v}")
    for k, a in tensors.items():
        print(k, a.dtype, list(a.shape), float(a.astype(np.float64).sum()))
