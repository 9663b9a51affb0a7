#!/usr/bin/env python3
"""pytorch_ops.py: PyTorch 1.13 on the CPU, timed on the shapes of halfgrad's `bench_ops --bandwidth-only`
mask and indexing lines (bench/bandwidth_bench.cpp), so the two can be read side by side from one run on one machine.

    bench/peers/pytorch_ops.py [--quick] [--threads N] [--ops-only]

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
--ops-only: instead, the lines of `bench_ops --ops-only` (bench/op_bench.cpp states the shapes, values and
bytes): the losses through torch.nn.functional and conv_transpose2d, each "forward" under no_grad and
"forward_backward" as the loss (or the sum of the convolution) then .backward(), the leaves' .grad set to None
after each call; rows 4096 (--quick 256), cols 4096, best of 5 (--quick 3) after one warm-up call.
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
    parser.add_argument("--ops-only", action="store_true", help="the losses and conv_transpose2d (bench_ops --ops-only)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.ops_only:
        ops(args.quick)
        return
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


def op_line(bench, name, pass_name, shape, ms, moved=0, flops=0):
    line = {"bench": bench, "impl": "pytorch", "dtype": name, "pass": pass_name, "shape": shape,
            "threads": torch.get_num_threads(), "best_ms": ms}
    if moved:
        line.update(bytes=moved, gbs=moved / ms / 1e6)
    if flops:
        line["gflops"] = flops / ms / 1e6
    print(json.dumps(line))


def time_op(bench, name, shape, leaf, forward, params, repeats, forward_bytes=0, step_bytes=0, flops=0):
    """forward(leaf) -> a scalar; times it under no_grad, then with the backward, as op_bench.cpp does."""
    try:
        with torch.no_grad():
            op_line(bench, name, "forward", shape, best_ms(repeats, lambda: forward(leaf).item()), forward_bytes, flops)
        x = leaf.detach().clone().requires_grad_(True)

        def step():
            forward(x).backward()
            for t in [x] + params:
                t.grad = None
        op_line(bench, name, "forward_backward", shape, best_ms(repeats, step), step_bytes, 3 * flops)
    except RuntimeError as e:  # an op PyTorch 1.13 lacks for this dtype on the CPU
        print(json.dumps({"bench": bench, "impl": "pytorch", "dtype": name, "error": str(e).splitlines()[0]}))


def ops(quick):
    F = torch.nn.functional
    rows, cols, repeats = (256 if quick else 4096), 4096, (3 if quick else 5)
    gen = torch.Generator().manual_seed(1)

    def uniform(shape, low, high, dtype):
        return (torch.rand(shape, generator=gen) * (high - low) + low).to(dtype)

    for dtype, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        size = torch.tensor([], dtype=dtype).element_size()
        n = rows * cols
        x, t = uniform((rows, cols), -2, 2, dtype), uniform((rows, cols), -2, 2, dtype)
        unit, probs = uniform((rows, cols), 0, 1, dtype), torch.sigmoid(x.float()).to(dtype)
        row_log_probs, row_probs = F.log_softmax(x, 1), F.softmax(t, 1)
        class_rows, classes = rows * 4, cols // 4
        logits = uniform((class_rows, classes), -2, 2, dtype)
        log_probs = F.log_softmax(logits, 1)
        targets = torch.randint(0, classes, (class_rows,), generator=gen)
        pair, classified = f"[{rows}, {cols}]", f"[{class_rows}, {classes}]"
        elementwise = [
            ("mse_loss", x, lambda v: F.mse_loss(v, t)),
            ("l1_loss", x, lambda v: F.l1_loss(v, t)),
            ("smooth_l1_loss", x, lambda v: F.smooth_l1_loss(v, t, beta=1.0)),
            ("huber_loss", x, lambda v: F.huber_loss(v, t, delta=1.0)),
            ("binary_cross_entropy", probs, lambda v: F.binary_cross_entropy(v, unit)),
            ("binary_cross_entropy_with_logits", x, lambda v: F.binary_cross_entropy_with_logits(v, unit)),
            ("kl_div", row_log_probs, lambda v: F.kl_div(v, row_probs, reduction="batchmean")),
            ("cosine_similarity", x, lambda v: F.cosine_similarity(v, t, 1).mean()),
        ]
        for bench, leaf, fn in elementwise:
            time_op(bench, name, pair, leaf, fn, [], repeats, 2 * n * size, 5 * n * size)
        index_bytes = class_rows * 8
        classification = [
            ("cross_entropy", logits, lambda v: F.cross_entropy(v, targets)),
            ("cross_entropy_label_smoothing", logits, lambda v: F.cross_entropy(v, targets, label_smoothing=0.1)),
        ]
        for bench, leaf, fn in classification:
            time_op(bench, name, classified, leaf, fn, [], repeats, n * size + index_bytes,
                    3 * n * size + 2 * index_bytes)
        time_op("nll_loss", name, classified, log_probs, lambda v: F.nll_loss(v, targets), [], repeats,
                class_rows * (size + 8), 2 * class_rows * (size + 8) + n * size)
        for bench, batch, c_in, c_out, side, kernel, stride, padding in (
                ("conv_transpose2d_dcgan", 64, 128, 64, 16, 4, 2, 1),
                ("conv_transpose2d_unet", 16, 128, 64, 32, 2, 2, 0)):
            batch = batch // 8 if quick else batch
            xc = uniform((batch, c_in, side, side), -1, 1, dtype)
            w = uniform((c_in, c_out, kernel, kernel), -0.1, 0.1, dtype).requires_grad_(True)
            b = uniform((c_out,), -0.1, 0.1, dtype).requires_grad_(True)
            shape = f"x [{batch}, {c_in}, {side}, {side}] k{kernel} s{stride} p{padding} -> {c_out} channels"
            flops = 2.0 * batch * c_in * c_out * side * side * kernel * kernel
            time_op(bench, name, shape, xc,
                    lambda v, w=w, b=b, stride=stride, padding=padding:
                        F.conv_transpose2d(v, w, b, stride=stride, padding=padding).sum(),
                    [w, b], repeats, flops=flops)


if __name__ == "__main__":
    main()
