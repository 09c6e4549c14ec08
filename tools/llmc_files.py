#!/usr/bin/env python3
"""Writes the files llm.c's CPU trainer (train_gpt2.c) reads, in its own
formats, with random contents (enough for timing its steps; nothing of
llm.c's is copied):

  DIR/gpt2_124M.bin                                  model: 256 int32 header
      (magic 20240326, version 3, max_seq_len 1024, vocab 50257, layers 12,
      heads 12, channels 768, padded vocab 50304), then every parameter in
      fp32, in llm.c's order (wte [Vp, C], wpe, ln1w, ln1b, qkvw, qkvb,
      attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw,
      lnfb): weights N(0, 0.02), norms 1, biases 0
  DIR/dev/data/tinyshakespeare/tiny_shakespeare_{train,val}.bin
                                                     tokens: 256 int32 header
      (magic 20240520, version 1, count), then uint16 token ids < 50257

    /usr/bin/python3 tools/llmc_files.py DIR

tools/llmc_setup.sh builds llm.c outside the repository and calls this."""
import os
import sys

import numpy as np


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    rng = np.random.default_rng(0)
    maxT, V, Vp, L, NH, C = 1024, 50257, 50304, 12, 12, 768
    shapes = [(Vp, C), (maxT, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C), (L, C), (L, C),
              (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C), (C,), (C,)]
    kinds = "wwnbwbwbnbwbwbnb"  # weight, norm (1), bias (0)
    hdr = np.zeros(256, dtype=np.int32)
    hdr[:8] = [20240326, 3, maxT, V, L, NH, C, Vp]
    path = os.path.join(d, "gpt2_124M.bin")
    with open(path + ".tmp", "wb") as f:
        f.write(hdr.tobytes())
        for shp, k in zip(shapes, kinds):
            if k == "w":
                a = (rng.standard_normal(shp, dtype=np.float32) * np.float32(0.02)).astype(np.float32)
            else:
                a = np.full(shp, 1.0 if k == "n" else 0.0, dtype=np.float32)
            f.write(a.tobytes())
    os.replace(path + ".tmp", path)
    tdir = os.path.join(d, "dev", "data", "tinyshakespeare")
    os.makedirs(tdir, exist_ok=True)
    for name, n in (("train", 300000), ("val", 30000)):
        toks = rng.integers(0, V, n, dtype=np.uint16)
        th = np.zeros(256, dtype=np.int32)
        th[:3] = [20240520, 1, n]
        p = os.path.join(tdir, "tiny_shakespeare_%s.bin" % name)
        with open(p + ".tmp", "wb") as f:
            f.write(th.tobytes())
            f.write(toks.tobytes())
        os.replace(p + ".tmp", p)
    print("wrote %s and the token files under %s" % (path, tdir))


if __name__ == "__main__":
    main()
