#!/usr/bin/env python3
"""pytorch_ops.py: PyTorch 1.13 on the CPU, timed on the shapes of halfgrad's `bench_ops --bandwidth-only`
mask lines (bench/bandwidth_bench.cpp), so the two can be read side by side from one run on one machine.

    bench/peers/pytorch_ops.py [--quick] [--threads N]

Prints one JSON line per op and dtype, with the same fields halfgrad's lines have: bench, dtype, rows, cols,
bytes, best_ms (best of `repeats` after one warm-up call), gbs, threads.
  compare_lt: y = x < b, x [rows, cols], b [cols] broadcast over the rows, y bool
  where:      y = torch.where(cond, x, z), cond a random bool [rows, cols] (about half true)
Tooling only (Debian's python3-torch): halfgrad's build and tests never run it.
"""
import argparse
import json
import os
import sys
import time

try:
    import torch
except ImportError:
    if sys.executable != "/usr/bin/python3" and os.path.exists("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    sys.exit("pytorch_ops.py: cannot import torch; install Debian's python3-torch")


def best_ms(repeats, fn):
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1/16 of the rows, 3 repeats (as bench_ops --quick)")
    parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (default: torch's own)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rows, cols, repeats = (1024 if args.quick else 16384), 4096, (3 if args.quick else 5)
    gen = torch.Generator().manual_seed(1)
    for dtype, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        size = torch.tensor([], dtype=dtype).element_size()
        x = (torch.rand(rows, cols, generator=gen) * 6 - 3).to(dtype)
        b = (torch.rand(cols, generator=gen) * 6 - 3).to(dtype)
        y = torch.empty(rows, cols, dtype=torch.bool)
        ms = best_ms(repeats, lambda: torch.lt(x, b, out=y))
        moved = rows * cols * size + cols * size + rows * cols
        print(json.dumps({"bench": "compare_lt", "impl": "pytorch", "dtype": name, "rows": rows, "cols": cols,
                          "bytes": moved, "best_ms": ms, "gbs": moved / ms / 1e6, "threads": torch.get_num_threads()}))
        cond = torch.rand(rows, cols, generator=gen) > 0.5
        z = (torch.rand(rows, cols, generator=gen) * 6 - 3).to(dtype)
        out = torch.empty(rows, cols, dtype=dtype)
        ms = best_ms(repeats, lambda: torch.where(cond, x, z, out=out))
        moved = rows * cols * (1 + 3 * size)
        print(json.dumps({"bench": "where", "impl": "pytorch", "dtype": name, "rows": rows, "cols": cols,
                          "bytes": moved, "best_ms": ms, "gbs": moved / ms / 1e6, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
