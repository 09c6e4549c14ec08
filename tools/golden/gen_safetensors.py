"""A safetensors file written by PyTorch for amp's mlp: tests/data/torch_mlp_f16.safetensors.

Trains torch's version of the mlp (Flatten, Linear 784-512, ReLU, Linear 512-512, ReLU,
Linear 512-10 -- the same state_dict names as amp's) briefly on Fashion-MNIST, casts it to
float16 (model.half(), as people ship checkpoints; half the bytes), and writes the
state_dict in the safetensors format by hand (Debian has no safetensors package; the format
is an 8-byte little-endian header length, a JSON header, then the raw little-endian data).
The metadata records PyTorch's predictions and accuracy on the first 1000 test images,
evaluated in float32 from the stored float16 weights; tests/test_checkpoint_interop.c loads
the file into amp's mlp and must find the same predictions.

This writer deliberately differs from amp's in ways the format allows: tensors in
state_dict order (not sorted by name), no 8-byte padding (the header length is made odd, so
the F16 data starts misaligned), and "format": "pt" metadata as Hugging Face files have.

  /usr/bin/python3 tools/golden/gen_safetensors.py     (Debian python3-torch 1.13, CPU)
"""
import gzip
import json
import os
import struct

import numpy as np
import torch
from torch import nn

DATA = os.environ.get("AMP_DATA_DIR", "/usr/share/datasets/fashion-mnist")
OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "torch_mlp_f16.safetensors")


def idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def write_safetensors(path, tensors, metadata):
    dt = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64"}
    header, blobs, off = {"__metadata__": metadata}, [], 0
    for name, t in tensors.items():  # state_dict order
        t = t.detach().contiguous().cpu()
        b = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": dt[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    if len(h) % 2 == 0:
        h += b" "  # odd length: the data section starts misaligned for F16
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(2)
    xtr = torch.from_numpy(idx(f"{DATA}/train-images-idx3-ubyte.gz")[:10000].astype(np.float32) / 255.0).unsqueeze(1)
    ytr = torch.from_numpy(idx(f"{DATA}/train-labels-idx1-ubyte.gz")[:10000].astype(np.int64))
    xte = torch.from_numpy(idx(f"{DATA}/t10k-images-idx3-ubyte.gz")[:1000].astype(np.float32) / 255.0).unsqueeze(1)
    yte = torch.from_numpy(idx(f"{DATA}/t10k-labels-idx1-ubyte.gz")[:1000].astype(np.int64))
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    perm = torch.randperm(10000)
    for i in range(0, 10000, 128):  # one epoch on 10000 images
        b = perm[i:i + 128]
        opt.zero_grad()
        nn.functional.cross_entropy(model(xtr[b]), ytr[b]).backward()
        opt.step()
    sd = {k: v.clone() for k, v in model.half().state_dict().items()}
    with torch.no_grad():
        pred = model.float()(xte).argmax(1)  # f32 compute on the f16-rounded weights
    acc = (pred == yte).float().mean().item()
    meta = {
        "format": "pt",
        "model": "mlp",
        "source": "tools/golden/gen_safetensors.py (torch " + torch.__version__ + ")",
        "test_images": "first 1000 of t10k, pixels / 255",
        "test_accuracy_first_1000": f"{acc:.4f}",
        "test_correct_first_1000": str(int((pred == yte).sum().item())),
        "test_predictions_first_1000": "".join(str(int(p)) for p in pred),
    }
    write_safetensors(OUT, sd, meta)
    print(f"wrote {os.path.normpath(OUT)}: accuracy {acc:.4f} on the first 1000 test images")


if __name__ == "__main__":
    main()
