#!/usr/bin/env python3
"""pytorch_ops.py: PyTorch 1.13 on the CPU, timed on the shapes of halfgrad's `bench_ops --bandwidth-only`
mask and indexing lines (bench/bandwidth_bench.cpp), so the two can be read side by side from one run on one machine.

    bench/peers/pytorch_ops.py [--quick] [--threads N]

Prints one JSON line per op and dtype, with the same fields halfgrad's lines have: bench, dtype, rows, cols,
bytes, best_ms (best of `repeats` after one warm-up call), gbs, threads.
  compare_lt: y = x < b, x [rows, cols], b [cols] broadcast over the rows, y bool
  where:      y = torch.where(cond, x, z), cond a random bool [rows, cols] (about half true)
  index_select, index_add, gather, scatter_add, cumsum_rows, cumsum_columns: as bandwidth_bench.cpp's
              header states them, with out= tensors allocated once (scatter_add: zero_() then scatter_add_,
              PyTorch's way to scatter into zeros)
  rms_norm_*, batch_norm_*, group_norm_*: as bandwidth_bench.cpp's lines, forward under no_grad and
              backward as one torch.autograd.grad of a graph built once (PyTorch 1.13 has no F.rms_norm:
              its definition, composed, which is what a 1.13 user runs)
  upsample_*, adaptive_avg_pool2d_forward: as bandwidth_bench.cpp's lines, x [rows / 256, 64, 64, 64] (its
              rows / 4 planes), forward through the out= forms of F.interpolate's and F.adaptive_avg_pool2d's
              kernels (torch._C._nn), backward as one torch.autograd.grad (which allocates dx)
  topk:       torch.topk(x, 8, dim=1, out=(values, indices)), x [rows, cols]
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
        indexing(rows, cols, repeats, x, dtype, name, size, gen)
        normalization(rows, cols, repeats, x, dtype, name, size, gen)
        resample(rows, cols, repeats, dtype, name, size, gen)
        values, indices = torch.empty(rows, 8, dtype=dtype), torch.empty(rows, 8, dtype=torch.int64)
        try:
            report("topk", name, rows, cols, rows * cols * size,
                   best_ms(repeats, lambda: torch.topk(x, 8, dim=1, out=(values, indices))))
        except RuntimeError as e:
            print(json.dumps({"bench": "topk", "impl": "pytorch", "dtype": name, "error": str(e).splitlines()[0]}))


def report(bench, name, rows, cols, moved, ms):
    print(json.dumps({"bench": bench, "impl": "pytorch", "dtype": name, "rows": rows, "cols": cols, "bytes": moved,
                      "best_ms": ms, "gbs": moved / ms / 1e6, "threads": torch.get_num_threads()}))


def normalization(rows, cols, repeats, x, dtype, name, size, gen):
    channels, groups = 64, 8
    n = rows * cols
    xm = x.reshape(rows // channels, channels, cols)
    dy = (torch.rand(rows, cols, generator=gen) * 2 - 1).to(dtype)
    w_row = torch.rand(cols, generator=gen).to(dtype)
    w_ch, b_ch = torch.rand(channels, generator=gen).to(dtype), torch.rand(channels, generator=gen).to(dtype)
    rm, rv = torch.zeros(channels, dtype=dtype), torch.ones(channels, dtype=dtype)  # 1.13 wants them in x's dtype

    def rms(t, w):
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    forms = [
        ("rms_norm", lambda t, w, b: rms(t, w), x, w_row, None, dy),
        ("batch_norm", lambda t, w, b: torch.nn.functional.batch_norm(t, rm, rv, w, b, training=True), xm, w_ch, b_ch,
         dy.reshape(xm.shape)),
        ("group_norm", lambda t, w, b: torch.nn.functional.group_norm(t, groups, w, b), xm, w_ch, b_ch,
         dy.reshape(xm.shape)),
    ]
    for bench, fn, t, w, b, g in forms:
        try:
            with torch.no_grad():
                report(bench + "_forward", name, rows, cols, 2 * n * size, best_ms(repeats, lambda: fn(t, w, b)))
            leaves = [v.clone().requires_grad_(True) for v in (t, w) + ((b,) if b is not None else ())]
            y = fn(*leaves, *([None] if b is None else []))
            ms = best_ms(repeats, lambda: torch.autograd.grad(y, leaves, g, retain_graph=True))
            report(bench + "_backward", name, rows, cols, 3 * n * size, ms)
        except RuntimeError as e:  # an op PyTorch 1.13 lacks for this dtype on the CPU
            print(json.dumps({"bench": bench, "impl": "pytorch", "dtype": name, "error": str(e).splitlines()[0]}))


def resample(rows, cols, repeats, dtype, name, size, gen):
    F = torch.nn.functional
    side, planes = 64, rows // 4
    x = (torch.rand(planes // 64, 64, side, side, generator=gen) * 2 - 1).to(dtype)
    n_in, n_big = x.numel(), 4 * x.numel()
    up = torch.empty(x.shape[0], 64, 2 * side, 2 * side, dtype=dtype)
    pooled = torch.empty(x.shape[0], 64, 7, 7, dtype=dtype)
    nn = torch._C._nn  # the out= forms of F.interpolate's and F.adaptive_avg_pool2d's kernels
    forms = [
        ("upsample_nearest2x_forward", lambda: nn.upsample_nearest2d(x, [2 * side, 2 * side], out=up), n_in + n_big),
        ("upsample_bilinear2x_forward", lambda: nn.upsample_bilinear2d(x, [2 * side, 2 * side], False, out=up),
         n_in + n_big),
        ("adaptive_avg_pool2d_forward", lambda: nn.adaptive_avg_pool2d(x, [7, 7], out=pooled), n_in + pooled.numel()),
    ]
    for bench, fn, moved in forms:
        try:
            with torch.no_grad():
                report(bench, name, rows, cols, moved * size, best_ms(repeats, fn))
        except RuntimeError as e:
            print(json.dumps({"bench": bench, "impl": "pytorch", "dtype": name, "error": str(e).splitlines()[0]}))
    try:
        leaf = x.clone().requires_grad_(True)
        y = F.interpolate(leaf, scale_factor=2, mode="bilinear", align_corners=False)
        g = torch.rand(y.shape, generator=gen).to(dtype)
        ms = best_ms(repeats, lambda: torch.autograd.grad(y, [leaf], g, retain_graph=True))
        report("upsample_bilinear2x_backward", name, rows, cols, (n_in + n_big) * size, ms)
    except RuntimeError as e:
        print(json.dumps({"bench": "upsample_bilinear2x_backward", "impl": "pytorch", "dtype": name,
                          "error": str(e).splitlines()[0]}))


def indexing(rows, cols, repeats, x, dtype, name, size, gen):
    half_rows, picks = rows // 2, cols // 4
    row_index = torch.randint(0, rows, (rows,), generator=gen)
    target_index = torch.randint(0, half_rows, (rows,), generator=gen)
    pick_index = torch.randint(0, cols, (rows, picks), generator=gen)
    base = (torch.rand(half_rows, cols, generator=gen) * 6 - 3).to(dtype)
    y = torch.empty(rows, cols, dtype=dtype)
    y_half = torch.empty(half_rows, cols, dtype=dtype)
    small = torch.empty(rows, picks, dtype=dtype)
    n = rows * cols
    cases = [
        ("index_select", lambda: torch.index_select(x, 0, row_index, out=y), rows * 8 + 2 * n * size),
        ("index_add", lambda: torch.index_add(base, 0, target_index, x, out=y_half),
         rows * 8 + n * size + 2 * half_rows * cols * size),
        ("gather", lambda: torch.gather(x, 1, pick_index, out=small), rows * picks * (8 + size) + n * size),
        ("scatter_add", lambda: y.zero_().scatter_add_(1, pick_index, small), rows * picks * (8 + size) + n * size),
        ("cumsum_rows", lambda: torch.cumsum(x, 1, out=y), 2 * n * size),
        ("cumsum_columns", lambda: torch.cumsum(x, 0, out=y), 2 * n * size),
    ]
    for bench, fn, moved in cases:
        try:
            report(bench, name, rows, cols, moved, best_ms(repeats, fn))
        except RuntimeError as e:  # an op PyTorch 1.13 lacks for this dtype on the CPU
            print(json.dumps({"bench": bench, "impl": "pytorch", "dtype": name, "error": str(e).splitlines()[0]}))


if __name__ == "__main__":
    main()
