"""Writer for amp's golden-data files (read in C by tests/support/golden.c).

Format (little-endian):
  b"AMPGOLD1", u32 record count, then per record:
  u16 name length, name bytes (utf-8), u8 dtype, u8 ndim, i64 shape[ndim],
  raw element data (row-major, numel * element size).
dtype codes are amp_dtype's enum values: 0 f32, 1 f16, 2 bf16 (raw bits),
3 f8e4m3, 4 f8e5m2, 5 f64, 6 i32, 7 i64, 8 u8.

Generators run under Debian's python3 with python3-torch (PyTorch 1.13, CPU):
  /usr/bin/python3 tools/golden/gen_<family>.py
They are deterministic (fixed seeds), so rerunning gives the same bytes.
"""
import struct

import numpy as np

_CODES = {
    np.dtype(np.float32): 0,
    np.dtype(np.float16): 1,
    np.dtype(np.float64): 5,
    np.dtype(np.int32): 6,
    np.dtype(np.int64): 7,
    np.dtype(np.uint8): 8,
}


def _as_array(x):
    """numpy array + dtype code; accepts torch tensors (bf16 kept as bits)."""
    try:
        import torch
        if isinstance(x, torch.Tensor):
            x = x.detach().cpu().contiguous()
            if x.dtype == torch.bfloat16:
                return x.view(torch.int16).numpy().view(np.uint16), 2
            x = x.numpy()
    except ImportError:
        pass
    a = np.ascontiguousarray(x)
    if a.dtype not in _CODES:
        raise TypeError(f"unsupported dtype {a.dtype}")
    return a, _CODES[a.dtype]


def write_golden(path, records):
    """records: dict or list of (name, array-or-tensor)."""
    items = list(records.items()) if isinstance(records, dict) else list(records)
    with open(path + ".tmp", "wb") as f:
        f.write(b"AMPGOLD1")
        f.write(struct.pack("<I", len(items)))
        for name, value in items:
            a, code = _as_array(value)
            nb = name.encode()
            f.write(struct.pack("<H", len(nb)))
            f.write(nb)
            f.write(struct.pack("<BB", code, a.ndim))
            for s in a.shape:
                f.write(struct.pack("<q", s))
            f.write(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes())
    import os
    os.replace(path + ".tmp", path)
