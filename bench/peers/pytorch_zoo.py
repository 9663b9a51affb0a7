#!/usr/bin/env python3
"""pytorch_zoo.py: PyTorch 1.13 on the CPU, timed on the workloads of halfgrad's `bench_zoo` (bench/bench_zoo.cpp
states them): one training step of each zoo model (bench/peers/zoo_models.py, the same architectures,
default widths) at batch 128 on 28 x 28 images (makemore: contexts of 3 characters) -- forward, cross-entropy, backward, AdamW (lr 1e-3, weight
decay 0.01), gradients set to None.

    bench/peers/pytorch_zoo.py [--quick] [--only NAME] [--threads N] [--batch N]

Prints one JSON line per model with bench_zoo's fields (impl "pytorch"). Run it with a tuned BLAS as
bench/peers/README.md says (scripts/bench-zoo-peers does). Tooling only: halfgrad's build and tests never run it.
"""
import argparse
import json
import os
import statistics
import sys
import time

try:
    import torch
except ImportError:
    if sys.executable != "/usr/bin/python3" and os.path.exists("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    sys.exit("pytorch_zoo.py: cannot import torch; install Debian's python3-torch")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_train import mapped_blas  # noqa: E402
from zoo_models import MODELS, char_mlp  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 timed steps instead of 20")
    parser.add_argument("--only", default="", help="only this model (mlp, lenet, resnet, vit, makemore)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--batch", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    for name in list(MODELS) + ["makemore"]:
        if args.only and name != args.only:
            continue
        chars = name == "makemore"
        model = char_mlp() if chars else MODELS[name](1, 28, 28, 10)
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        images = torch.randint(0, 27, (args.batch, 3)) if chars else torch.randn(args.batch, 1, 28, 28)
        labels = torch.randint(0, 27 if chars else 10, (args.batch,))

        def step():
            torch.nn.functional.cross_entropy(model(images), labels).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        step()
        step()
        times = []
        for _ in range(3 if args.quick else 20):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        print(json.dumps({"bench": "zoo", "model": name, "impl": "pytorch", "dtype": "f32", "threads": args.threads,
                          "batch": args.batch, "best_ms": min(times) * 1e3,
                          "median_ms": sorted(times)[len(times) // 2] * 1e3, "torch": torch.__version__,
                          "blas": mapped_blas()}), flush=True)


if __name__ == "__main__":
    main()
