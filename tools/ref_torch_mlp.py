# Reference: the mlp with amp train's defaults but a flat learning rate, in PyTorch
# (Debian python3-torch). Usage: /usr/bin/python3 tools/ref_torch_mlp.py SEED
# Prints test accuracy after each of 3 epochs (85.7-87.0% for seeds 0-2 here).
import gzip, numpy as np, torch, time, sys
torch.manual_seed(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
torch.set_num_threads(1)
def load(p, off): return np.frombuffer(gzip.open(p).read(), np.uint8, offset=off)
d = '/usr/share/datasets/fashion-mnist/'
xtr = torch.tensor(load(d+'train-images-idx3-ubyte.gz', 16).reshape(-1, 784), dtype=torch.float32) / 255
ytr = torch.tensor(load(d+'train-labels-idx1-ubyte.gz', 8).astype(np.int64))
xte = torch.tensor(load(d+'t10k-images-idx3-ubyte.gz', 16).reshape(-1, 784), dtype=torch.float32) / 255
yte = torch.tensor(load(d+'t10k-labels-idx1-ubyte.gz', 8).astype(np.int64))
m = torch.nn.Sequential(torch.nn.Linear(784,512), torch.nn.ReLU(), torch.nn.Linear(512,512), torch.nn.ReLU(), torch.nn.Linear(512,10))
opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
for ep in range(3):
    t = time.time()
    perm = torch.randperm(60000)
    for i in range(0, 60000, 128):
        idx = perm[i:i+128]
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(m(xtr[idx]), ytr[idx])
        loss.backward(); opt.step()
    with torch.no_grad():
        acc = (m(xte).argmax(1) == yte).float().mean().item()
    print(f"epoch {ep+1}: test acc {100*acc:.2f}% ({time.time()-t:.1f}s)", flush=True)
