"""The --serve protocol of amp bench infer's BERT workers (tools/bench_torch_bert.py,
tools/bench_ort_bert.py): prints the ready line, then answers each request line
"bert B SEQ REPS THREADS" with "ok <median ms per batch>" or "na <why>" (a request for
another thread count than the worker's, a bad line, a failure), until "quit" or end of
input. Plain Python: each worker imports it under its own interpreter."""
import sys


def serve(threads, ready, time_batch):
    """threads > 0: the worker's thread count (requests for another are "na");
    ready: the first line; time_batch(B, T, reps) -> median ms per batch."""
    print(ready, flush=True)
    for line in sys.stdin:
        f = line.split()
        if not f or f[0] == "quit":
            break
        try:
            if f[0] != "bert" or len(f) != 5:
                raise ValueError("bad request: " + line.strip())
            B, T, reps, want = (int(v) for v in f[1:5])
            if threads > 0 and want != threads:
                print("na this worker runs %d threads, not %d" % (threads, want), flush=True)
                continue
            print("ok %.6f" % time_batch(B, T, reps), flush=True)
        except Exception as e:  # noqa: BLE001 (the reason goes back to amp)
            print("na %s" % str(e).replace("\n", " "), flush=True)
