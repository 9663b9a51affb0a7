#!/usr/bin/env python3
"""pytorch_layers.py: PyTorch 1.13 on the CPU, timed on the workloads of halfgrad's `bench_layers`
(bench/bench_layers.cpp states them), so the two can be read side by side from one run on one machine.

    bench/peers/pytorch_layers.py [--quick] [--only NAME] [--threads N]

Prints one JSON line per workload with bench_layers' fields: bench "layers", model, impl "pytorch", dtype,
threads, best_ms, median_ms (of 10 timed steps, --quick 3, after one warm-up). A step is the forward, the
sum of the output times a fixed random gradient, backward, and the parameters' gradients set to None.
nn.LSTM / nn.GRU run PyTorch's CPU RNN path (oneDNN where PyTorch 1.13 takes it, its own kernels otherwise).
Run it with a tuned BLAS as bench/peers/README.md says (Debian's torch links the system libblas.so.3, reference
BLAS by default, about 50x slower on the GEMMs): LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp,
OPENBLAS_CORETYPE=SkylakeX on AVX-512 CPUs, LD_PRELOAD of tcmalloc. Each line's "blas" key lists the BLAS
libraries mapped into the process.
Tooling only (Debian's python3-torch): halfgrad's build and tests never run it.
"""
import argparse
import json
import os
import sys
import time

try:
    import torch
    from torch import nn
except ImportError:
    if sys.executable != "/usr/bin/python3" and os.path.exists("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    sys.exit("pytorch_layers.py: cannot import torch; install Debian's python3-torch")


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_train import mapped_blas  # noqa: E402


class ResNetBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.relu(x + self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))))


def workloads():
    return [
        ("lstm_L2_H512_B32_T64", lambda: nn.LSTM(512, 512, num_layers=2), (64, 32, 512), True),
        ("gru_L2_H512_B32_T64", lambda: nn.GRU(512, 512, num_layers=2), (64, 32, 512), True),
        ("resnet_block_B64_C32_28x28", lambda: ResNetBlock(32), (64, 32, 28, 28), False),
        ("encoder_layer_d256_h4_T128_B16",
         lambda: nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True), (16, 128, 256), False),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 timed steps instead of 10 (smoke runs)")
    parser.add_argument("--only", default="", help="only the workload whose name starts with this")
    parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (default: torch's own)")
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    for name, build, shape, recurrent in workloads():
        if not name.startswith(args.only):
            continue
        model = build().train()
        x = torch.randn(*shape, requires_grad=True)
        forward = (lambda: model(x)[0]) if recurrent else (lambda: model(x))
        gy = torch.randn(forward().shape)

        def step():
            (forward() * gy).sum().backward()
            for p in model.parameters():
                p.grad = None

        step()
        times = []
        for _ in range(3 if args.quick else 10):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        times.sort()
        print(json.dumps({"bench": "layers", "model": name, "impl": "pytorch", "dtype": "f32",
                          "threads": torch.get_num_threads(), "best_ms": times[0] * 1e3,
                          "median_ms": times[len(times) // 2] * 1e3, "blas": mapped_blas()}), flush=True)


if __name__ == "__main__":
    main()
