#!/usr/bin/env python3
"""ONNX Runtime side of `amp bench infer`: all-MiniLM-L6-v2 sentence
embeddings per second, the model of tools/bench_torch_bert.py exported to ONNX
(by that script, under Debian's torch) and run by ONNX Runtime's CPU provider
(PyPI onnxruntime, in the Python that has it: `pip install onnxruntime`).

    tools/bench_ort_bert.py --serve --threads N [--model DIR]

the protocol of tools/bench_torch_bert.py --serve: "ready ort-<version> <threads>",
then "bert B SEQ REPS THREADS" -> "ok <median ms per batch>" or "na <why>".
Started by /usr/bin/python3 (as amp starts its workers), the script runs
itself again under $AMP_ORT_PYTHON (default: python3 on PATH) when this Python
has no onnxruntime. The ONNX file is written once, to
$AMP_CACHE_DIR/onnx/ (or ~/.cache/amp/onnx/) <model directory name>.onnx."""
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def threads_arg(argv):
    for i, a in enumerate(argv):
        if a == "--threads" and i + 1 < len(argv) and argv[i + 1].isdigit():
            return int(argv[i + 1])
    return 0


try:
    import numpy as np
    import onnxruntime as ort
except ImportError:
    if os.environ.get("AMP_ORT_REEXEC"):
        print("na onnxruntime is not installed (pip install onnxruntime)", flush=True)
        sys.exit(1)
    os.environ["AMP_ORT_REEXEC"] = "1"
    py = os.environ.get("AMP_ORT_PYTHON", "python3")
    os.execvp(py, [py, os.path.abspath(__file__)] + sys.argv[1:])


def model_dir(argv):
    for i, a in enumerate(argv):
        if a == "--model" and i + 1 < len(argv):
            return argv[i + 1]
    if os.environ.get("AMP_BENCH_BERT_DIR"):
        return os.environ["AMP_BENCH_BERT_DIR"]
    return os.path.join(os.environ.get("AMP_MODELS_DIR", "/usr/local/share/amp/models"), "all-MiniLM-L6-v2")


def onnx_file(mdir):
    cache = os.environ.get("AMP_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "amp")
    out = os.path.join(cache, "onnx", os.path.basename(os.path.normpath(mdir)) + ".onnx")
    src = os.path.join(mdir, "model.safetensors")
    if not os.path.exists(out) or os.path.getmtime(out) < os.path.getmtime(src):
        os.makedirs(os.path.dirname(out), exist_ok=True)
        subprocess.run([os.environ.get("AMP_TORCH_PYTHON", "/usr/bin/python3"), os.path.join(HERE, "bench_torch_bert.py"),
                        "--model", mdir, "--export-onnx", out], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return out


def batch_of(B, T, vocab=30522, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, vocab, size=(B, T), dtype=np.int64)
    ids[:, 0] = 101
    ids[:, -1] = 102
    return ids, np.ones((B, T), dtype=np.int64)


def main():
    threads = threads_arg(sys.argv[1:])
    so = ort.SessionOptions()
    if threads > 0:
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
    try:
        sess = ort.InferenceSession(onnx_file(model_dir(sys.argv[1:])), so, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 (the reason goes back to amp)
        print("na %s" % str(e).replace("\n", " "), flush=True)
        return
    def time_batch(B, T, reps):
        ids, mask = batch_of(B, T)
        feed = {"ids": ids, "mask": mask}
        sess.run(None, feed)  # warm-up
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            sess.run(None, feed)
            times.append(time.perf_counter() - t0)
        return 1e3 * statistics.median(times)

    sys.path.insert(0, HERE)
    from bench_bert_serve import serve
    serve(threads, "ready ort-%s %d" % (ort.__version__, threads), time_batch)


if __name__ == "__main__":
    main()
